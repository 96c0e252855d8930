"""Coverage of `r3l compare`'s intervals in simulated comparisons with a known truth (issue 53).

Each comparison is a seeds x problems table of 0/1 outcomes: a problem's difficulty (its success probability,
drawn per comparison), plus the seed's effect (normal, per training run), then a Bernoulli draw per cell. The
target is the mean over the distribution of problems and seeds (`MEAN`, or `EFFECT` between two arms that share
their problems). 1,000 comparisons a setting; 95% intervals must cover 92-98% of the time (1,000 draws of a 95%
event: standard error 0.7 points), for 3 and 5 seeds, in settings where seeds often tie (no seed effect, few
problems, or problems nearly always or never solved), where the floor on the seed part decides the width.
"""

from __future__ import annotations

import numpy as np
import pytest

from r3l.compare.stats import difference_interval, seed_level_interval

TRIALS = 1000
MEAN, EFFECT = 0.5, 0.05

# (problems, problem difficulty, seed effect's sd); difficulty: "spread" uniform on MEAN +- 0.15 (a typical
# held-out set), "flat" every problem at MEAN, "sharp" a problem solved with probability 0.97 or 0.03
SETTINGS = [
    (80, "spread", 0.05),  # seeds differ, as trained runs do
    (20, "spread", 0.10),  # seeds differ much, few problems: the seed part dominates
    (80, "spread", 0.0),  # seeds do not differ: the BFCL case (three seeds at 61/80)
    (10, "flat", 0.0),  # few problems alike: seed means tie often, the residual is all there is
    (20, "sharp", 0.0),  # problems nearly decided: seeds tie in 1 of 4 comparisons
]


def problem_difficulty(rng: np.random.Generator, problems: int, difficulty: str) -> np.ndarray:
    """trials x 1 x problems: each problem's success probability, drawn per comparison."""
    if difficulty == "spread":
        return rng.uniform(MEAN - 0.15, MEAN + 0.15, (TRIALS, 1, problems))
    if difficulty == "flat":
        return np.full((TRIALS, 1, problems), MEAN)
    return np.where(rng.random((TRIALS, 1, problems)) < 0.5, 0.97, 0.03)


def seed_effects(rng: np.random.Generator, seeds: int, seed_sd: float) -> np.ndarray:
    """trials x seeds x 1: each training run's effect, normal, cut at 3 sd (probabilities stay inside [0, 1])."""
    return np.clip(rng.normal(0.0, seed_sd, (TRIALS, seeds, 1)), -3 * seed_sd, 3 * seed_sd)


def outcomes(rng: np.random.Generator, probability: np.ndarray) -> np.ndarray:
    """trials x seeds x problems: one Bernoulli draw per cell."""
    assert probability.min() >= 0 and probability.max() <= 1
    return (rng.random(probability.shape) < probability).astype(float)


def seeds_tie(tables: np.ndarray) -> np.ndarray:
    """Per comparison: every seed's mean the same (the seed part of the old interval was exactly 0)."""
    means = tables.sum(axis=2)
    return means.max(axis=1) == means.min(axis=1)


def covers(estimates, truth: float) -> np.ndarray:
    return np.array([e.low <= truth <= e.high for e in estimates])


def upper_limit(difficulty: str, seed_sd: float) -> float:
    """0.98, but 0.995 where seeds do not differ at all: there the seed part is noise alone, floored at the
    residual (its expectation grows by about a third) and read on its S - 1 df whenever it comes out above the
    residual. Measured 93.4-99.4% there (the interval before the floor: 93.6-98.9%): known to be conservative
    where the seeds are interchangeable, not to be read as exactly 95%."""
    return 0.995 if seed_sd == 0 else 0.98


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize("problems, difficulty, seed_sd", SETTINGS)
def test_the_mean_of_one_arm_covers(seeds, problems, difficulty, seed_sd):
    rng = np.random.default_rng(53 + 7 * seeds + problems)
    problem = problem_difficulty(rng, problems, difficulty)
    tables = outcomes(rng, problem + seed_effects(rng, seeds, seed_sd))
    covered = covers(map(seed_level_interval, tables), MEAN)
    assert 0.92 <= covered.mean() <= upper_limit(difficulty, seed_sd), f"coverage {covered.mean():.3f}"


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize("problems, difficulty, seed_sd", SETTINGS)
def test_a_difference_of_two_arms_on_shared_problems_covers(seeds, problems, difficulty, seed_sd):
    """The second arm answers the same problems (paired) with its own seeds, EFFECT lower (no effect where
    problems are sharp: their probabilities have no room to move)."""
    effect = 0.0 if difficulty == "sharp" else EFFECT
    rng = np.random.default_rng(530 + 7 * seeds + problems)
    problem = problem_difficulty(rng, problems, difficulty)
    first = outcomes(rng, problem + seed_effects(rng, seeds, seed_sd))
    second = outcomes(rng, problem - effect + seed_effects(rng, seeds, seed_sd))
    covered = covers(map(difference_interval, first, second), effect)
    assert 0.92 <= covered.mean() <= upper_limit(difficulty, seed_sd), f"coverage {covered.mean():.3f}"


@pytest.mark.parametrize("seeds, problems", [(3, 10), (5, 8)])
def test_seeds_that_tie_do_not_collapse_the_interval(seeds, problems):
    """Comparisons where every seed solved as many problems (not the same ones), drawn from problems alike (at
    0.5 or 0.8, no seed effect): the seed means' variance is 0, and the interval built on it alone covered 49-60%
    of them. With the seed part floored at the residual it covers them about as often as the rest."""
    rng = np.random.default_rng(5300 + seeds)
    truth = np.repeat([MEAN, 0.8], 10 * TRIALS)
    tables = outcomes(rng, np.broadcast_to(truth[:, None, None], (truth.size, seeds, problems)))
    tied = seeds_tie(tables)
    assert tied.sum() >= 50
    estimates = map(seed_level_interval, tables[tied])
    covered = np.array([e.low <= t <= e.high for e, t in zip(estimates, truth[tied], strict=True)])
    assert covered.mean() >= 0.9, f"coverage {covered.mean():.3f} of {tied.sum()} tied comparisons"
