"""`r3l plan`: the memory a config needs on each device, from the model's shape alone (no weights loaded), against
the device's size; and what a step generates. Pure arithmetic over a `Shape` and the layout's settings.

The estimate, per learner rank (FSDP shards the weights, gradients and Adam's two moments over the ranks):
- weights at the model's dtype (`model.dtype`: fp32 master weights by default, bf16 when asked);
- gradients at the weights' dtype (LoRA's adapters train in fp32: PEFT keeps them so under a bf16 base) and Adam's
  two moments in fp32, of the trainable parameters only (LoRA's adapters, or all);
- activations of the largest pass (rows x context; a group's shared prompt once, `train.share_prefix`): without
  gradient checkpointing every layer keeps `ACTIVATION_BYTES_BF16` bytes per token and hidden unit under bf16
  autocast (`ACTIVATION_BYTES_FP32` without), measured on transformers' layers; with it each layer keeps its input,
  the residual stream, which stays in the weights' dtype under autocast (fp32 for fp32 master weights: autocast
  casts the matmuls' inputs, not the residual adds), and one layer is live;
- autocast's bf16 copies of the fp32 weights, which each matmul saves for its backward (none under gradient
  checkpointing, whose forward saves nothing);
- the logits of the trained positions (8 bytes each: the softmax and its gradient). A single-turn row trains its
  reply (`sampling.max_new_tokens`); a multi-turn row trains every assistant turn, up to `agent.max_turns` x
  `sampling.max_new_tokens` and no more than its context;
- a KL reference (a full copy, bf16 under autocast since it is frozen, else in the model's dtype; none under LoRA,
  whose reference is the policy with its adapters off) and rank 0's unsharded copy when there are several ranks;
- one FSDP unit: with several ranks and the shared-prefix forward on (`train.share_prefix` without gradient
  checkpointing) the policy is a single FSDP unit, so its whole weights and gradients are gathered while it trains
  (`per_layer_units` in r3l/learner/learner.py); per-layer units gather one layer at a time (not counted);
- the generator: vLLM's share of the device (`gpu_memory_utilization`), freed while the learner trains when it
  sleeps, or the HF generator's copy at `generator.dtype` and its KV cache.
Overheads (CUDA context, allocator fragmentation; on a CPU glibc's heap) are a flat 10 %. Each part is a bound at
the config's limits (every row trained, every reply and context at its cap): a run below them holds less.

On a CPU (`--device cpu`, or `model.device=cpu`) the figure is the training process's peak resident memory, and
the process holds one thing more: `CPU_RUNTIME_GIB`, the interpreter with torch, transformers, tokenizers and r3l
imported, the tokenizer, and the libraries' mapped files: what `r3l train` holds once built, less its policy and
its generator's copy (546 MiB with SmolLM2-135M, 569 MiB with Qwen2.5-Coder-0.5B; measured on this repo's CPU).
The policy's fp32 weights are the safetensors file's mapped pages (counted once, as the weights); the HF generator's
copy is cast from a deep copy whose freed fp32 blocks the trainer hands back at each step's end. An environment's
simulator in a process of its own (a JVM, `agent.env_processes`) is not this process's memory and is not counted.
results/plan_check holds the plan against measured peaks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from r3l.config import Config
from r3l.envs import SingleTurnEnv, env_class
from r3l.errors import UserError
from r3l.models.random_shape import PREFIX, SHAPES

GIB = 2**30
OVERHEAD = 1.10
DTYPE_NAMES = {4: "fp32", 2: "bf16"}
TRAINING_ONLY = ("activations", "trained", "autocast", "one FSDP unit")  # live while the learner trains, freed after
MAX_RANKS = 64  # the most learner ranks a hint suggests
CPU_RUNTIME_GIB = 0.55  # measured, see the module's docstring
# bytes a decoder layer keeps per token and hidden unit for its backward (transformers' Llama/Qwen2 layers, SDPA
# attention: no s^2 term), measured on SmolLM2-135M as the slope of the kept memory over 1,664 more positions:
# 52 under bf16 autocast with fp32 weights (the norms and the residual stay fp32), 78 in fp32
ACTIVATION_BYTES_BF16 = 52
ACTIVATION_BYTES_FP32 = 78


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    head_dim: int = 0  # 0: hidden // heads

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden // self.heads


def shape_from_config(settings: dict[str, Any]) -> Shape:
    """A Shape from a transformers config.json's values."""
    try:
        return Shape(
            hidden=settings["hidden_size"],
            intermediate=settings["intermediate_size"],
            layers=settings["num_hidden_layers"],
            heads=settings["num_attention_heads"],
            kv_heads=settings.get("num_key_value_heads") or settings["num_attention_heads"],
            vocab=settings.get("vocab_size", 49152),
            tied=bool(settings.get("tie_word_embeddings", False)),
            head_dim=settings.get("head_dim") or 0,
        )
    except KeyError as missing:
        raise UserError(f"the model's config has no {missing}; r3l plan reads a decoder's config.json") from None


