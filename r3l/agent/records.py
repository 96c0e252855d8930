"""Turn played episodes into experience records (what the learner trains on, token for token)."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean
from typing import Any

from r3l.agent.episodes import Trajectory, termination_metrics
from r3l.experience import Experience
from r3l.rollout.conversation import TokenConversation


def conversation_experience(
    conversation: TokenConversation,
    group: str,
    kind: str,
    reward: float,
    text: str,
    objective: str = "policy",
    advantage: float = 0.0,
    **meta: Any,
) -> Experience:
    """The record of a token-exact conversation: its tokens, loss mask, log-probs and turn spans as they are."""
    return Experience(
        group=group,
        kind=kind,
        tokens=list(conversation.tokens),
        loss_mask=list(conversation.loss_mask),
        logprobs=list(conversation.logprobs),
        reward=reward,
        advantage=advantage,
        turn_spans=list(conversation.turn_spans),
        text=text,
        meta=meta,
        objective=objective,
        allowed=list(conversation.allowed),
    )


def trajectory_experience(
    trajectory: Trajectory, group: str, kind: str = "base", conversation: TokenConversation | None = None, **meta: Any
) -> Experience:
    """Every assistant turn of `conversation` (default: the one the model saw) trained as generated;
    prompts and observations have mask 0."""
    conversation = conversation if conversation is not None else trajectory.conversation
    last = trajectory.steps[-1].completion if trajectory.steps else None
    return conversation_experience(
        conversation,
        group,
        kind,
        trajectory.reward,
        trajectory.text,
        task_id=trajectory.task.id,
        success=trajectory.success,
        feedback=trajectory.feedback,
        steps=trajectory.num_steps,
        termination=trajectory.termination,
        finish_reason=last.finish_reason if last else None,
        **meta,
    )


def rewarded_rejected_ending(trajectory: Trajectory) -> bool:
    """The environment ended the episode, unsolved, on a move it did not accept, and paid for it: a game that gives
    partial credit when a player's errors run out (TextArena's GuessTheNumber pays the last guess's closeness
    after a repeated guess), which a policy can learn to harvest by ending games with invalid moves."""
    last = trajectory.steps[-1] if trajectory.steps else None
    return (
        trajectory.termination == "done"
        and not trajectory.success
        and last is not None
        and not last.admissible
        and trajectory.reward > 0
    )


def episode_metrics(groups: Sequence[Sequence[Trajectory]]) -> dict[str, float]:
    """Success, reward, lengths, early endings and tokenisation drift over groups of episodes."""
    episodes = [t for group in groups for t in group]
    if not episodes:
        return {}
    completions = [step.completion for t in episodes for step in t.steps[t.prefix_steps :]]
    return {
        "reward": mean(t.reward for t in episodes),
        "success": mean(float(t.success) for t in episodes),
        "episode_steps": mean(t.num_steps for t in episodes),
        "response_length": mean(len(c.tokens) for c in completions) if completions else 0.0,
        "truncated_fraction": mean(float(c.cut_off) for c in completions) if completions else 0.0,
        "hack/prompt_copies": mean(float(t.success and t.copied_prompt) for t in episodes),
        "hack/rewarded_rejected_endings": mean(float(rewarded_rejected_ending(t)) for t in episodes),
        "zero_variance_groups": mean(float(len({t.reward for t in group}) == 1) for group in groups if group),
        "generated_tokens": float(sum(t.generated_tokens for t in episodes)),
        "tokenization_drift_rate": mean(float(t.conversation.drift() > 0) for t in episodes),
        **termination_metrics(episodes),
    }
