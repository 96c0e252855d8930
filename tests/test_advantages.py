"""Advantage functions on hand-computed numbers."""

import pytest
import torch

from r3l.algorithms import ADVANTAGES
from r3l.algorithms.advantages import group_mean
from r3l.errors import UserError


def adv(name, rewards, groups, **params):
    return ADVANTAGES.get(name)(
        torch.tensor(rewards, dtype=torch.float32), torch.tensor(groups, dtype=torch.int64), **params
    )


def close(actual, expected, atol=1e-5):
    assert actual.tolist() == pytest.approx(expected, abs=atol)


# Two groups with non-contiguous ids: group 0 = [3, 0, 0] (mean 1), group 9 = [5, 1] (mean 3).
MIXED_R = [3.0, 5.0, 0.0, 0.0, 1.0]
MIXED_G = [0, 9, 0, 0, 9]


def test_registry_names_and_unknown():
    assert set(ADVANTAGES.names()) == {"grpo", "grpo_no_std", "rloo", "positive_amplified", "opmd", "raft"}
    with pytest.raises(UserError, match="unknown advantage function 'nope'"):
        ADVANTAGES.get("nope")


def test_group_mean():
    # group 0 mean (3+0+0)/3 = 1, group 9 mean (5+1)/2 = 3
    close(group_mean(torch.tensor(MIXED_R), torch.tensor(MIXED_G)), [1.0, 3.0, 1.0, 1.0, 3.0])


def test_grpo_one_group_unbiased():
    # mean .5, deviations ±.5, unbiased var = 4*.25/3 = 1/3, std .57735 -> ±.5/.57735 = ±.866025
    close(adv("grpo", [1, 0, 0, 1], [0, 0, 0, 0]), [0.866025, -0.866025, -0.866025, 0.866025])


def test_grpo_one_group_biased():
    # biased std = sqrt(4*.25/4) = .5 -> ±.5/(.5 + 1e-6) ≈ ±0.999998
    close(adv("grpo", [1, 0, 0, 1], [0] * 4, std="biased"), [0.999998, -0.999998, -0.999998, 0.999998])


def test_grpo_two_groups():
    # group 0: dev [2,-1,-1], var (4+1+1)/2 = 3, std 1.732051 -> [1.154701, -0.577350, -0.577350]
    # group 9: dev [2,-2], var 8/1, std 2.828427 -> [0.707107, -0.707107]
    close(adv("grpo", MIXED_R, MIXED_G), [1.154701, 0.707107, -0.577350, -0.577350, -0.707107])


def test_grpo_degenerate_groups_are_zero():
    # size-1 group (id 5) and an all-equal group (id 2): no NaN, advantage 0
    out = adv("grpo", [0.7, 1.0, 1.0, 1.0, 0.0], [5, 2, 2, 3, 3])
    close(out, [0.0, 0.0, 0.0, 0.707107, -0.707107])
    assert torch.isfinite(out).all()


def test_grpo_bad_std():
    with pytest.raises(ValueError, match="unbiased"):
        adv("grpo", [1, 0], [0, 0], std="population")


def test_grpo_no_std_and_opmd():
    # r - group mean: [3-1, 5-3, 0-1, 0-1, 1-3]
    expected = [2.0, 2.0, -1.0, -1.0, -2.0]
    close(adv("grpo_no_std", MIXED_R, MIXED_G), expected)
    close(adv("opmd", MIXED_R, MIXED_G), expected)


def test_rloo():
    # group 0: 3 - mean(0,0) = 3; 0 - mean(3,0) = -1.5 (twice); group 9: 5-1 = 4, 1-5 = -4; size-1 group -> 0
    close(adv("rloo", MIXED_R + [0.9], MIXED_G + [4]), [3.0, 4.0, -1.5, -1.5, -4.0, 0.0])


def test_positive_amplified_default():
    # mean .375: r=1 >= 1 -> s=1.0; A=.125 > 0 -> 3*.125 = .375; A=-.375 stays
    close(adv("positive_amplified", [1, 0.5, 0, 0], [0] * 4), [1.0, 0.375, -0.375, -0.375])


