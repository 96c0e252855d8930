"""Build the run's parts (policy, environment, generator, strategy) from a validated config, and the policy as
trained and its learner."""

from __future__ import annotations

import copy
import inspect
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from r3l.agent.context import RolloutContext
from r3l.config import Config
from r3l.envs import Env, Task, env_class, make
from r3l.envs.overlap import training_overlap
from r3l.envs.reward_functions import RewardFunctions, with_reward_functions
from r3l.errors import UserError
from r3l.evaluate import held_out_evaluation
from r3l.explore import ExploreContext, Strategy, make_strategy
from r3l.logging.progress import console
from r3l.models.precision import native_bf16
from r3l.registry import import_submodules
from r3l.rollout.chat import PromptFormat
from r3l.rollout.deferred import DeferredGenerator
from r3l.rollout.generator import GENERATORS, Generator, SamplingParams
from r3l.rollout.generator_settings import check_settings
from r3l.threads import phase_threads

if TYPE_CHECKING:
    from r3l.learner.learner import Learner
    from r3l.learner.ranks import Ranks

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
GENERATOR_PACKAGES = ("r3l.rollout", "r3l.testing")  # every module in them may register a generator


def quiet_libraries() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def env_factory(config: Config) -> Callable[[], Env]:
    make_env: Callable[[], Env] = partial(make, config.env.name, **config.env.args)
    reward = config.reward
    if reward.functions:
        functions = RewardFunctions(
            tuple(reward.functions),
            tuple(reward.weights if reward.weights is not None else [1.0] * len(reward.functions)),
            reward.env_weight,
            reward.success_threshold,
        )
        make_env = partial(with_reward_functions, make_env, functions)
    probe = make_env()  # fail early on a bad name or settings
    close = getattr(probe, "close", None)
    if close is not None:
        close()
    return make_env


def agent_limits(config: Config):
    from r3l.agent.episodes import AgentLimits
    from r3l.envs.reply_grammar import ReplyFormat

    a, s = config.agent, config.structured
    reply = ReplyFormat(a.action_tag, a.think_tag, think_chars(config)) if s.replies else None
    return AgentLimits(
        max_turns=a.max_turns,
        max_context_tokens=a.max_context_tokens,
        terminate_on=tuple(a.terminate_on),
        repeat_limit=a.repeat_limit,
        action_tag=a.action_tag,
        think_tag=a.think_tag,
        env_workers=a.env_workers,
        structured=reply,
        env_timeout=a.env_timeout,
        env_processes=a.env_processes,
    )


def think_chars(config: Config) -> int | None:
    """structured.think_chars, with auto resolved to half the shorter of the training and evaluation reply budgets."""
    setting = config.structured.think_chars
    if setting != "auto":
        return setting
    return min(config.sampling.max_new_tokens, config.eval.max_new_tokens or config.sampling.max_new_tokens) // 2


def load_model(config: Config):
    from r3l.models import load_policy

    quiet_libraries()
    model, tokenizer = load_policy(config.model.name, DTYPES[config.model.dtype])
    check_reply_budget(config, tokenizer)
    return model.to(resolve_device(config.model.device)), tokenizer


def check_reply_budget(config: Config, tokenizer) -> None:
    """Refuse a reply budget (sampling.max_new_tokens, eval.max_new_tokens) shorter than the environment's shortest
    valid reply in this model's tokens: every reply would be cut off before its action, a format error."""
    shortest = env_class(config.env.name).shortest_reply
    if shortest is None:
        return
    needed = len(tokenizer.encode(shortest, add_special_tokens=False))
    for key, budget in (
        ("sampling.max_new_tokens", config.sampling.max_new_tokens),
        ("eval.max_new_tokens", config.eval.max_new_tokens),
    ):
        if budget is not None and budget < needed:
            raise UserError(
                f"{key}={budget} cannot hold {config.env.name}'s shortest valid reply {shortest!r} ({needed} tokens "
                f"for this model); raise it (r3l config env={config.env.name} shows the environment's own length)"
            )


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"model.device '{name}' is not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"model.device is '{name}' but torch sees no CUDA device; use model.device=cpu")
    return device


def generator_dtype(config: Config) -> str:
    """generator.dtype, with 'auto' resolved for the device the model runs on."""
    if config.generator.dtype != "auto":
        return config.generator.dtype
    return "bfloat16" if native_bf16(resolve_device(config.model.device)) else "float32"


def autocast_bf16(config: Config) -> bool:
    """model.autocast_bf16, with 'auto' resolved for the device the model runs on."""
    if config.model.autocast_bf16 != "auto":
        return bool(config.model.autocast_bf16)
    return native_bf16(resolve_device(config.model.device))


