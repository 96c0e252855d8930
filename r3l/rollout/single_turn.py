"""Single-turn episodes: prompt each task, sample a group of replies, judge them with the environment."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from r3l.envs import Env, Task, Verdict, judge
from r3l.rollout.chat import PromptFormat, encode_prompt
from r3l.rollout.generator import Completion, Generator, SamplingParams


@dataclass
class Episode:
    task: Task
    messages: list[dict[str, str]]
    prompt_tokens: list[int]
    completion: Completion
    verdict: Verdict

    @property
    def reward(self) -> float:
        return self.verdict.reward

    @property
    def success(self) -> bool:
        return self.verdict.success

    @property
    def feedback(self) -> str:
        return self.verdict.feedback


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
    conversations = [prompt_format.messages(env.reset(task), env.system_prompt) for task in tasks]
    prompts = [encode_prompt(tokenizer, messages) for messages in conversations]
    groups = generator.generate(prompts, params, n=group_size)
    return [
        [Episode(task, messages, prompt, completion, judge(env, task, completion.text)) for completion in completions]
        for task, messages, prompt, completions in zip(tasks, conversations, prompts, groups)
    ]
