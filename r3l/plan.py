"""`r3l plan`: the memory a config needs on each device, from the model's shape alone (no weights loaded), against
the device's size; and what a step generates. Pure arithmetic over a `Shape` and the layout's settings.

The estimate, per learner rank (FSDP shards the fp32 weights, gradients and Adam's two moments over the ranks):
weights (the model's dtype), gradients and Adam state (fp32, trainable parameters only: LoRA's adapters or all),
activations at the micro-batch and context (bf16; with gradient checkpointing each layer keeps its input and one
layer is live, without it every layer keeps ~34 values per token and hidden unit, Korthikanti et al. 2022, with
fused attention), the logits of the trained positions (fp32, twice: softmax and its gradient), a KL reference (a
full copy in the model's dtype; none under LoRA, whose reference is the policy with its adapters off), rank 0's
unsharded copy when there are several ranks, and the generator: vLLM's share of the device
(`gpu_memory_utilization`), freed while the learner trains when it sleeps, or the HF generator's bf16 copy and its
KV cache. Overheads (CUDA context, allocator fragmentation) are a flat 10 %.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r3l.config import Config
from r3l.envs import SingleTurnEnv, env_class
from r3l.errors import UserError
from r3l.models.random_shape import PREFIX, SHAPES

GIB = 2**30
OVERHEAD = 1.10
ACTIVATION_VALUES_PER_TOKEN_AND_UNIT = 34  # per layer, bf16, fused attention (no s^2 term)


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


def positions_per_pass(layout: Layout) -> int:
    """The padded positions of the largest micro-batch: rows x context, within the positions cap (a sequence
    longer than the cap is a pass of its own)."""
    rows_full = layout.micro_batch * layout.context
    if layout.micro_batch_tokens is None:
        return rows_full
    return min(rows_full, max(layout.micro_batch_tokens, layout.context))


def memory_parts(shape: Shape, layout: Layout, device_gib: float) -> dict[str, float]:
    """GiB per component on the busiest device (learner rank 0, which also holds the generator)."""
    total = parameter_count(shape)
    lora = layout.lora_rank is not None
    trainable = lora_parameter_count(shape, layout.lora_rank or 0, list(layout.lora_targets)) if lora else total
    tokens = positions_per_pass(layout)
    per_layer = ACTIVATION_VALUES_PER_TOKEN_AND_UNIT * tokens * shape.hidden
    if layout.gradient_checkpointing:  # each layer keeps its input; one layer's activations are live at a time
        kept = shape.layers * 2 * tokens * shape.hidden + per_layer
    else:
        kept = per_layer * shape.layers
    parts = {
        "weights": total * layout.model_bytes / layout.ranks,
        "gradients (fp32)": trainable * 4 / layout.ranks,
        "Adam state (fp32, 2 moments)": trainable * 8 / layout.ranks,
        "activations (bf16)": kept,
        "trained logits (fp32, x2)": min(layout.trained_tokens, tokens) * shape.vocab * 4 * 2,
        "KL reference (a full copy)": total * layout.model_bytes if layout.kl_reference else 0.0,
        "rank 0's unsharded copy": total * layout.model_bytes if layout.ranks > 1 else 0.0,
    }
    if layout.generator == "vllm":
        parts["vLLM (its share of the device)"] = layout.vllm_share * device_gib * GIB
    else:
        kv = 2 * shape.layers * shape.kv_heads * shape.dim * layout.context * layout.decoded_at_once * 2
        parts["generator copy (bf16) + KV cache"] = total * 2 + kv
    return {name: value / GIB for name, value in parts.items()}


def peak_gib(parts: dict[str, float], layout: Layout) -> float:
    """The busiest moment, with overheads: a sleeping vLLM engine is freed while the learner's activations live."""
    vllm = parts.get("vLLM (its share of the device)", 0.0)
    resident = sum(value for name, value in parts.items() if not name.startswith(("vLLM", "activations", "trained")))
    training = parts["activations (bf16)"] + parts["trained logits (fp32, x2)"]
    busy = resident + (max(vllm, training) if layout.vllm_sleeps else vllm + training)
    return busy * OVERHEAD