# Published config.json values of models the papers' recipes name (read from each model's own config).
HUB_SHAPES: dict[str, Shape] = {
    # the two r3l's random shapes hold (r3l/models/random_shape.py), with the models' own vocabulary
    "Qwen/Qwen2.5-0.5B-Instruct": shape_from_config({**SHAPES["qwen2.5-0.5b"], "vocab_size": 151936}),
    "Qwen/Qwen2.5-1.5B-Instruct": shape_from_config({**SHAPES["qwen2.5-1.5b"], "vocab_size": 151936}),
    "Qwen/Qwen2.5-3B-Instruct": Shape(2048, 11008, 36, 16, 2, 151936, True),
    "Qwen/Qwen2.5-7B-Instruct": Shape(3584, 18944, 28, 28, 4, 152064, False),
    "Qwen/Qwen3-4B": Shape(2560, 9728, 36, 32, 8, 151936, True, head_dim=128),
    "meta-llama/Llama-3.2-3B-Instruct": Shape(3072, 8192, 28, 24, 8, 128256, True),
    "smollm2-135m-instruct": Shape(576, 1536, 30, 9, 3, 49152, True),
    "qwen2.5-coder-0.5b-instruct": Shape(896, 4864, 24, 14, 2, 151936, False),
}


def model_shape(name: str) -> Shape:
    """The shape of `model.name`: a known model, `random:SHAPE`, or a local folder's config.json."""
    if name in HUB_SHAPES:
        return HUB_SHAPES[name]
    if name.startswith(PREFIX) and name[len(PREFIX) :] in SHAPES:
        return shape_from_config({**SHAPES[name[len(PREFIX) :]], "vocab_size": 49152})
    path = Path(name.removeprefix(PREFIX)).expanduser()
    config = path / "config.json" if path.is_dir() else path
    if config.is_file():
        return shape_from_config(json.loads(config.read_text()))
    raise UserError(
        f"r3l plan does not know the shape of '{name}': give a local model folder (its config.json), "
        f"random:SHAPE, or one of {', '.join(HUB_SHAPES)}"
    )


def parameter_count(shape: Shape) -> int:
    attention = shape.hidden * shape.heads * shape.dim * 2 + shape.hidden * shape.kv_heads * shape.dim * 2
    mlp = 3 * shape.hidden * shape.intermediate
    per_layer = attention + mlp + 2 * shape.hidden
    embeddings = shape.vocab * shape.hidden * (1 if shape.tied else 2)
    return shape.layers * per_layer + embeddings + shape.hidden


def lora_parameter_count(shape: Shape, rank: int, targets: list[str]) -> int:
    """LoRA's A and B (rank x in, out x rank) for each targeted projection of every layer."""
    sizes = {
        "q_proj": (shape.hidden, shape.heads * shape.dim),
        "k_proj": (shape.hidden, shape.kv_heads * shape.dim),
        "v_proj": (shape.hidden, shape.kv_heads * shape.dim),
        "o_proj": (shape.heads * shape.dim, shape.hidden),
        "gate_proj": (shape.hidden, shape.intermediate),
        "up_proj": (shape.hidden, shape.intermediate),
        "down_proj": (shape.intermediate, shape.hidden),
    }
    return shape.layers * sum(rank * (sizes[t][0] + sizes[t][1]) for t in targets if t in sizes)


