"""Single-turn episodes: prompt each task, sample a group of replies, judge them with the environment."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from r3l.envs import Env, Task
from r3l.rollout.chat import PromptFormat, encode_prompt
from r3l.rollout.generator import Completion, Generator, SamplingParams


@dataclass
class Episode:
    task: Task
    prompt_tokens: list[int]
    completion: Completion
    reward: float
    success: bool
    feedback: str


def run_single_turn(
    tasks: Sequence[Task],
    make_env: Callable[[], Env],
    generator: Generator,
    tokenizer,
    params: SamplingParams,
    group_size: int = 1,
    prompt_format: PromptFormat = PromptFormat(),
) -> list[list[Episode]]:
    """One list of `group_size` episodes per task, in task order."""
    env = make_env()
    prompts, observations = [], []
    for task in tasks:
        observation = env.reset(task)
        observations.append(observation)
        prompts.append(encode_prompt(tokenizer, prompt_format.messages(observation, env.system_prompt)))
    groups = generator.generate(prompts, params, n=group_size)
    episodes: list[list[Episode]] = []
    for task, prompt, completions in zip(tasks, prompts, groups):
        group = []
        for completion in completions:
            env.reset(task)
            result = env.step(completion.text)
            group.append(Episode(task, prompt, completion, result.reward,
                                 bool(result.info.get("success", False)), str(result.info.get("feedback", ""))))
        episodes.append(group)
    return episodes
