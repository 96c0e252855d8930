"""Intervals for held-out success with seeds as the unit of replication.

A comparison evaluates every seed of an arm on the same held-out problems, so its outcomes form a seeds x
problems table: two crossed sources of variation, the seed (the training run) and the problem (which held-out
problems were drawn). The mean over the table estimates what the method reaches on the task distribution;
its variance is

    Var(mean) = sigma_seed^2 / S + sigma_problem^2 / P + sigma_residual^2 / (S P),

estimated from the two-way analysis of variance (mean squares of seeds, of problems and of the residual):
the seed part, the variance of the seed means over S, and the problem part, the variance of the problem means
over P less the residual it holds. The seed part is floored at the residual's share of it (sigma_residual^2 /
(S P)): seeds whose means tie by chance, though they solved different problems, cannot shrink the interval
below what their disagreement problem by problem implies. The critical value weights each part's t quantile by
its share (Cochran and Cox). With three seeds the seed part has two degrees of freedom, so its interval is wide,
as it should be. Intervals of success rates are clipped to [0, 1] (differences of rates to [-1, 1]), which
never drops the true value and leaves the p-values as they are. Pooling the S x P answers into one binomial
(Wilson) interval treats them as independent and ignores the spread between seeds; it is kept per seed, as
detail. docs/DESIGN.md says why this and not a bootstrap; tests/test_interval_coverage.py measures coverage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

Z_95 = 1.959964  # two-sided 95% quantile of the standard normal

Counts = tuple[int, int]  # (successes, tasks evaluated)
Outcomes = Sequence[Sequence[float]] | np.ndarray  # seeds x problems


def wilson_interval(successes: int, total: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion: inside [0, 1] by construction, and sensible at 0 and
    at `total` successes, where the normal approximation collapses to a point. No tasks: [0, 1]."""
    if total <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= total:
        raise ValueError(f"{successes} successes out of {total}")
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def pooled(counts: Sequence[Counts]) -> tuple[float, float, float] | None:
    """(success rate, low, high) of the successes and tasks summed over runs, with the 95% Wilson interval that
    treats every answer as independent; None without any evaluated task. Per-seed detail only: across seeds
    that share their problems it is too narrow (see the module docstring)."""
    successes, total = sum(c[0] for c in counts), sum(c[1] for c in counts)
    if total <= 0:
        return None
    low, high = wilson_interval(successes, total)
    return successes / total, low, high