def advice(parts: dict[str, float], layout: Layout) -> str:
    """The setting that frees the most, for a layout that does not fit."""
    largest = max(parts, key=lambda name: parts[name])
    if largest.startswith(("weights", "gradients", "Adam", "rank 0")):
        more = layout.ranks * 2
        return f"set distributed.learner_ranks={more} (FSDP shards weights, gradients, Adam) or model.lora.enabled=true"
    if largest.startswith(("activations", "trained")):
        if not layout.gradient_checkpointing:
            return "set model.gradient_checkpointing=true or a smaller train.micro_batch_size"
        return f"set train.micro_batch_size={max(1, layout.micro_batch // 2)} or a shorter agent.max_context_tokens"
    if largest.startswith("vLLM"):
        return "lower generator.engine_args.gpu_memory_utilization or set generator.sleep=true"
    if largest.startswith("KL"):
        return "set algorithm.kl_coef=0 (no reference model)"
    return "set generator=vllm with generator.sleep=true (the HF generator keeps a copy and its KV cache)"


def layout_of(config: Config) -> Layout:
    lora = config.model.lora
    own = config.generator.settings
    engine = own.get("engine_args") or {}
    multi_turn = not issubclass(env_class(config.env.name), SingleTurnEnv)
    # a multi-turn episode may fill its context; a single answer is a prompt (up to ~512 tokens) and the reply
    context = config.agent.max_context_tokens if multi_turn else 512 + config.sampling.max_new_tokens
    sequences = config.train.tasks_per_step * config.sampling.group_size
    return Layout(
        ranks=config.distributed.learner_ranks,
        model_bytes=4 if config.model.dtype == "float32" else 2,
        lora_rank=lora.r if lora.enabled else None,
        lora_targets=tuple(lora.target_modules),
        gradient_checkpointing=config.model.gradient_checkpointing,
        micro_batch=config.train.micro_batch_size,
        context=context,
        trained_tokens=config.train.micro_batch_size * config.sampling.max_new_tokens,
        kl_reference=config.algorithm.kl_coef > 0 and not lora.enabled,  # LoRA's reference: its adapters off
        generator=config.generator.name,
        vllm_share=float(engine.get("gpu_memory_utilization", 0.4)),
        vllm_sleeps=own.get("sleep", "auto") in ("auto", True),
        sequences=sequences,
        decoded_at_once=min(sequences, config.agent.env_workers) if multi_turn else sequences,
        micro_batch_tokens=config.train.micro_batch_tokens,
    )


def plan_table(config: Config, device_gib: float) -> tuple[str, bool, str]:
    """The table `r3l plan` prints, whether the busiest device fits, and what to change where it does not."""
    shape = model_shape(config.model.name)
    layout = layout_of(config)
    parts = memory_parts(shape, layout, device_gib)
    peak = peak_gib(parts, layout)
    sequences = layout.sequences
    asleep = " (vLLM asleep while the learner trains)" if layout.vllm_sleeps and layout.generator == "vllm" else ""
    lines = [
        f"model {config.model.name}: {parameter_count(shape) / 1e9:.2f}B parameters; "
        f"{layout.ranks} learner rank(s); generator {layout.generator}",
        "",
        "| on the busiest device (learner rank 0) | GiB |",
        "|---|---|",
        *(f"| {name} | {value:.1f} |" for name, value in parts.items() if value > 0),
        f"| peak, with {OVERHEAD - 1:.0%} overhead{asleep} | **{peak:.1f}** of {device_gib:g} |",
        "",
        f"a step: {sequences} sequences ({config.train.tasks_per_step} tasks x {config.sampling.group_size}), "
        f"up to {sequences * config.sampling.max_new_tokens:,} generated tokens per turn, "
        f"micro-batches of {layout.micro_batch} at a context of up to {layout.context:,} tokens"
        + (f", at most {layout.micro_batch_tokens:,} positions a pass" if layout.micro_batch_tokens else ""),
    ]
    return "\n".join(lines), peak <= device_gib, advice(parts, layout)