def computes_in_bf16(config: Config) -> bool:
    """Whether a step's sampling and update both compute in bf16 (what the thread plan of r3l/threads.py asks)."""
    return autocast_bf16(config) and generator_dtype(config) == "bfloat16"


@contextmanager
def planned_threads(config: Config, policy, phase: str, metrics: dict[str, float] | None = None) -> Iterator[None]:
    """torch's thread count for `phase` ("generate" or "learn") of `policy` under `config`: the plan the trainer
    follows in its steps, for the commands that only sample too (`r3l eval`, `r3l rollout`)."""
    parameters = sum(parameter.numel() for parameter in policy.parameters())
    with phase_threads(phase, parameters, computes_in_bf16(config), metrics, config.train.sampling_threads):
        yield


def frozen_reference(model, autocast: bool):
    """The KL reference of a fully fine-tuned policy: a frozen copy, held in bf16 where the learner computes in bf16
    anyway (autocast casts each weight to bf16 for its matmuls; a frozen copy needs no fp32 master weights to take
    small updates), which halves its memory: 14 GiB less at 7B."""
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    return reference.to(torch.bfloat16) if autocast else reference


def trainable_policy(config: Config, model):
    """(the policy as trained: LoRA and gradient checkpointing applied, the KL reference or None). Under LoRA the
    reference is the policy with its adapters off (AdaptersOff), otherwise a frozen copy of the model."""
    from r3l.learner.learner import AdaptersOff, apply_lora

    ref_model = None
    if config.algorithm.kl_coef > 0:
        ref_model = AdaptersOff() if config.model.lora.enabled else frozen_reference(model, autocast_bf16(config))
    if config.model.lora.enabled:
        with warnings.catch_warnings():  # PEFT asks transformers 5 for a renamed attribute (a FutureWarning)
            warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
            model = apply_lora(model, config.model.lora)
    if config.model.gradient_checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None)  # transformers 5's name
        (enable or model.gradient_checkpointing_enable)()
    return model, ref_model


def make_learner(config: Config, model, tokenizer, ref_model, ranks: Ranks | None = None) -> Learner:
    from r3l.learner.learner import Learner

    return Learner(
        model,
        tokenizer,
        config.algorithm,
        config.train,
        temperature=config.sampling.temperature,
        autocast_bf16=autocast_bf16(config),
        ref_model=ref_model,
        total_steps=config.train.steps,
        gradient_checkpointing=config.model.gradient_checkpointing,
        ranks=ranks,
    )


def generator_class(config: Config) -> type[Generator]:
    import_submodules(*GENERATOR_PACKAGES)
    return GENERATORS.get(config.generator.name)


def generator_settings(config: Config) -> dict[str, Any]:
    """The chosen generator's own settings, checked against its constructor (one line for the first bad one)."""
    return check_settings(config.generator.name, generator_class(config), config.generator.settings)


def make_generator(config: Config, model, tokenizer) -> Generator:
    cls: Callable[..., Generator] = generator_class(config)
    lora = config.model.lora
    given_by_run = {
        "dtype": DTYPES[generator_dtype(config)],
        "lora_rank": lora.r if lora.enabled else None,
        "own_process": config.distributed.learner_ranks > 1,  # the ranks hold this process's torch.distributed
    }
    accepted = inspect.signature(cls.__init__).parameters  # a generator without LoRA support takes no lora_rank
    run = {name: value for name, value in given_by_run.items() if name in accepted}
    return cls(model, tokenizer, **run, **generator_settings(config))


def stop_strings(config: Config) -> tuple[str, ...]:
    """The configured stop strings, plus the end of the action tag for tagged (agent) environments."""
    stop = list(config.sampling.stop)
    if config.agent.stop_after_action and env_class(config.env.name).action_format == "tagged":
        stop.append(f"</{config.agent.action_tag}>")
    return tuple(dict.fromkeys(stop))


def sampling_params(config: Config, seed: int | None) -> SamplingParams:
    s = config.sampling
    return SamplingParams(
        temperature=s.temperature, top_p=s.top_p, max_new_tokens=s.max_new_tokens, stop=stop_strings(config), seed=seed
    )


def eval_params(config: Config) -> SamplingParams:
    return SamplingParams(
        temperature=config.eval.temperature,
        top_p=1.0,
        max_new_tokens=config.eval.max_new_tokens or config.sampling.max_new_tokens,
        stop=stop_strings(config),
        seed=config.eval.seed,
    )


