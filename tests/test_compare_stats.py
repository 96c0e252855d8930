"""Seed-level intervals of `r3l compare`: hand-computed numbers, and coverage in simulated comparisons."""

import math

import numpy as np
import pytest

from r3l.compare.stats import (
    Term,
    components,
    difference_interval,
    holm_adjust,
    paired_difference,
    pooled,
    seed_level_interval,
    t_quantile,
    wilson_interval,
)

# 3 seeds x 4 problems. Seed means 0.75, 0.75, 0.5 (grand mean 2/3): their variance 1/48, over 3 seeds 1/144.
# Problem means 2/3, 1/3, 2/3, 1: variance 2/27, over 4 problems 1/54. Residuals (Y - seed - problem + grand)
# squared sum to 11/6 over (3-1)(4-1) = 6 df: MS 11/36, over S P = 12: 11/432. The seed means spread less (1/144)
# than the residual implies for them (11/432): the seed part is floored at 11/432, on the residual's 6 df. The
# problem part, 1/54 - 11/432, is negative: the problems add nothing beyond the residual, and the variance of the
# mean is the floored seed part alone, with the critical value t(6).
TABLE = [[1, 0, 1, 1], [1, 1, 0, 1], [0, 0, 1, 1]]
T_975_2, T_975_3, T_975_6 = 4.302653, 3.182446, 2.446912


def test_components_of_a_hand_computed_table():
    parts = components(np.array(TABLE, dtype=float))
    assert parts.seed.value == pytest.approx(11 / 432)  # floored: 1/144 from the seed means alone
    assert parts.seed.df == 6
    assert parts.residual == pytest.approx(11 / 432)
    assert parts.problem_means.tolist() == pytest.approx([2 / 3, 1 / 3, 2 / 3, 1])
    # seeds that spread more than the residual keep their own part on S - 1 df: seed means 1, 3/4, 1/4, their
    # variance (1/9 + 1/144 + 25/144) / 2 = 7/48, over 3 seeds 7/144
    spread = components(np.array([[1, 1, 1, 1], [1, 1, 0, 1], [0, 0, 0, 1]], dtype=float))
    assert (spread.seed.value, spread.seed.df) == (pytest.approx(7 / 144), 2)
    assert spread.residual < 7 / 144


def test_seed_level_interval_by_hand():
    estimate = seed_level_interval(TABLE)
    half = T_975_6 * math.sqrt(11 / 432)
    assert estimate.mean == pytest.approx(2 / 3)
    assert estimate.se == pytest.approx(math.sqrt(11 / 432))
    assert (estimate.low, estimate.high) == pytest.approx((2 / 3 - half, 1.0), abs=1e-5)  # 1.057, cut to 1
    assert (estimate.seeds, estimate.problems) == (3, 4)


def bfcl_grpo() -> np.ndarray:
    """BFCL GRPO's three seeds (issue 53): 61 of 80 each, 55 problems solved by all, 67 by some: 6 problems by
    two seeds, 6 by one, 13 by none."""
    table = np.zeros((3, 80))
    table[:, :55] = 1
    for k in range(6):
        table[[k % 3, (k + 1) % 3], 55 + k] = 1
        table[k % 3, 61 + k] = 1
    return table


def test_seeds_that_tie_on_different_problems_keep_their_disagreement():
    """The seed means tie (variance 0). Residual: 12 problems split 2:1 or 1:2, each 2/3 of squares: 8 over
    2 x 79 df, over S P = 240: 8/37920. Problem means: 55 ones, 6 x 2/3, 6 x 1/3, 13 zeros; sum of squares
    55 + 30/9, less 80 x 0.7625^2: 11.8208 over 79 df, over 80 problems: 0.0018704. Before, the interval had
    the problem part alone (0.0018704 - 8/37920 = 0.0016595): [0.681, 0.844]; floored, the seed part is the
    residual's and the variance that of the problem means."""
    table = bfcl_grpo()
    assert table.sum(axis=1).tolist() == [61] * 3 and (table.sum(axis=0) > 0).sum() == 67
    problems_var = (55 + 30 / 9 - 80 * 0.7625**2) / 79 / 80
    residual = 8 / 158 / 240
    estimate = seed_level_interval(table)
    assert estimate.se**2 == pytest.approx(problems_var)
    t_158, t_79 = 1.975092, 1.990450
    quantile = (residual * t_158 + (problems_var - residual) * t_79) / problems_var
    half = quantile * math.sqrt(problems_var)
    assert (estimate.low, estimate.high) == pytest.approx((0.7625 - half, 0.7625 + half), abs=1e-5)
    assert (round(estimate.low, 3), round(estimate.high, 3)) == (0.676, 0.849)
    assert estimate.width > 1.99045 * 2 * math.sqrt(problems_var - residual)  # wider than the collapsed one