@dataclass(frozen=True)
class Layout:
    """What the memory depends on besides the shape (read from a config by `layout_of`)."""

    ranks: int
    model_bytes: int  # the master weights' bytes per parameter (4: float32)
    lora_rank: int | None
    lora_targets: tuple[str, ...]
    gradient_checkpointing: bool
    micro_batch: int
    context: int
    trained_tokens: int  # per micro-batch: where the logits are computed (at most its positions)
    kl_reference: bool
    generator: str
    vllm_share: float  # of the device, for vLLM
    vllm_sleeps: bool
    sequences: int  # per step
    decoded_at_once: int  # sequences whose KV cache the HF generator holds together (episodes in flight)
    micro_batch_tokens: int | None = None  # a cap on a micro-batch's padded positions (train.micro_batch_tokens)
    autocast: bool = True  # bf16 compute under autocast (model.autocast_bf16)
    per_layer_units: bool = True  # FSDP wraps each decoder layer on its own (else the policy is one unit)
    generator_bytes: int = 2  # the HF generator's copy, bytes per parameter (generator.dtype)
    device: str = "cuda"  # "cpu": the training process's resident memory, runtime included
    shared_prompt: int = 0  # a group's prompt, run once per micro-batch (train.share_prefix), in tokens; 0: not shared
    group_size: int = 1


def reference_bytes(layout: Layout) -> int:
    """Bytes per parameter of a full KL reference: bf16 under autocast (it is frozen), else the model's dtype."""
    return 2 if layout.autocast else layout.model_bytes


def fsdp_per_layer(share_prefix: bool, gradient_checkpointing: bool) -> bool:
    """The learner's rule (`per_layer_units` in r3l/learner/learner.py, which imports torch; a test keeps the
    two equal): each decoder layer is its own FSDP unit unless the shared-prefix forward runs."""
    return not share_prefix or gradient_checkpointing


def trained_per_row(multi_turn: bool, max_turns: int, max_new_tokens: int, context: int) -> int:
    """The positions a row trains: its reply, or every assistant turn of an episode (within its context)."""
    return min(max_turns * max_new_tokens, context) if multi_turn else max_new_tokens


