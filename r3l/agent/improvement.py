"""When a retry counts as an improvement on its base episode (R3L trains improving retries as SFT): a registry
of pure rules over (reward, steps) of the retry and of its base."""

from __future__ import annotations

from collections.abc import Callable

from r3l.registry import Registry

ImprovementRule = Callable[..., bool]
IMPROVEMENT_RULES: Registry[ImprovementRule] = Registry("improvement rule")


@IMPROVEMENT_RULES.register("reference")
def succeeds_and_beats_base(
    retry_reward: float, retry_steps: int, base_reward: float, base_steps: int, success_reward: float = 1.0
) -> bool:
    """R3L's code: the retry succeeds (reward >= success_reward) and earns more than its base, or succeeds in
    fewer steps. A partial-reward gain that does not succeed is no improvement."""
    succeeded = retry_reward >= success_reward
    return succeeded and (retry_reward > base_reward or retry_steps < base_steps)


def retry_improved(
    rule: ImprovementRule,
    retry: tuple[float, int],
    base: tuple[float, int],
    success_reward: float,
    steps_are_a_cost: bool = True,
) -> bool:
    """`rule` on the (reward, steps) of a retry and of its base; where steps are no cost (a math dialogue's
    attempts, `Env.steps_are_a_cost`), both count as equally long, so only rewards decide."""
    (retry_reward, retry_steps), (base_reward, base_steps) = retry, base
    if not steps_are_a_cost:
        retry_steps = base_steps = 0
    return rule(retry_reward, retry_steps, base_reward, base_steps, success_reward)


@IMPROVEMENT_RULES.register("any_gain")
def any_reward_gain(
    retry_reward: float, retry_steps: int, base_reward: float, base_steps: int, success_reward: float = 1.0
) -> bool:
    """Any reward gain, or the same successful reward in fewer steps (partial rewards count)."""
    both_succeed = retry_reward >= success_reward and base_reward >= success_reward
    return retry_reward > base_reward or (both_succeed and retry_steps < base_steps)
