"""Build the run's parts (policy, environment, generator, strategy) from a validated config, and the policy as
trained and its learner."""

from __future__ import annotations

import copy
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from r3l.agent.context import RolloutContext
from r3l.config import Config, GeneratorConfig
from r3l.envs import Env, Task, env_class, make
from r3l.envs.reward_functions import RewardFunctions, with_reward_functions
from r3l.errors import UserError
from r3l.evaluate import held_out_evaluation
from r3l.explore import ExploreContext, Strategy, make_strategy
from r3l.models.precision import native_bf16
from r3l.registry import import_submodules
from r3l.rollout.chat import PromptFormat
from r3l.rollout.generator import GENERATORS, DeferredGenerator, Generator, SamplingParams

if TYPE_CHECKING:
    from r3l.learner.learner import Learner

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
    return model.to(resolve_device(config.model.device)), tokenizer


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


def trainable_policy(config: Config, model):
    """(the policy as trained: LoRA and gradient checkpointing applied, the KL reference model or None)."""
    from r3l.learner.learner import apply_lora

    ref_model = copy.deepcopy(model).eval().requires_grad_(False) if config.algorithm.kl_coef > 0 else None
    if config.model.lora.enabled:
        model = apply_lora(model, config.model.lora)
    if config.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model, ref_model


def make_learner(config: Config, model, tokenizer, ref_model, ranks=None) -> Learner:
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


def make_generator(config: Config, model, tokenizer) -> Generator:
    import_submodules(*GENERATOR_PACKAGES)
    g = config.generator
    cls: Callable[..., Generator] = GENERATORS.get(g.name)  # each takes (model, tokenizer, its own settings)
    accepted = inspect.signature(cls.__init__).parameters
    lora = config.model.lora
    settings: dict[str, Any] = {  # the constructor's parameters, each from the generator setting of `source`
        "prefill_chunk": g.prefill_chunk,
        "engine_args": g.engine_args,
        "sleep": g.sleep,
        "decode": g.decode,
        "lora_rank": lora.r if lora.enabled and g.lora_sync == "adapter" else None,
    }
    source = {"lora_rank": "lora_sync"}
    for name in settings:
        setting = source.get(name, name)
        if name not in accepted and getattr(g, setting) != type(g).model_fields[setting].default:
            raise UserError(
                f"generator '{g.name}' has no setting generator.{setting}; remove it (or choose the "
                "generator it belongs to: r3l config shows each setting's generator)"
            )
    settings["dtype"] = DTYPES[generator_dtype(config)]
    return cls(model, tokenizer, **{name: value for name, value in settings.items() if name in accepted})


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


def evaluate_held_out(config: Config, tasks: Sequence[Task], context: RolloutContext):
    """(record, summary, metrics) of the held-out evaluation the config asks for (eval.*), on `tasks`."""
    return held_out_evaluation(tasks, context, eval_params(config), two_attempts(config))


def defers_generator(config: Config) -> bool:
    """Whether the training process builds its generator only when it first generates: where rollout workers
    explore (it then serves evaluation and task-list setup only), unless LoRA wraps the policy in place (a
    generator must be built from the plain model, so it is built at once)."""
    return bool(config.distributed.rollout_workers) and not config.model.lora.enabled


def driver_generator_config(config: Config) -> Config:
    """The config the training process builds its own generator from: the run's, except that with learner
    ranks and rollout workers a vLLM run evaluates with the HF generator (vLLM's in-process engine takes the
    default process group the learner ranks need; the workers explore with vLLM in processes of their own)."""
    g, d = config.generator, config.distributed
    if not (g.name == "vllm" and d.learner_ranks > 1 and d.rollout_workers):
        return config
    plain = GeneratorConfig(name="hf", dtype=g.dtype, prefill_chunk=g.prefill_chunk, decode=g.decode)
    return config.model_copy(update={"generator": plain})


def build_parts(config: Config, driver: bool = False) -> Parts:
    """The run's parts; `driver`: those of the training process, whose generator may be deferred
    (`defers_generator`) or another one (`driver_generator_config`)."""
    make_env = env_factory(config)
    model, tokenizer = load_model(config)
    own = driver_generator_config(config) if driver else config
    generator: Generator = (
        DeferredGenerator(partial(make_generator, own, model, tokenizer))
        if driver and defers_generator(config)
        else make_generator(own, model, tokenizer)
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
