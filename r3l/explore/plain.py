"""The plain strategy (GRPO, OPMD, RAFT): a group of independent samples per task, one experience each."""
from __future__ import annotations

from dataclasses import replace
from statistics import mean
from typing import Sequence

from r3l.envs import Task
from r3l.experience import Experience
from r3l.explore import STRATEGIES, Strategy
from r3l.rollout.single_turn import Episode, run_single_turn


def episode_to_experience(episode: Episode, group: str, kind: str = "base") -> Experience:
    """Prompt tokens get mask 0 and logprob 0; the sampled reply is trained exactly as generated."""
    prompt, reply = episode.prompt_tokens, episode.completion
    tokens = list(prompt) + list(reply.tokens)
    return Experience(
        group=group,
        kind=kind,
        tokens=tokens,
        loss_mask=[0] * len(prompt) + [1] * len(reply.tokens),
        logprobs=[0.0] * len(prompt) + list(reply.logprobs),
        reward=episode.reward,
        turn_spans=[(len(prompt), len(tokens))],
        text=reply.text,
        meta={"task_id": episode.task.id, "success": episode.success, "feedback": episode.feedback,
              "finish_reason": reply.finish_reason},
    )


def rollout_metrics(groups: list[list[Episode]]) -> dict[str, float]:
    episodes = [e for group in groups for e in group]
    rewards = [e.reward for e in episodes]
    lengths = [len(e.completion.tokens) for e in episodes]
    flat_groups = sum(1 for group in groups if len({e.reward for e in group}) == 1)
    return {
        "reward": mean(rewards),
        "success": mean(float(e.success) for e in episodes),
        "response_length": mean(lengths),
        "truncated_fraction": mean(float(e.completion.finish_reason == "length") for e in episodes),
        "zero_variance_groups": flat_groups / len(groups),
        "generated_tokens": float(sum(lengths)),
    }


@STRATEGIES.register("plain")
class PlainStrategy(Strategy):
    def explore(self, tasks: Sequence[Task], step: int):
        context = self.context
        params = replace(context.sampling, seed=None if context.sampling.seed is None else context.sampling.seed + step)
        groups = run_single_turn(tasks, context.make_env, context.generator, context.tokenizer, params,
                                 group_size=context.group_size, prompt_format=context.prompt_format)
        experiences = [
            episode_to_experience(episode, group=f"step{step}-{task.id}")
            for task, group in zip(tasks, groups)
            for episode in group
        ]
        return experiences, rollout_metrics(groups)