def test_rates_stay_inside_their_range_and_rewards_are_not_cut():
    near_one = seed_level_interval([[1, 1, 1, 1], [1, 1, 0, 1], [1, 1, 1, 1]])
    assert near_one.high == 1.0 and near_one.mean + 2 * near_one.se > 1  # cut at 1: the uncut bound lies above
    rewards = seed_level_interval([[0.9, 1.0, 0.5, 1.0], [1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    assert rewards.high > 1.0  # not a rate: nothing says where it stops
    wide = difference_interval([[1, 1, 1, 1], [1, 1, 0, 1], [1, 1, 1, 1]], [[0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]])
    assert wide.high == 1.0 and wide.mean + 2 * wide.se > 1 and wide.p_value < 0.05
    paired = paired_difference([[1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 1, 0]])
    assert paired.high == 1.0 and paired.low > -1.0


def test_holm_adjust_by_hand():
    # m = 6: 0.010 x 6, 0.016 x 5, 0.030 x 4, 0.2 x 3, 0.5 x 2 (1.0), 0.9 x 1 raised to 1.0 (monotone)
    assert holm_adjust([0.010, 0.016, 0.030, 0.2, 0.5, 0.9]) == pytest.approx([0.06, 0.08, 0.12, 0.6, 1.0, 1.0])
    # in the order given: 0.01 x 3, 0.03 x 2, 0.04 x 1 raised to 0.06; a row without a test stays out of m
    adjusted = holm_adjust([0.04, math.nan, 0.01, 0.03])
    assert adjusted[0] == pytest.approx(0.06) and math.isnan(adjusted[1])
    assert adjusted[2:] == pytest.approx([0.03, 0.06])
    assert holm_adjust([]) == [] and holm_adjust([0.3]) == [0.3]


def test_a_fixed_model_varies_with_the_problems_only():
    # an untrained model evaluated greedily: [1, 0, 1, 1] on every seed; variance 1/4 over 4 problems
    estimate = seed_level_interval([[1, 0, 1, 1]] * 3, fixed_model=True)
    assert estimate.mean == 0.75
    assert estimate.se == pytest.approx(0.25)
    assert (estimate.low, estimate.high) == (0.0, 1.0)  # 0.75 -+ 3.18 x 0.25, cut to a rate's range


def test_one_trained_seed_has_no_interval():
    estimate = seed_level_interval([[1, 0, 1, 1]])
    assert estimate.mean == 0.75
    assert math.isnan(estimate.low) and math.isnan(estimate.high)


def test_difference_against_a_fixed_model_by_hand():
    # per-problem differences -1/3, -2/3, -1/3, 1: variance 59/108, over 4 problems 59/432, less the arm's
    # residual 11/432: 1/9 (df 3); the arm's seed part floored at 11/432 (df 6). Critical value: Cochran-Cox.
    difference = difference_interval(TABLE, [[1, 1, 1, 0]] * 3, second_fixed=True)
    seed, problems = 11 / 432, 1 / 9
    quantile = (seed * T_975_6 + problems * T_975_3) / (seed + problems)
    half = quantile * math.sqrt(seed + problems)
    assert difference.mean == pytest.approx(2 / 3 - 3 / 4)
    assert half > 1  # cut to a difference of rates' range
    assert (difference.low, difference.high) == (-1.0, 1.0)
    assert difference.se == pytest.approx(math.sqrt(seed + problems))
    assert 0.5 < difference.p_value <= 1


def test_cochran_cox_weights_each_terms_quantile():
    assert t_quantile([Term(1.0, 2)], 0.95) == pytest.approx(T_975_2, abs=1e-5)
    assert t_quantile([Term(1.0, 2), Term(3.0, 3)], 0.95) == pytest.approx((T_975_2 + 3 * T_975_3) / 4, abs=1e-5)


def test_p_value_agrees_with_the_interval():
    rng = np.random.default_rng(0)
    better = (rng.random((3, 200)) < 0.8).astype(float)
    worse = (rng.random((3, 200)) < 0.5).astype(float)
    clear = difference_interval(better, worse)
    assert clear.low > 0 and clear.p_value < 0.05
    level = 1 - clear.p_value  # the interval at exactly this level touches 0
    edge = difference_interval(better, worse, confidence=level)
    assert edge.low == pytest.approx(0.0, abs=1e-6)


def test_unpaired_problems_add_both_variances():
    a, b = np.ones((3, 4)), np.zeros((3, 5))
    a[0, 0] = b[1, 1] = 0.5
    with pytest.raises(ValueError, match="same problems"):
        difference_interval(a, b)
    unpaired = difference_interval(a, b, paired_problems=False)
    assert not unpaired.paired_problems
    assert unpaired.se**2 == pytest.approx(seed_level_interval(a).se ** 2 + seed_level_interval(b).se ** 2, rel=0.2)


def simulated_arm(rng, seeds, problem_shift, true_mean, seed_spread):
    """Outcomes of `seeds` training runs on shared problems: success probability = true mean + the seed's
    effect (normal) + the problem's effect (uniform, drawn per comparison), never outside [0, 1]."""
    seed_effect = rng.normal(0.0, seed_spread, seeds)
    probability = true_mean + seed_effect[:, None] + problem_shift[None, :]
    assert probability.min() >= 0 and probability.max() <= 1
    return (rng.random(probability.shape) < probability).astype(float)


@pytest.mark.parametrize("seed_spread, problem_spread", [(0.05, 0.25), (0.02, 0.3), (0.08, 0.15)])
def test_seed_level_interval_covers_the_true_mean(seed_spread, problem_spread):
    """2,000 simulated arms of 3 seeds on 200 problems: the interval covers the true mean 93-97% of the time;
    the Wilson interval on the seeds' answers pooled falls short."""
    rng = np.random.default_rng(12345)
    trials, true_mean = 2000, 0.55
    covered = pooled_covered = 0
    for _ in range(trials):
        problems = rng.uniform(-problem_spread, problem_spread, 200)
        table = simulated_arm(rng, 3, problems, true_mean, seed_spread)
        estimate = seed_level_interval(table)
        covered += estimate.low <= true_mean <= estimate.high
        _, low, high = pooled([(int(row.sum()), row.size) for row in table])
        pooled_covered += low <= true_mean <= high
    assert 0.93 <= covered / trials <= 0.97
    assert pooled_covered / trials < 0.90


def test_difference_interval_covers_the_true_difference():
    rng = np.random.default_rng(7)
    trials, covered = 2000, 0
    for _ in range(trials):
        problems = rng.uniform(-0.25, 0.25, 200)
        first = simulated_arm(rng, 3, problems, 0.50, 0.04)
        second = simulated_arm(rng, 3, 0.7 * problems + rng.uniform(-0.05, 0.05, 200), 0.45, 0.04)
        difference = difference_interval(first, second)
        covered += difference.low <= 0.05 <= difference.high
    assert 0.93 <= covered / trials <= 0.97


def test_a_paired_difference_is_the_seed_level_interval_of_the_differences_with_its_p_value():
    first = np.array(TABLE, dtype=float)
    second = np.array([[0, 0, 1, 0], [1, 0, 0, 1], [0, 0, 0, 1]], dtype=float)
    paired, direct = paired_difference(first - second), seed_level_interval(first - second)
    # differences: seed means 0.5, 0.25, 0.25 (mean 1/3, their variance 1/48, over 3 seeds 1/144); a difference
    # is cut to [-1, 1], the table of differences read as outcomes (all 0/1 here) to [0, 1]
    assert paired.mean == pytest.approx(1 / 3) and paired.se == direct.se and paired.high == direct.high
    assert direct.low == 0.0
    assert paired.low < 0 < paired.high and paired.p_value > 0.05
    assert math.isnan(paired_difference(first[:1] - second[:1]).low)  # one seed: no spread, no interval


def test_seeds_that_are_blocks_give_a_paired_interval_that_covers_and_is_narrower():
    """Two arms whose runs of a seed share that seed's effect (the same training tasks drawn): 2,000 simulated
    comparisons of 3 seeds on 200 problems. The paired interval covers the true difference 93-97 % of the time
    and is narrower than the interval that takes the seeds as independent."""
    rng = np.random.default_rng(11)
    trials, covered, widths = 2000, 0, []
    for _ in range(trials):
        problems = rng.uniform(-0.15, 0.15, 200)
        block = rng.normal(0.0, 0.06, 3)[:, None]  # the seed's own draw of training tasks, shared by both arms
        first, second = (
            (rng.random((3, 200)) < mean + block + rng.normal(0.0, 0.015, (3, 1)) + problems).astype(float)
            for mean in (0.50, 0.45)
        )
        paired = paired_difference(first - second)
        covered += paired.low <= 0.05 <= paired.high
        widths.append((paired.width, difference_interval(first, second).width))
    assert 0.93 <= covered / trials <= 0.97
    paired_width, independent_width = np.median(np.array(widths), axis=0)
    assert paired_width < 0.8 * independent_width


def test_wilson_interval_by_hand():
    low, high = wilson_interval(115, 200)
    assert (low, high) == pytest.approx((0.50571, 0.64147), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