@dataclass(frozen=True)
class Term:
    """One variance component of a mean: its value and its degrees of freedom."""

    value: float
    df: float


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95% interval; `low`/`high` are NaN where the design cannot say (one seed of a trained
    arm: the spread between seeds is unknown)."""

    mean: float
    low: float
    high: float
    se: float
    seeds: int
    problems: int

    @property
    def width(self) -> float:
        return self.high - self.low


@dataclass(frozen=True)
class Difference(Estimate):
    """A difference of two means (first minus second) with its interval and the two-sided p-value of the test
    of no difference, at the level of the design (seeds, and problems paired where both sides share them)."""

    p_value: float = math.nan
    paired_problems: bool = True


@dataclass(frozen=True)
class Components:
    """The variance parts of one seeds x problems table's mean: the seed part (the variance of the seed means
    over S: sigma_seed^2 / S + sigma_residual^2 / (S P), df S - 1; floored at the residual part, then with the
    residual's df), the residual mean square over S P (what the problem means' variance holds besides the
    problems), and the problem means themselves."""

    seed: Term | None
    residual: float
    problem_means: np.ndarray


def components(table: np.ndarray, fixed_model: bool = False) -> Components:
    """A fixed model (one model evaluated greedily: every seed the same answers) has no seed part and no
    residual: its answers vary with the problem only."""
    seeds, problems = table.shape
    problem_means = table.mean(axis=0)
    if fixed_model or seeds < 2:
        return Components(None, 0.0, problem_means)
    seed_means = table.mean(axis=1)
    seed = Term(float(seed_means.var(ddof=1)) / seeds, seeds - 1)
    if problems < 2:
        return Components(seed, 0.0, problem_means)
    residual = table - seed_means[:, None] - problem_means[None, :] + table.mean()
    residual_df = (seeds - 1) * (problems - 1)
    share = float((residual**2).sum()) / residual_df / (seeds * problems)
    return Components(floored_seed_term(seed, Term(share, residual_df)), share, problem_means)


def floored_seed_term(seed: Term, residual: Term) -> Term:
    """The seed part never below the residual's share of the seed means' variance: where the seed means spread
    less than the seeds' disagreement problem by problem implies (three seeds at 61/80 each, on different
    problems), the residual estimates it, on its own degrees of freedom. Flooring on the seed term's S - 1 df
    instead covered 99-100% for 95% where seeds do not differ; see tests/test_interval_coverage.py."""
    return seed if seed.value >= residual.value else residual


def problem_term(problem_means: np.ndarray, residual: float) -> Term | None:
    """sigma_problem^2 / P: the variance of the problem means (or of their differences) over P, less the
    residual it holds; none where that is not positive (then the variance is the seed part alone, floored at the
    residual: it cannot collapse while seeds disagree on any problem)."""
    count = problem_means.size
    if count < 2:
        return None
    value = float(problem_means.var(ddof=1)) / count - residual
    return Term(value, count - 1) if value > 0 else None


def welch_term(terms: Sequence[Term]) -> Term | None:
    """Several seed terms (one per arm) as one, with Welch-Satterthwaite degrees of freedom: Welch's test's
    way of pooling the seed spreads of two arms."""
    if not terms:
        return None
    if len(terms) == 1:
        return terms[0]
    total = sum(t.value for t in terms)
    denominator = sum(t.value * t.value / t.df for t in terms)
    return Term(total, total * total / denominator if denominator > 0 else math.inf)


def t_quantile(terms: Sequence[Term], confidence: float) -> float:
    """The critical value for a mean whose variance is the sum of `terms`: each term's own t quantile weighted
    by its share of the variance (Cochran and Cox). One pooled
    Satterthwaite df over a seed term with two degrees of freedom and a precise problem term was liberal here
    (93% for 95% in simulation: the df grows exactly when the seed term comes out small); the weighting keeps
    the level."""
    total = sum(t.value for t in terms)
    level = 0.5 + confidence / 2
    if total <= 0:
        return float(special.ndtri(level))
    return sum(t.value * float(special.stdtrit(t.df, level)) for t in terms if t.value > 0) / total


def _interval(mean: float, terms: Sequence[Term], confidence: float) -> tuple[float, float, float, float]:
    """(low, high, se, critical value) of a mean whose variance is the sum of `terms`."""
    se = math.sqrt(sum(t.value for t in terms))
    quantile = t_quantile(terms, confidence)
    return mean - quantile * se, mean + quantile * se, se, quantile


RATE = (0.0, 1.0)
RATE_DIFFERENCE = (-1.0, 1.0)


def is_rate(table: np.ndarray) -> bool:
    """A table of 1/0 successes, whose mean is a success rate (rewards are not bounded here)."""
    return bool(np.isin(table, (0.0, 1.0)).all())


def clip(low: float, high: float, bounds: tuple[float, float] | None) -> tuple[float, float]:
    """An interval cut to the values its mean can take: the true value lies inside, so none is lost, and the
    p-value (of 0, inside [-1, 1]) is that of the uncut interval."""
    if bounds is None:
        return low, high
    return min(max(low, bounds[0]), bounds[1]), max(min(high, bounds[1]), bounds[0])


def as_table(rows: Outcomes) -> np.ndarray:
    table = np.asarray(rows, dtype=float)
    if table.ndim != 2 or table.size == 0:
        raise ValueError("a seeds x problems table needs at least one seed and one problem")
    return table


def seed_level_interval(
    rows: Outcomes, fixed_model: bool = False, confidence: float = 0.95, rate: bool | None = None
) -> Estimate:
    """The mean of a seeds x problems table of outcomes (1/0 successes, the mean of a problem's draws, or rewards)
    with its interval over both seeds and problems. One seed of a trained arm: the mean, with NaN bounds (its
    spread is unknown); `fixed_model` (an untrained model evaluated greedily) has no spread between seeds. `rate`:
    the outcomes are successes, so the interval is cut to [0, 1]; None reads it off the table (all 1/0), which
    cannot tell a mean of draws (0.25, 0.5, ...) from a reward."""
    table = as_table(rows)
    seeds, problems = table.shape
    mean = float(table.mean())
    if seeds < 2 and not fixed_model:
        return Estimate(mean, math.nan, math.nan, math.nan, seeds, problems)
    low, high, se, _ = _interval(mean, table_terms(table, fixed_model), confidence)
    rate = is_rate(table) if rate is None else rate
    return Estimate(mean, *clip(low, high, RATE if rate else None), se, seeds, problems)


def table_terms(table: np.ndarray, fixed_model: bool = False) -> list[Term]:
    """The variance terms of one seeds x problems table's mean: its seed part and its problem part, where known."""
    parts = components(table, fixed_model)
    return [t for t in (parts.seed, problem_term(parts.problem_means, parts.residual)) if t is not None]


def difference_interval(
    first: Outcomes,
    second: Outcomes,
    *,
    first_fixed: bool = False,
    second_fixed: bool = False,
    paired_problems: bool = True,
    confidence: float = 0.95,
    rate: bool | None = None,
) -> Difference:
    """Mean of `first` minus mean of `second`, each a seeds x problems table. Seeds are independent between the
    two (each arm trains its own); with `paired_problems` both tables hold the same problems in the same
    columns, and the problem term is that of the per-problem differences, which removes what the problems'
    difficulty shares. Without, the two means' variances add. `rate` as for `seed_level_interval` (a difference
    of rates is cut to [-1, 1])."""
    a, b = as_table(first), as_table(second)
    mean = float(a.mean() - b.mean())
    if (a.shape[0] < 2 and not first_fixed) or (b.shape[0] < 2 and not second_fixed):
        return Difference(mean, *(math.nan,) * 3, a.shape[0], a.shape[1], paired_problems=paired_problems)
    if paired_problems and a.shape[1] != b.shape[1]:
        raise ValueError(f"paired problems need the same problems: {a.shape[1]} against {b.shape[1]}")
    pa, pb = components(a, first_fixed), components(b, second_fixed)
    if paired_problems:
        problems = [problem_term(pa.problem_means - pb.problem_means, pa.residual + pb.residual)]
    else:
        problems = [problem_term(pa.problem_means, pa.residual), problem_term(pb.problem_means, pb.residual)]
    seeds = welch_term([t for t in (pa.seed, pb.seed) if t is not None])
    terms = [t for t in (seeds, *problems) if t is not None]
    low, high, se, _ = _interval(mean, terms, confidence)
    rate = is_rate(a) and is_rate(b) if rate is None else rate
    low, high = clip(low, high, RATE_DIFFERENCE if rate else None)
    p_value = two_sided_p(mean, se, terms)
    return Difference(mean, low, high, se, a.shape[0], a.shape[1], p_value=p_value, paired_problems=paired_problems)


def paired_difference(differences: Outcomes, confidence: float = 0.95, rate: bool | None = None) -> Difference:
    """The mean of a seeds x problems table of differences, each cell two measures of one seed on one problem
    (after minus before; a reflection minus its control; two arms whose runs of a seed are one block, having
    drawn the same training tasks): the seed is still the unit, its spread now that of the differences. `rate`:
    differences of successes, cut to [-1, 1]; None reads it off the table (all -1/0/1)."""
    table = as_table(differences)
    seeds, problems = table.shape
    mean = float(table.mean())
    if seeds < 2:
        return Difference(mean, math.nan, math.nan, math.nan, seeds, problems)
    terms = table_terms(table)
    low, high, se, _ = _interval(mean, terms, confidence)
    rate = bool(np.isin(table, (-1.0, 0.0, 1.0)).all()) if rate is None else rate
    low, high = clip(low, high, RATE_DIFFERENCE if rate else None)
    return Difference(mean, low, high, se, seeds, problems, p_value=two_sided_p(mean, se, terms))


def two_sided_p(mean: float, se: float, terms: Sequence[Term]) -> float:
    """The p-value of "no difference" that agrees with the interval: the largest confidence level whose
    interval leaves out 0, where the Cochran-Cox critical value reaches |mean| / se (it grows with the level)."""
    if se <= 0:
        return 1.0 if mean == 0 else 0.0
    statistic = abs(mean) / se
    top = 1.0 - 1e-12
    if t_quantile(terms, top) <= statistic:
        return 1.0 - top
    level = optimize.brentq(lambda c: t_quantile(terms, c) - statistic, 0.0, top, xtol=1e-13, rtol=1e-13)
    return 1.0 - float(level)


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values, in their order: the k-th smallest times (m - k + 1),
    m the family's size, made monotone (never below a smaller p's adjusted value) and capped at 1. Rejecting
    where the adjusted p < alpha keeps the chance of any false rejection in the family below alpha. NaN (no
    test) stays NaN and does not count in m."""
    known = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(known):
        running = max(running, min(1.0, (len(known) - rank) * p))
        adjusted[index] = running
    return adjusted
