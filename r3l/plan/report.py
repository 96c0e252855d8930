"""`r3l plan`: a config's layout read into the memory each device needs, printed, and refused where it cannot fit."""

from __future__ import annotations

from dataclasses import dataclass

from r3l.config import Config
from r3l.errors import UserError
from r3l.plan.architectures import Architecture, architecture
from r3l.plan.memory import GIB, Layout, device_peak, kv_cache_tokens, learner_parts, trainable_parameters, vllm_parts

COLOCATED_VLLM_SHARE = 0.4  # r3l/rollout/vllm.py's default gpu_memory_utilization beside the learner on CUDA
# what to change when a part is what overflows the device: the setting, by the part that is largest
ADVICE = {
    "weights": "shard the model over more GPUs (distributed.learner_ranks) or train LoRA adapters "
    "(model.lora.enabled=true)",
    "gradients": "train LoRA adapters (model.lora.enabled=true) or shard over more GPUs (distributed.learner_ranks)",
    "optimizer": "train LoRA adapters (model.lora.enabled=true) or shard over more GPUs (distributed.learner_ranks)",
    "kl_reference": "drop the KL reference copy (algorithm.kl_coef=0) or shard over more GPUs",
    "activations": "lower train.micro_batch_size (or agent.max_context_tokens), or set "
    "model.gradient_checkpointing=true",
    "vllm_engine": "lower generator.engine_args.gpu_memory_utilization, or let the engine sleep while the learner "
    "trains (generator.sleep=auto)",
}


@dataclass(frozen=True)
class Plan:
    arch: Architecture
    layout: Layout
    device_gib: float
    parts: dict[str, float]
    vllm: dict[str, float]
    peak: float
    sequences: int
    tokens: int

    @property
    def fits(self) -> bool:
        return self.peak <= self.device_gib * GIB


def layout_of(config: Config, context: int | None = None) -> Layout:
    lora = config.model.lora
    g, d = config.generator, config.distributed
    colocated = g.name == "vllm" and not (d.rollout_workers and d.worker_gpus)
    share = float(g.engine_args.get("gpu_memory_utilization", COLOCATED_VLLM_SHARE)) if colocated else 0.0
    return Layout(
        dtype=config.model.dtype,
        lora_rank=lora.r if lora.enabled else None,
        lora_targets=tuple(lora.target_modules),
        ranks=d.learner_ranks,
        kl_reference=config.algorithm.kl_coef > 0,
        gradient_checkpointing=config.model.gradient_checkpointing,
        micro_batch=config.train.micro_batch_size,
        context=context or config.agent.max_context_tokens,
        vllm_share=share,
        vllm_sleeps=g.sleep is not False,
    )


def make_plan(config: Config, device_gib: float, context: int | None = None) -> Plan:
    arch = architecture(config.model.name)
    layout = layout_of(config, context)
    parts = learner_parts(arch, layout)
    share = layout.vllm_share * device_gib * GIB
    vllm = vllm_parts(arch, layout.vllm_share, device_gib * GIB) if layout.vllm_share else {}
    sequences = config.train.tasks_per_step * config.sampling.group_size
    return Plan(
        arch,
        layout,
        device_gib,
        parts,
        vllm,
        device_peak(parts, share, layout.vllm_sleeps),
        sequences,
        sequences * layout.context,
    )


def refusal(plan: Plan) -> str | None:
    """One line naming the setting to change where the layout cannot fit, else None."""
    layout = plan.layout
    if plan.vllm and kv_cache_tokens(plan.arch, plan.vllm["vllm_kv_cache"]) < layout.context:
        tokens = kv_cache_tokens(plan.arch, plan.vllm["vllm_kv_cache"])
        return (
            f"vLLM's share of the {plan.device_gib:g} GiB device ({layout.vllm_share:g}) leaves a KV cache of "
            f"{tokens} tokens, less than one context of {layout.context}; raise "
            "generator.engine_args.gpu_memory_utilization"
        )
    if plan.fits:
        return None
    sizes = {**plan.parts, "vllm_engine": layout.vllm_share * plan.device_gib * GIB}
    largest = max(sizes, key=lambda part: sizes[part])
    return (
        f"this layout needs {plan.peak / GIB:.1f} GiB on a {plan.device_gib:g} GiB device ({largest.replace('_', ' ')} "
        f"{sizes[largest] / GIB:.1f} GiB the largest part): {ADVICE[largest]}"
    )


def render(plan: Plan, model: str) -> str:
    arch, layout = plan.arch, plan.layout
    trained = trainable_parameters(arch, layout)
    kind = "full fine-tuning" if layout.lora_rank is None else f"LoRA rank {layout.lora_rank}"
    lines = [
        f"model {model}: {arch.parameters / 1e9:.2f}B parameters ({arch.layers} layers, hidden {arch.hidden}, "
        f"{arch.heads} heads, {arch.kv_heads} KV heads, intermediate {arch.intermediate}, vocab {arch.vocab})",
        f"layout: {kind} ({trained / 1e6:.1f}M trained), {layout.dtype} weights, {layout.ranks} learner rank(s), "
        f"micro-batch {layout.micro_batch} x context {layout.context}, gradient checkpointing "
        f"{'on' if layout.gradient_checkpointing else 'off'}",
        "per device (GiB):",
    ]
    lines += [f"  {name.replace('_', ' '):<14} {value / GIB:8.2f}" for name, value in plan.parts.items()]
    lines.append(f"  {'learner':<14} {sum(plan.parts.values()) / GIB:8.2f}")
    if plan.vllm:
        kv = plan.vllm["vllm_kv_cache"]
        phase = "sleeps while the learner trains" if layout.vllm_sleeps else "awake"
        lines.append(
            f"  {'vLLM share':<14} {layout.vllm_share * plan.device_gib:8.2f}  (weights "
            f"{plan.vllm['vllm_weights'] / GIB:.2f}, KV cache {max(kv, 0) / GIB:.2f} = "
            f"{kv_cache_tokens(arch, kv)} tokens; {phase})"
        )
    verdict = "fits" if plan.fits else "does NOT fit"
    lines.append(f"  {'peak':<14} {plan.peak / GIB:8.2f}  of {plan.device_gib:g} GiB: {verdict}")
    lines.append(f"a step: {plan.sequences} sequences (tasks x group size), at most {plan.tokens:,} tokens")
    return "\n".join(lines)


def plan_command(config: Config, device_gib: float, context: int | None = None) -> tuple[str, str | None]:
    """The plan's text and, where the layout cannot fit, the one line that refuses it."""
    if not device_gib > 0:
        raise UserError(f"--gpu-memory must be positive, got {device_gib}")
    plan = make_plan(config, device_gib, context)
    return render(plan, config.model.name), refusal(plan)