def positions_per_pass(layout: Layout) -> int:
    """The padded positions of the largest micro-batch: rows x context, within the positions cap (a sequence
    longer than the cap is a pass of its own); a shared prompt counts once for each group in the micro-batch."""
    groups = -(-layout.micro_batch // layout.group_size)
    rows_full = layout.micro_batch * layout.context - (layout.micro_batch - groups) * layout.shared_prompt
    if layout.micro_batch_tokens is None:
        return rows_full
    return min(rows_full, max(layout.micro_batch_tokens, layout.context))


def activation_bytes(shape: Shape, layout: Layout, tokens: int) -> float:
    """What the largest pass keeps for its backward: every layer's activations, or under gradient checkpointing
    each layer's input (the residual stream, in the weights' dtype) and one layer's activations."""
    bf16 = layout.autocast or layout.model_bytes == 2
    per_layer = (ACTIVATION_BYTES_BF16 if bf16 else ACTIVATION_BYTES_FP32) * tokens * shape.hidden
    if layout.gradient_checkpointing:
        return shape.layers * layout.model_bytes * tokens * shape.hidden + per_layer
    return per_layer * shape.layers


def memory_parts(shape: Shape, layout: Layout, device_gib: float) -> dict[str, float]:
    """GiB per component on the busiest device (learner rank 0, which also holds the generator)."""
    total = parameter_count(shape)
    lora = layout.lora_rank is not None
    trainable = lora_parameter_count(shape, layout.lora_rank or 0, list(layout.lora_targets)) if lora else total
    gradient_bytes = 4 if lora else layout.model_bytes
    tokens = positions_per_pass(layout)
    single_unit = layout.ranks > 1 and not layout.per_layer_units
    parts = {
        f"weights ({DTYPE_NAMES[layout.model_bytes]})": total * layout.model_bytes / layout.ranks,
        f"gradients ({DTYPE_NAMES[gradient_bytes]})": trainable * gradient_bytes / layout.ranks,
        "Adam state (fp32, 2 moments)": trainable * 8 / layout.ranks,
        "activations": activation_bytes(shape, layout, tokens),
        "trained logits (fp32, x2)": min(layout.trained_tokens, tokens) * shape.vocab * 4 * 2,
        "autocast's bf16 weight copies": (
            total * 2 if layout.autocast and layout.model_bytes == 4 and not layout.gradient_checkpointing else 0.0
        ),
        "one FSDP unit gathered (weights, gradients)": (
            total * layout.model_bytes + trainable * gradient_bytes if single_unit else 0.0
        ),
        "KL reference (a full copy)": total * reference_bytes(layout) if layout.kl_reference else 0.0,
        "rank 0's unsharded copy": total * layout.model_bytes if layout.ranks > 1 else 0.0,
    }
    if layout.generator == "vllm":
        parts["vLLM (its share of the device)"] = layout.vllm_share * device_gib * GIB
    else:
        # x2: the decode cache's buffers double when full (r3l/models/cache.py), so they hold up to twice the context
        kv = 2 * shape.layers * shape.kv_heads * shape.dim * layout.context * layout.decoded_at_once * 2
        parts["generator copy + KV cache"] = (total + kv) * layout.generator_bytes
    if layout.device == "cpu":
        parts["CPU runtime (torch, transformers, tokenizer)"] = CPU_RUNTIME_GIB * GIB
    return {name: value / GIB for name, value in parts.items()}


def peak_gib(parts: dict[str, float], layout: Layout) -> float:
    """The busiest moment, with overheads: a sleeping vLLM engine is freed while the learner's activations live."""
    vllm = parts.get("vLLM (its share of the device)", 0.0)
    resident = sum(value for name, value in parts.items() if not name.startswith(("vLLM", *TRAINING_ONLY)))
    training = sum(value for name, value in parts.items() if name.startswith(TRAINING_ONLY))
    busy = resident + (max(vllm, training) if layout.vllm_sleeps else vllm + training)
    return busy * OVERHEAD


def fits(shape: Shape, layout: Layout, device_gib: float) -> bool:
    return peak_gib(memory_parts(shape, layout, device_gib), layout) <= device_gib


def candidate_changes(layout: Layout) -> list[tuple[str, Layout]]:
    """Single settings to change, the least disruptive first (the training is the same maths, then a smaller
    step's memory, then more GPUs, then another method): each with the layout it gives."""
    changes: list[tuple[str, Layout]] = []
    if not layout.gradient_checkpointing:
        # which also turns the shared-prefix forward off: one FSDP unit per layer, every prompt in every row
        checkpointed = replace(layout, gradient_checkpointing=True, per_layer_units=True, shared_prompt=0)
        changes.append(("model.gradient_checkpointing=true", checkpointed))
    if layout.generator == "vllm" and not layout.vllm_sleeps:
        changes.append(("generator.sleep=true", replace(layout, vllm_sleeps=True)))
    rows = layout.micro_batch // 2
    while rows >= 1:  # the largest micro-batch first
        per_row = layout.trained_tokens // layout.micro_batch
        changes.append(
            (f"train.micro_batch_size={rows}", replace(layout, micro_batch=rows, trained_tokens=rows * per_row))
        )
        rows //= 2
    ranks = layout.ranks * 2
    while ranks <= MAX_RANKS:  # the fewest ranks first
        changes.append((f"distributed.learner_ranks={ranks}", replace(layout, ranks=ranks)))
        ranks *= 2
    if layout.lora_rank is None:
        targets = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj")
        changes.append(
            ("model.lora.enabled=true", replace(layout, lora_rank=16, lora_targets=targets, kl_reference=False))
        )
    if layout.kl_reference:
        changes.append(("algorithm.kl_coef=0 (no reference model)", replace(layout, kl_reference=False)))
    return changes


def advice(shape: Shape, layout: Layout, device_gib: float) -> str:
    """The least disruptive single setting with which the layout fits (checked), or the parts that take the most
    where no single setting is enough."""
    for setting, changed in candidate_changes(layout):
        if fits(shape, changed, device_gib):
            return f"set {setting}"
    parts = memory_parts(shape, layout, device_gib)
    largest = sorted(parts, key=lambda name: -parts[name])[:3]
    return "no single setting fits it; the largest parts: " + ", ".join(
        f"{name} {parts[name]:.1f} GiB" for name in largest
    )


def layout_of(config: Config, device: str = "cuda", native_bf16: bool = True, prompt_tokens: int = 512) -> Layout:
    """The layout of `config` on `device` ("cuda" or "cpu"); `native_bf16`: whether the device computes bf16
    natively (what model.autocast_bf16=auto and generator.dtype=auto follow); `prompt_tokens`: the longest
    single-turn prompt (a multi-turn episode may fill agent.max_context_tokens)."""
    lora = config.model.lora
    own = config.generator.settings
    engine = own.get("engine_args") or {}
    multi_turn = not issubclass(env_class(config.env.name), SingleTurnEnv)
    context = config.agent.max_context_tokens if multi_turn else prompt_tokens + config.sampling.max_new_tokens
    sequences = config.train.tasks_per_step * config.sampling.group_size
    share_prompt = config.train.share_prefix and not config.model.gradient_checkpointing
    per_row = trained_per_row(multi_turn, config.agent.max_turns, config.sampling.max_new_tokens, context)
    autocast = native_bf16 if config.model.autocast_bf16 == "auto" else bool(config.model.autocast_bf16)
    generator_dtype = config.generator.dtype
    if generator_dtype == "auto":
        generator_dtype = "bfloat16" if native_bf16 else "float32"
    return Layout(
        ranks=config.distributed.learner_ranks,
        model_bytes=4 if config.model.dtype == "float32" else 2,
        lora_rank=lora.r if lora.enabled else None,
        lora_targets=tuple(lora.target_modules),
        gradient_checkpointing=config.model.gradient_checkpointing,
        micro_batch=config.train.micro_batch_size,
        context=context,
        trained_tokens=config.train.micro_batch_size * per_row,
        kl_reference=config.algorithm.kl_coef > 0 and not lora.enabled,  # LoRA's reference: its adapters off
        generator=config.generator.name,
        vllm_share=float(engine.get("gpu_memory_utilization", 0.4)),
        vllm_sleeps=own.get("sleep", "auto") in ("auto", True),
        sequences=sequences,
        decoded_at_once=min(sequences, config.agent.env_workers) if multi_turn else sequences,
        micro_batch_tokens=config.train.micro_batch_tokens,
        autocast=autocast,
        per_layer_units=fsdp_per_layer(config.train.share_prefix, config.model.gradient_checkpointing),
        generator_bytes=4 if generator_dtype == "float32" else 2,
        device=device,
        # the learner runs a group's prompt once where every row shares it (not under gradient checkpointing)
        shared_prompt=prompt_tokens if share_prompt and not multi_turn else 0,
        group_size=config.sampling.group_size,
    )


def plan_table(
    config: Config, device_gib: float, device: str = "cuda", native_bf16: bool = True, prompt_tokens: int = 512
) -> tuple[str, bool, str]:
    """The table `r3l plan` prints, whether the busiest device fits, and what to change where it does not."""
    shape = model_shape(config.model.name)
    layout = layout_of(config, device, native_bf16, prompt_tokens)
    parts = memory_parts(shape, layout, device_gib)
    peak = peak_gib(parts, layout)
    sequences = layout.sequences
    where = "the training process (resident)" if device == "cpu" else "on the busiest device (learner rank 0)"
    asleep = " (vLLM asleep while the learner trains)" if layout.vllm_sleeps and layout.generator == "vllm" else ""
    lines = [
        f"model {config.model.name}: {parameter_count(shape) / 1e9:.2f}B parameters; "
        f"{layout.ranks} learner rank(s); generator {layout.generator}",
        "",
        f"| {where} | GiB |",
        "|---|---|",
        *(f"| {name} | {value:.1f} |" for name, value in parts.items() if value > 0),
        f"| peak, with {OVERHEAD - 1:.0%} overhead{asleep} | **{peak:.1f}** of {device_gib:g} |",
        "",
        f"a step: {sequences} sequences ({config.train.tasks_per_step} tasks x {config.sampling.group_size}), "
        f"up to {sequences * config.sampling.max_new_tokens:,} generated tokens per turn, "
        f"micro-batches of {layout.micro_batch} at a context of up to {layout.context:,} tokens"
        + (f", at most {layout.micro_batch_tokens:,} positions a pass" if layout.micro_batch_tokens else ""),
    ]
    return "\n".join(lines), peak <= device_gib, advice(shape, layout, device_gib)
