"""The failure set of R3: queries the model fails, each with one failed first attempt, kept as resumable JSONL.

Each query is tried with up to `max_samples` first attempts (in rounds); the first failing attempt is
kept. One JSON line per tried query, so an interrupted build resumes where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from r3l.agent.episodes import AgentLimits
from r3l.envs import Env, Task
from r3l.reflection.retry import first_attempts
from r3l.rollout.chat import PromptFormat
from r3l.rollout.generator import Completion, Generator, SamplingParams


@dataclass
class FailureSet:
    tasks: list[Task] = field(default_factory=list)  # failing tasks; data["first_attempt"] holds the attempt
    tried: int = 0
    solved: int = 0  # queries whose every sampled attempt succeeded
    samples: int = 0
    successes: int = 0

    @property
    def first_try_success(self) -> float:
        return self.successes / self.samples if self.samples else 0.0

    def counts(self) -> dict[str, float]:
        return {
            "failure_set/tried": self.tried,
            "failure_set/solved": self.solved,
            "failure_set/kept": len(self.tasks),
            "failure_set/first_try_success": self.first_try_success,
        }


def task_with_attempt(task: Task, index: int, attempt: dict) -> Task:
    return Task(
        id=task.id,
        prompt=task.prompt,
        answer=task.answer,
        data={**task.data, "train_index": index, "first_attempt": attempt},
    )


def failure_task(task: Task, index: int, completion: Completion, feedback: str) -> Task:
    attempt = {
        "tokens": completion.tokens,
        "logprobs": completion.logprobs,
        "text": completion.text,
        "finish_reason": completion.finish_reason,
        "feedback": feedback,
    }
    return task_with_attempt(task, index, attempt)


def stored_completion(task: Task) -> Completion:
    attempt = task.data["first_attempt"]
    return Completion(list(attempt["tokens"]), list(attempt["logprobs"]), attempt["text"], attempt["finish_reason"])


def _record(index: int, failure: Task | None, samples: int, successes: int) -> dict:
    record = {"train_index": index, "samples": samples, "successes": successes, "kept": failure is not None}
    if failure is not None:
        record["first_attempt"] = failure.data["first_attempt"]
    return record


def _add(result: FailureSet, record: dict, tasks: Sequence[Task]) -> None:
    result.tried += 1
    result.samples += record["samples"]
    result.successes += record["successes"]
    if record["kept"]:
        index = record["train_index"]
        result.tasks.append(task_with_attempt(tasks[index], index, record["first_attempt"]))
    else:
        result.solved += 1


def build_failure_set(
    tasks: Sequence[Task],
    make_env: Callable[[], Env],
    generator: Generator,
    tokenizer,
    params: SamplingParams,
    prompt_format: PromptFormat,
    *,
    max_samples: int,
    round_size: int = 8,
    queries_per_batch: int = 16,
    max_queries: int | None = None,
    target: int | None = None,
    path: Path | None = None,
    limits: AgentLimits = AgentLimits(),
) -> FailureSet:
    """Try queries in order until `max_queries` are tried or `target` failures are kept."""
    result = FailureSet()
    done: set[int] = set()
    if path is not None and path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                done.add(record["train_index"])
                _add(result, record, tasks)
    limit = len(tasks) if max_queries is None else min(max_queries, len(tasks))
    todo = [i for i in range(limit) if i not in done]
    seed = params.seed or 0
    for start in range(0, len(todo), queries_per_batch):
        if target is not None and len(result.tasks) >= target:
            break
        batch = todo[start : start + queries_per_batch]
        samples = dict.fromkeys(batch, 0)
        successes = dict.fromkeys(batch, 0)
        kept: dict[int, Task] = {}
        open_queries = list(batch)
        while open_queries:
            size = min(round_size, max_samples - samples[open_queries[0]])
            round_params = SamplingParams(
                params.temperature,
                params.top_p,
                params.max_new_tokens,
                params.stop,
                seed + start * 7919 + samples[open_queries[0]],
            )
            rows = first_attempts(
                [tasks[i] for i in open_queries],
                make_env,
                generator,
                tokenizer,
                round_params,
                prompt_format,
                n=size,
                limits=limits,
            )
            still_open = []
            for index, row in zip(open_queries, rows):
                for attempt in row:
                    samples[index] += 1
                    successes[index] += int(attempt.verdict.success)
                    if not attempt.verdict.success and index not in kept:
                        kept[index] = failure_task(tasks[index], index, attempt.completion, attempt.verdict.feedback)
                if index not in kept and samples[index] < max_samples:
                    still_open.append(index)
            open_queries = still_open
        records = [_record(i, kept.get(i), samples[i], successes[i]) for i in batch]
        for record in records:
            _add(result, record, tasks)
        if path is not None:
            with open(path, "a", encoding="utf-8") as handle:
                handle.writelines(json.dumps(record) + "\n" for record in records)
    return result
