"""The training loop: explore -> advantages -> learner -> log, with evaluation, checkpoints and resume."""

from __future__ import annotations

import json
import shutil
import signal
import time
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from r3l.algorithms import KL_ESTIMATORS, POLICY_LOSSES, assign_advantages
from r3l.algorithms.advantages import checked_advantages
from r3l.algorithms.rollout_correction import logprob_gap_warning
from r3l.build import (
    autocast_bf16,
    build_parts,
    defers_generator,
    evaluate_held_out,
    generator_dtype,
    held_out_tasks,
    make_learner,
    planned_threads,
    resolve_device,
    trainable_policy,
)
from r3l.config import Config, dump_config
from r3l.distributed.pipeline import Drawn, ExplorationPipeline
from r3l.distributed.placement import Placement, layout_lines, plan_for
from r3l.errors import Interrupted, RunStopped, UserError
from r3l.evaluate import r3_table
from r3l.experience import write_jsonl
from r3l.faults import failpoint
from r3l.learner.checkpoint import (
    drop_optimizer_state,
    is_lora,
    latest_checkpoint,
    load_trainer_state,
    restore_rng,
    save_checkpoint,
)
from r3l.learner.lora_merge import base_checksum
from r3l.learner.step_size import median_weight_rms, relative_step, step_size_warning
from r3l.learner.update_size import update_size_warning
from r3l.learner.weights import load_weights, merged_state_dict, saved_adapter
from r3l.logging import MetricsLogger, TrainProgress, console
from r3l.logging.hack_watch import rejected_endings_warning
from r3l.memory import headroom_warning, map_large_blocks, memory_limit_mib, memory_metrics, release_free_memory
from r3l.provenance import check_resume, code_version, display_path, record_session, record_tasks
from r3l.rollout.deferred import DeferredGenerator
from r3l.rollout.generator import Generator, step_generator_stats
from r3l.seeding import seed_everything
from r3l.task_sampler import TaskSampler

if TYPE_CHECKING:
    from r3l.distributed.learner_group import LearnerGroup
    from r3l.learner.learner import Learner


def new_run_dir(config: Config) -> Path:
    name = config.run.name or f"{config.env.name}-{config.algorithm.name}-{datetime.now():%Y%m%d-%H%M%S}"
    run_dir = Path(config.run.dir) / name
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = Path(config.run.dir) / f"{name}-{suffix}"
    run_dir.mkdir(parents=True)
    return run_dir


def check_algorithm_names(config: Config) -> None:
    checked_advantages(config.algorithm.advantage, config.algorithm.advantage_args)
    POLICY_LOSSES.get(config.algorithm.policy_loss)
    KL_ESTIMATORS.get(config.algorithm.kl_estimator)