def test_positive_amplified_params():
    # s=3 (paper text), alpha=2, threshold .5: r=1 and r=.5 are successes -> 3; zeros keep A=-.375
    out = adv("positive_amplified", [1, 0.5, 0, 0], [0] * 4, alpha=2.0, success_value=3.0, success_threshold=0.5)
    close(out, [3.0, 3.0, -0.375, -0.375])
    # threshold 2: nobody succeeds; A = [.625, .125, -.375, -.375] -> positives *2 = [1.25, .25]
    close(
        adv("positive_amplified", [1, 0.5, 0, 0], [0] * 4, alpha=2.0, success_threshold=2.0),
        [1.25, 0.25, -0.375, -0.375],
    )


def test_positive_amplified_all_success_group():
    # A = 0 for both, but both are successes -> s
    close(adv("positive_amplified", [1, 1, 0, 1], [0, 0, 1, 1]), [1.0, 1.0, -0.5, 1.0])


def test_raft():
    close(adv("raft", [1.0, 0.5, 0.0, 1.2], [0, 0, 1, 1]), [1.0, 0.0, 0.0, 1.0])
    close(adv("raft", [1.0, 0.5], [0, 0], success_threshold=0.5), [1.0, 1.0])


def test_integer_rewards_are_accepted():
    out = ADVANTAGES.get("grpo_no_std")(torch.tensor([2, 0]), torch.tensor([0, 0]))
    assert out.is_floating_point()
    close(out, [1.0, -1.0])


def test_shape_errors():
    with pytest.raises(ValueError, match="same length"):
        adv("grpo", [1, 0, 1], [0, 0])
    with pytest.raises(ValueError, match="integer"):
        ADVANTAGES.get("grpo")(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]))


@pytest.mark.parametrize("name", ["grpo", "grpo_no_std", "opmd", "rloo", "positive_amplified"])
def test_all_equal_groups_are_exactly_zero_despite_float_rounding(name):
    # in float32 the mean of three 0.9s is not 0.9 exactly: r - mean was 6e-8, and GRPO divided it by eps
    rewards = torch.tensor([0.9, 0.9, 0.9, 0.7, 0.7], dtype=torch.float32)
    groups = torch.tensor([0, 0, 0, 1, 1])
    assert (rewards - group_mean(rewards, groups)).abs().max() > 0  # the rounding that used to leak through
    assert ADVANTAGES.get(name)(rewards, groups).tolist() == [0.0] * 5


def test_singleton_reward_follows_the_reference_baseline_of_zero():
    # the reference (Trinity-RFT opmd/grpo advantages) compares a lone member with 0, GRPO with std 1
    close(adv("opmd", [0.4, 1.0, 0.0], [0, 1, 1], singleton="reward"), [0.4, 0.5, -0.5])
    close(adv("grpo_no_std", [0.4], [0], singleton="reward"), [0.4])
    close(adv("grpo", [0.4, 1.0, 0.0], [0, 1, 1], singleton="reward"), [0.4 / (1 + 1e-6), 0.7071061, -0.7071061])
    close(adv("positive_amplified", [0.4, 1.0], [0, 1], singleton="reward"), [1.2, 1.0])
    close(adv("opmd", [0.4, 1.0, 0.0], [0, 1, 1]), [0.0, 0.5, -0.5])  # the default: no baseline, no signal


def test_bad_advantage_settings_are_one_line_before_the_run():
    from r3l.algorithms.advantages import checked_advantages

    with pytest.raises(UserError, match="bad algorithm.advantage_args for 'opmd': singleton must be one of"):
        checked_advantages("opmd", {"singleton": "nope"})
    with pytest.raises(UserError, match="bad algorithm.advantage_args for 'raft'"):
        checked_advantages("raft", {"alpha": 2})


def test_group_spread():
    from r3l.algorithms.advantages import group_spread

    close(group_spread(torch.tensor(MIXED_R), torch.tensor(MIXED_G)), [3.0, 4.0, 3.0, 3.0, 4.0])