def two_attempts(config: Config):
    """R3's two-attempt evaluation as the config asks for it (eval.attempts=2), else None. The reflection's token
    limit and temperature are the evaluation's own where set, else the training strategy's (so reflections are
    asked alike in training and evaluation unless set apart), else 128 tokens and the evaluation's temperature."""
    from r3l.evaluate import TwoAttempts
    from r3l.reflection.prompts import ReflectionPrompts

    e, strategy = config.eval, config.algorithm.strategy_args
    if e.attempts != 2:
        return None
    tokens = e.reflection_max_new_tokens or strategy.get("reflection_max_new_tokens") or 128
    temperature = e.reflection_temperature
    if temperature is None:
        temperature = strategy.get("reflection_temperature")
    return TwoAttempts(
        ReflectionPrompts.load(e.reflect_prompt, e.retry_prompt, e.include_feedback),
        tokens,
        temperature,
        e.verdict_control,
    )


@dataclass
class Parts:
    model: Any
    tokenizer: Any
    make_env: Callable[[], Env]
    generator: Generator
    strategy: Strategy


def rollout_context(config: Config, make_env: Callable[[], Env], generator: Generator, tokenizer) -> RolloutContext:
    """What playing episodes needs; exploration extends it (ExploreContext), held-out evaluation uses it as is."""
    return RolloutContext(make_env, generator, tokenizer, PromptFormat.from_config(config.env), agent_limits(config))


def held_out_tasks(config: Config, env: Env, say: bool = False) -> list[Task]:
    """The first `eval.size` tasks of the environment's test split (None: all of them), without those that are
    training tasks by content where `eval.exclude_train_overlap` asks; a size above the split is said in one line
    (the whole split is then used), never cut silently. With `say`, the overlap by content is said in one line."""
    tasks = list(env.tasks("test"))
    if config.eval.size is not None and config.eval.size > len(tasks):
        console.print(
            f"[yellow]warning: eval.size={config.eval.size} asks for more held-out tasks than environment "
            f"'{config.env.name}' has in its test split ({len(tasks)}); evaluating on all {len(tasks)} (set "
            f"eval.size={len(tasks)}, or a larger test split where the environment takes one)[/]",
            soft_wrap=True,
        )
    if config.eval.size == 0:
        return []
    if not (say or config.eval.exclude_train_overlap):
        return tasks[: config.eval.size]
    flags = training_overlap(tasks, env.tasks("train"), env.near_duplicate_key)
    overlapping = [exact or near for exact, near in flags]
    if config.eval.exclude_train_overlap:
        tasks = [task for task, overlaps in zip(tasks, overlapping, strict=True) if not overlaps]
        overlapping = [False] * len(tasks)
    chosen = tasks[: config.eval.size]
    shared = sum(overlapping[: len(chosen)])
    if say and (shared or config.eval.exclude_train_overlap):
        left_out = sum(exact or near for exact, near in flags) if config.eval.exclude_train_overlap else 0
        console.print(
            f"held-out/training overlap by content ({env.near_duplicate_rule}): "
            + (
                f"{left_out} test-split tasks left out (eval.exclude_train_overlap), {len(chosen)} held out"
                if config.eval.exclude_train_overlap
                else f"{shared} of {len(chosen)} held-out tasks are training problems "
                "(eval.exclude_train_overlap=true leaves them out)"
            ),
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    return chosen


def evaluate_held_out(config: Config, tasks: Sequence[Task], context: RolloutContext):
    """(record, summary, metrics) of the held-out evaluation the config asks for (eval.*), on `tasks`."""
    return held_out_evaluation(tasks, context, eval_params(config), two_attempts(config), config.eval.resolved_draws)


def defers_generator(config: Config) -> bool:
    """Whether the training process builds its generator only when it first generates: where rollout workers
    explore (it then serves evaluation and a task list's setup only), unless LoRA wraps the policy in place (the
    generator must be built from the plain model, so at once)."""
    return bool(config.distributed.rollout_workers) and not config.model.lora.enabled


def build_parts(config: Config, driver: bool = False) -> Parts:
    """The run's parts; `driver`: the training process's, whose generator may be built at its first use
    (`defers_generator`)."""
    make_env = env_factory(config)
    generator_settings(config)  # a bad generator setting fails before the model loads
    model, tokenizer = load_model(config)
    generator: Generator = (
        DeferredGenerator(partial(make_generator, config, model, tokenizer))
        if driver and defers_generator(config)
        else make_generator(config, model, tokenizer)
    )
    base = rollout_context(config, make_env, generator, tokenizer)
    context = ExploreContext(
        **{field.name: getattr(base, field.name) for field in fields(base)},
        sampling=sampling_params(config, seed=config.run.seed * 100_003),
        group_size=config.sampling.group_size,
        report_field_chars=config.structured.report_field_chars if config.structured.reports else None,
    )
    try:
        strategy = make_strategy(config.algorithm.strategy, context, **config.algorithm.strategy_args)
    except TypeError as error:
        raise UserError(f"bad settings for strategy '{config.algorithm.strategy}': {error}") from None
    return Parts(model, tokenizer, make_env, generator, strategy)
