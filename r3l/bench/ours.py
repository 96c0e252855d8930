"""Our side of a bench: the real `Trainer.train_step`, timed step by step on the tasks it draws itself."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from r3l.bench.records import StepRecord
from r3l.build import generator_dtype
from r3l.config import Config
from r3l.envs import Task
from r3l.errors import UserError
from r3l.rollout.chat import PromptFormat, encode_prompt
from r3l.task_sampler import TaskSampler

DECODE_COUNTERS = (
    "prefill_positions",
    "prefill_seconds",
    "decode_steps",
    "decode_rows",
    "decode_kv_positions",
    "decode_seconds",
)
WORK_METRICS = ("positions", "attention_pairs", "head_positions", "padded_positions")


class OursRunner:
    def __init__(self, config: Config, run_dir: Path):
        from r3l.trainer import Trainer

        run_dir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.trainer = Trainer(config, run_dir=run_dir)

    @property
    def model(self):
        return self.trainer.model

    def upcoming_batches(self, steps: int) -> list[list[Task]]:
        """The task batches the next `steps` training steps will draw (read from a copy of the sampler)."""
        sampler = self.trainer.sampler
        probe = TaskSampler(sampler.tasks, seed=sampler.seed)
        probe.load_state_dict(sampler.state_dict())
        return [probe.next_batch(self.config.train.tasks_per_step) for _ in range(steps)]

    def prompt_ids(self, tasks: list[Task]) -> list[list[int]]:
        """The prompt token ids our single-turn runner feeds the generator for `tasks`."""
        env = self.trainer.parts.make_env()
        prompt_format = PromptFormat.from_config(self.config.env)
        return [
            encode_prompt(self.trainer.parts.tokenizer, prompt_format.messages(env.reset(t), env.system_prompt))
            for t in tasks
        ]

    def check_sampling_is_possible(self, batch: list[Task]) -> None:
        """One line, before either side runs, when the model's next-token logits on the bench's first prompts are
        not finite in the generator's dtype: neither side could sample from them (TRL fails deep inside its
        sampler; random-weight shapes in bf16 can do this)."""
        generator = self.trainer.parts.generator
        model = getattr(generator, "model", None)
        if model is None:
            return
        device = next(model.parameters()).device
        with torch.inference_mode():
            for ids in self.prompt_ids(batch):
                logits = model(input_ids=torch.tensor([ids], device=device), logits_to_keep=1).logits
                if not bool(torch.isfinite(logits).all()):
                    raise UserError(
                        f"model '{self.config.model.name}' gives non-finite next-token logits in "
                        f"{generator_dtype(self.config)} on the bench's first prompt, so no side can "
                        "sample from it; use a trained model or generator.dtype=float32"
                    )

    def step(self) -> StepRecord:
        generator = self.trainer.parts.generator
        before = generator.stats
        started = time.perf_counter()
        metrics = self.trainer.train_step()
        seconds = time.perf_counter() - started
        after = generator.stats
        tasks = self.config.train.tasks_per_step
        return StepRecord(
            seconds=seconds,
            rollout_seconds=metrics["rollout_seconds"],
            train_seconds=metrics["train_seconds"],
            prompts=tasks,
            completions=tasks * self.config.sampling.group_size,
            generated_tokens=int(metrics.get("generated_tokens", 0)),
            trained_tokens=int(metrics.get("trained_tokens", 0)),
            work={key: metrics.get(f"forward_{key}", 0.0) for key in WORK_METRICS},
            decode={key: after.get(key, 0) - before.get(key, 0) for key in DECODE_COUNTERS},
        )