class GracefulInterrupt:
    """First Ctrl-C: finish the current step, checkpoint and stop. Second Ctrl-C: abandon the step."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        console.print("[yellow]interrupt: finishing this step, then checkpointing (Ctrl-C again to abandon it)[/]")

    def __enter__(self) -> GracefulInterrupt:
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread
            self._previous = None
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


class Trainer:
    def __init__(
        self, config: Config, run_dir: Path | None = None, resume: bool = False, allow_code_change: bool = False
    ):
        check_algorithm_names(config)
        if resume and run_dir is not None:  # before anything is built: a refusal costs nothing
            check_resume(run_dir, allow_code_change)
        self.config = config
        self.allow_code_change = allow_code_change
        self.owns_run_dir = run_dir is None  # made here: removed again when the run ends with nothing to resume
        self.run_dir = run_dir if run_dir is not None else new_run_dir(config)
        self.unlogged_setup: dict[str, float] = {}  # the task list's cost (R3's failure set), logged once the run logs
        try:
            self._build(config, resume)
        except BaseException as error:
            self.close()
            if self.owns_run_dir:  # a run that never started leaves no directory behind
                shutil.rmtree(self.run_dir, ignore_errors=True)
            if isinstance(error, KeyboardInterrupt):
                raise Interrupted(
                    self.resume_hint() if resume else "the run had not started; nothing was kept"
                ) from None
            raise

    def _build(self, config: Config, resume: bool) -> None:
        if config.train.mmap_threshold_kib is not None:  # before the model's weights take the heap
            map_large_blocks(config.train.mmap_threshold_kib * 1024)
        seed_everything(config.run.seed)
        self.placement = plan_for(config, str(resolve_device(config.model.device)))  # before any model loads
        self.parts = build_parts(config, driver=True)
        if isinstance(self.parts.generator, DeferredGenerator):  # built at its first use, then given the weights
            self.parts.generator.on_built = self._sync_generator
        env = self.parts.make_env()
        self.train_tasks = env.tasks("train")
        self.test_tasks = held_out_tasks(config, env, say=True)
        checkpoint = latest_checkpoint(self.run_dir) if resume else None
        if resume and checkpoint is None:
            raise UserError(f"{self.run_dir} has no checkpoint to resume from; start a new run instead")
        state = load_trainer_state(checkpoint) if checkpoint is not None else {}
        self.task_builds = state.get("task_builds", 0)
        self.sampler = self._make_sampler()
        self.model, ref_model = trainable_policy(config, self.parts.model)
        self.lora_base = base_checksum(self.model) if is_lora(self.model) else None  # watched after every sync
        self.tripped_guards: set[str] = set()
        if config.distributed.learner_ranks > 1:
            from r3l.distributed.learner_group import LearnerGroup

            self.learner: Learner | LearnerGroup = LearnerGroup(
                config, self.model, self.parts.tokenizer, ref_model, self.placement.learner
            )
        else:
            self.learner = make_learner(config, self.model, self.parts.tokenizer, ref_model)
        self.step = 0
        self.history: dict[str, Any] = {}
        self.memory_limit = memory_limit_mib()  # warned about once, when the peak comes near it
        self.rollout_pool = self.pipeline = None
        if config.distributed.rollout_workers:
            from r3l.distributed.rollout_pool import RolloutPool

            self.rollout_pool = RolloutPool(config, self.placement)
            self.pipeline = ExplorationPipeline(
                self.rollout_pool, self._draw, config.distributed.max_staleness, config.train.steps
            )
        if checkpoint is not None:
            self._resume(checkpoint, state)
        elif self.rollout_pool is not None:
            with merged_state_dict(self.model) as weights:
                self.rollout_pool.sync_weights(weights)
        # only once everything fits: a resume that fails (another model, a damaged file) keeps the run's config
        written = config.model_copy(update={"run": config.run.model_copy(update={"dir": display_path(config.run.dir)})})
        (self.run_dir / "config.yaml").write_text(dump_config(written))
        record_session(
            self.run_dir,
            "resume" if checkpoint is not None else "start",
            step=self.step,
            allowed_code_change=self.allow_code_change and resume,
        )
        self.relative_step = self._check_step_size()
        if config.model.dtype == "bfloat16" and not config.model.lora.enabled:
            console.print(
                "bf16 master weights (model.dtype=bfloat16): AdamW rounds each update stochastically to bf16, so "
                "updates below bf16's resolution still move the weights on average; model.dtype=float32 keeps fp32 "
                "master weights",
                soft_wrap=True,
                highlight=False,
            )
        self.layout = layout(config, self.placement)  # said once everything is up, so bad input stays one line
        for line in layout_lines(self.layout):  # a CPU-only torch on a GPU machine shows here, not by its speed
            console.print(line, soft_wrap=True, markup=False, highlight=False)

    def _check_step_size(self) -> float | None:
        """lr against the size of the weights under full fine-tuning, with a warning when it is a step that
        collapsed models here (a LoRA adapter starts at zero, so the measure does not apply to it)."""
        if self.config.model.lora.enabled:
            return None
        weight_rms = median_weight_rms(self.model)
        warning = step_size_warning(self.config.train.lr, weight_rms)
        if warning:
            console.print(f"[yellow]warning: {warning}[/]", soft_wrap=True)
        return relative_step(self.config.train.lr, weight_rms) if weight_rms else None

    def _make_sampler(self) -> TaskSampler:
        """The sampler over the strategy's training tasks; what building them cost (R3's failure set: first
        attempts generated, seconds) is kept in `unlogged_setup` until the metrics log it."""
        started = time.perf_counter()
        strategy = self.parts.strategy
        tasks = strategy.training_tasks(self.train_tasks, self.run_dir, build=self.task_builds)
        if strategy.setup_generated_tokens:  # only a list that was generated (R3's failure set) has a setup row
            self.unlogged_setup["setup_seconds"] = self.unlogged_setup.get("setup_seconds", 0.0) + (
                time.perf_counter() - started
            )
            self.unlogged_setup["setup_generated_tokens"] = (
                self.unlogged_setup.get("setup_generated_tokens", 0.0) + strategy.setup_generated_tokens
            )
        return TaskSampler(tasks, seed=self.config.run.seed + self.task_builds)

    def _resume(self, checkpoint: Path, state: dict[str, Any]) -> None:
        load_weights(self.model, checkpoint)
        self.learner.load_training_state(state)
        self.sampler.load_state_dict(state["sampler"])
        self.history = state.get("history", {})
        restore_rng(state["rng"])
        self.step = state["step"]
        self._sync_generators()
        console.print(f"resumed {self.run_dir} at step {self.step}")

    def _draw(self, step: int):
        """The batch of step `step` (rebuilding the task list first when the strategy asks)."""
        before = (self.sampler.state_dict(), self.task_builds)
        if self.parts.strategy.refresh_due(step):
            self.task_builds += 1
            self.sampler = self._make_sampler()
        tasks = self.sampler.next_batch(self.config.train.tasks_per_step)
        record_tasks(self.run_dir, step + 1, tasks)
        return Drawn(tasks, *before)

    def _sync_generators(self) -> None:
        """The policy's current weights to the generator (evaluation, and rollouts in one process; one built at
        its first use takes them then) and to the rollout workers."""
        generator = self.parts.generator
        if generator.ready:
            self._sync_generator(generator, workers_too=True)
        elif self.rollout_pool is not None:
            with merged_state_dict(self.model) as weights:
                self.rollout_pool.sync_weights(weights)

    def _sync_generator(self, generator: Generator, workers_too: bool = False) -> None:
        """The policy's current weights to `generator`: the adapter alone where it takes adapters, else merged
        weights; with `workers_too`, the same merged weights to the rollout workers."""
        workers = self.rollout_pool if workers_too else None
        adapter_only = is_lora(self.model) and generator.takes_adapters  # the engine holds the base weights already
        if adapter_only:
            with saved_adapter(self.model) as folder:
                generator.sync_adapter(str(folder))
            if workers is None:
                return
        with merged_state_dict(self.model) as weights:
            if not adapter_only:
                generator.sync_weights(weights)
            if workers is not None:
                workers.sync_weights(weights)

    def _warn_on_guards(self, metrics: dict[str, float]) -> None:
        """One line at the step a guard starts to trip (an update that changed almost nothing, a log-prob gap
        between the learner and the sampler on one kind of token, episodes paid for ending on rejected moves),
        again only after it has cleared."""
        for guard, warning in (
            ("update_size", update_size_warning(metrics)),
            ("logprob_gap", logprob_gap_warning(metrics)),
            ("rejected_endings", rejected_endings_warning(metrics)),
        ):
            if warning and guard not in self.tripped_guards:
                console.print(f"[yellow]warning: step {self.step + 1}: {warning}[/]", soft_wrap=True)
            (self.tripped_guards.add if warning else self.tripped_guards.discard)(guard)

    def _lora_base_guard(self) -> dict[str, float]:
        """`lora/base_changed`: 1 when a LoRA policy's frozen base weights no longer match their checksum at the
        start (a merge into them that did not come out bit for bit); said once in a warning."""
        if self.lora_base is None:
            return {}
        changed = base_checksum(self.model) != self.lora_base
        if changed and not self.history.get("lora_base_warned"):
            self.history["lora_base_warned"] = True
            console.print(
                f"[yellow]warning: the LoRA policy's frozen base weights changed by step {self.step + 1}: the "
                "adapters-off KL reference and the merged weights the generator gets have drifted with them[/]",
                soft_wrap=True,
            )
        return {"lora/base_changed": float(changed)}

    def close(self) -> None:
        """Stop the rollout workers, the other learner ranks and the environments."""
        strategy = getattr(getattr(self, "parts", None), "strategy", None)
        if strategy is not None:
            strategy.close()
        pool = getattr(self, "rollout_pool", None)
        if pool is not None:
            pool.close()
            self.rollout_pool = None
        close = getattr(getattr(self, "learner", None), "close", None)  # a LearnerGroup's; a Learner has none
        if close is not None:
            close()

    def _trainer_state(self) -> dict[str, Any]:
        pending = self.pipeline.oldest_pending() if self.pipeline is not None else None
        sampler, builds = (
            (pending.sampler_state, pending.task_builds)
            if pending is not None
            else (self.sampler.state_dict(), self.task_builds)
        )  # batches drawn ahead are redrawn
        return {**self.learner.training_state(), "sampler": sampler, "history": self.history, "task_builds": builds}

    def checkpoint(self) -> Path:
        sharded = getattr(self.learner, "write_sharded", None) if self.config.distributed.sharded_checkpoints else None
        return save_checkpoint(
            self.run_dir,
            self.step,
            self.model,
            self.parts.tokenizer,
            self._trainer_state(),
            write_sharded=sharded,
            keep=self.config.train.keep_checkpoints,
        )

    def evaluate(self, label: str, logger: MetricsLogger) -> None:
        """Held-out evaluation into eval_LABEL.json and the metrics (two attempts when eval.attempts=2)."""
        if not self.test_tasks:
            return
        with self.phase("generate"):
            record, summary, metrics = evaluate_held_out(self.config, self.test_tasks, self.parts.strategy.context)
        self.spend(seconds=summary["seconds"])
        (self.run_dir / f"eval_{label}.json").write_text(json.dumps({**record, "step": self.step}, indent=1))
        self.history[f"eval_{label}"] = summary
        logger.log(self.step, metrics)
        console.print(held_out_line(label, metrics), soft_wrap=True, markup=False, highlight=False)

    def write_r3_table(self) -> None:
        before, after = self.history.get("eval_before"), self.history.get("eval_after")
        if self.config.eval.attempts == 2 and before and after:
            markdown, csv = r3_table(before, after)
            (self.run_dir / "r3_table.md").write_text(markdown)
            (self.run_dir / "r3_table.csv").write_text(csv)

    def phase(self, phase: str, metrics: dict[str, float] | None = None) -> AbstractContextManager[None]:
        """torch's thread count for one phase of a step (r3l/threads.py); the pipeline's sampling thread and the
        learner run at once there, so both keep every thread."""
        if self.pipeline is not None:
            return nullcontext()
        return planned_threads(self.config, self.model, phase, metrics)

    def train_step(self) -> dict[str, float]:
        config = self.config
        started = time.perf_counter()
        lag = 0
        threads: dict[str, float] = {}
        if self.pipeline is not None:
            experiences, metrics, lag = self.pipeline.next(self.step)
        else:
            totals = dict(self.parts.generator.stats)
            with self.phase("generate", threads):
                experiences, metrics = self.parts.strategy.explore(self._draw(self.step).tasks, self.step)
            metrics.update(step_generator_stats(totals, dict(self.parts.generator.stats)))
        failpoint("rollout_done")
        rollout_seconds = time.perf_counter() - started
        rebuilt = self.unlogged_setup.pop("setup_generated_tokens", 0.0)  # a refresh's seconds are this step's
        self.unlogged_setup.pop("setup_seconds", None)
        if rebuilt:
            metrics["setup_generated_tokens"] = rebuilt
        assign_advantages(experiences, config.algorithm.advantage, config.algorithm.advantage_args)
        if config.logging.dump_experiences:
            dump_dir = self.run_dir / "experiences"
            dump_dir.mkdir(exist_ok=True)
            write_jsonl(experiences, dump_dir / f"step_{self.step + 1:06d}.jsonl")
        learn_started = time.perf_counter()
        self.parts.generator.release_memory()
        with self.phase("learn", threads):
            metrics.update(self.learner.update(experiences, behaviour_logprobs=lag > 0))
        metrics.update(threads)
        self._warn_on_guards(metrics)
        failpoint("update_done")
        self._sync_generators()
        metrics.update(self._lora_base_guard())
        learn_seconds = time.perf_counter() - learn_started
        metrics.update(
            {
                "rollout_seconds": rollout_seconds,
                "train_seconds": learn_seconds,
                "step_seconds": time.perf_counter() - started,
                "rollout_tokens_per_s": metrics.get("generated_tokens", 0.0) / max(rollout_seconds, 1e-9),
            }
        )
        if metrics.get("forward_positions"):  # tokens the learner ran forward and backward (skipped ones are free)
            metrics["train_tokens_per_s"] = metrics["forward_positions"] / max(learn_seconds, 1e-9)
        if self.config.train.release_free_memory:
            release_free_memory()
        metrics.update(memory_metrics())
        warning = headroom_warning(metrics["peak_rss_mib"], self.memory_limit)
        if warning:
            console.print(f"[yellow]warning: {warning}[/]", soft_wrap=True)
            self.memory_limit = None
        self.step += 1
        self.spend(generated_tokens=metrics.get("generated_tokens", 0.0) + rebuilt, seconds=metrics["step_seconds"])
        return metrics

    def spend(self, generated_tokens: float = 0.0, seconds: float = 0.0) -> None:
        """Add to what the run has spent (kept in the checkpoint, so a resumed run counts from where it was)."""
        spent = self.history.setdefault("spent", {"generated_tokens": 0.0, "seconds": 0.0})
        spent["generated_tokens"] += generated_tokens
        spent["seconds"] += seconds

    def budget_spent(self) -> bool:
        """Whether the run has spent train.budget_tokens generated tokens or train.budget_seconds seconds
        (setup, steps and evaluations counted)."""
        spent, train = self.history.get("spent", {}), self.config.train
        return (train.budget_tokens is not None and spent.get("generated_tokens", 0.0) >= train.budget_tokens) or (
            train.budget_seconds is not None and spent.get("seconds", 0.0) >= train.budget_seconds
        )

    def _stop_if_diverging(self) -> None:
        streak, limit = self.learner.nonfinite_streak, self.config.train.max_nonfinite_updates
        if streak < limit:
            return
        checkpoint = latest_checkpoint(self.run_dir)
        kept = f"the last good checkpoint is {checkpoint}" if checkpoint else "no checkpoint was written yet"
        raise RunStopped(
            f"{streak} updates in a row had a NaN/inf loss or gradient norm at step {self.step} "
            f"(none was applied); {kept}. Lower train.lr, or try model.autocast_bf16=false"
        )

    def resume_hint(self) -> str:
        return f"continue with: r3l train --resume {self.run_dir}"

    def run(self) -> dict[str, Any]:
        """Train to train.steps; a first Ctrl-C (GracefulInterrupt) ends the step, checkpoints and returns a
        summary with "interrupted"; any other raises Interrupted saying how to resume, or, with no checkpoint
        yet (in the evaluation before training, say), removes the run directory this trainer made."""
        try:
            return self._run()
        except KeyboardInterrupt:
            raise Interrupted(self._after_interrupt()) from None

    def _after_interrupt(self) -> str:
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is not None:
            return f"{self.resume_hint()} (from its last checkpoint, {checkpoint.name})"
        if self.owns_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            return f"stopped before the first checkpoint, with nothing to resume: {self.run_dir} removed"
        return f"stopped before the first checkpoint: {self.run_dir} has nothing to resume"

    def _run(self) -> dict[str, Any]:
        config = self.config
        started = time.perf_counter()
        logging = config.logging
        logger = MetricsLogger(self.run_dir, tensorboard=logging.tensorboard, wandb=logging.wandb)
        try:
            if self.unlogged_setup:  # what building the task list cost before the first step (R3's failure set)
                logger.log(self.step, self.unlogged_setup)
                self.spend(self.unlogged_setup.get("setup_generated_tokens", 0.0), self.unlogged_setup["setup_seconds"])
                self.unlogged_setup = {}
            if self.step == 0 and "eval_before" not in self.history:
                self.evaluate("before", logger)
            with (
                TrainProgress(config.train.steps, start_step=self.step, enabled=logging.progress) as progress,
                GracefulInterrupt() as interrupt,
            ):
                while self.step < config.train.steps and not self.budget_spent():
                    metrics = self.train_step()
                    logger.log(self.step, metrics)
                    progress.update(self.step, metrics)
                    self._stop_if_diverging()
                    if config.eval.every and self.step % config.eval.every == 0 and self.step < config.train.steps:
                        self.evaluate(f"step{self.step}", logger)
                    if interrupt.requested:
                        break
                    if config.train.checkpoint_every and self.step % config.train.checkpoint_every == 0:
                        self.checkpoint()
            self.checkpoint()
            if self.step < config.train.steps and not self.budget_spent():  # the CLI says how to resume
                return {"run_dir": str(self.run_dir), "step": self.step, "interrupted": True}
            self.evaluate("after", logger)
            self.write_r3_table()
        finally:
            logger.close()
            self.close()
        summary = {
            "run": self.run_dir.name,
            "step": self.step,
            "stopped_by_budget": self.step < config.train.steps,
            "spent": self.history.get("spent"),
            "wall_seconds_this_session": time.perf_counter() - started,
            "relative_step": self.relative_step,
            "layout": self.layout,
            "code": code_version(),
            "eval_before": self.history.get("eval_before"),
            "eval_after": self.history.get("eval_after"),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        summary = {"run_dir": str(self.run_dir), **summary}  # for the caller; the file names no machine path
        final = latest_checkpoint(self.run_dir)  # after summary.json, so a run cut off here is finished, not resumable
        if final is not None and not config.train.keep_optimizer:
            drop_optimizer_state(final)
        return summary


def held_out_line(label: str, metrics: dict[str, float]) -> str:
    """One line, each metric as key=value with no space a terminal could wrap at between the two."""
    return f"held-out {label}: " + ", ".join(f"{key}={value:.3f}" for key, value in metrics.items())


def layout(config: Config, placement: Placement) -> dict[str, Any]:
    """The resolved device, dtypes and placement of every process (the start-up log and summary.json)."""
    return {
        "device": placement.learner[0],  # rank 0's: the training process's own
        "torch_cuda": torch.version.cuda,
        "policy_dtype": config.model.dtype,
        "autocast_bf16": autocast_bf16(config),
        "generator": config.generator.name,
        "generator_dtype": generator_dtype(config),
        "generator_built": "at first use" if defers_generator(config) else "at start",
        "learner_ranks": list(placement.learner),
        "rollout_workers": placement.workers,
        "worker_gpus": placement.worker_gpus,
        "ray_gpus": list(placement.ray_gpus) if placement.ray_gpus is not None else None,
    }
