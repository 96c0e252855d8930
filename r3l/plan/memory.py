"""The memory one device needs, in pure arithmetic on a model's shape and a layout (bytes; estimates).

Learner (per learner rank; FSDP shards weights, gradients and optimizer state over `ranks`):
- weights: parameters x bytes of model.dtype (float32 under bf16 autocast: the weights are the fp32 master copy);
  with LoRA the frozen base plus the adapters.
- gradients: trainable parameters x bytes of model.dtype.
- optimizer: AdamW's two moments per trainable parameter, in the parameter's dtype.
- KL reference: a frozen copy of the weights when algorithm.kl_coef > 0 (not sharded).
- activations at micro-batch b and context T under bf16 autocast: without gradient checkpointing each layer keeps
  about (8 hidden + 3 intermediate) values a token (inputs of the projections, the attention output, the MLP's
  gate, up and product; attention scores are not kept by SDPA); with it only each layer's input (hidden a token)
  plus one layer recomputed. The LM head's fp32 logits and their gradient: b x T x vocab x 8 bytes.
Generator (vLLM) on the same device: `gpu_memory_utilization` of the device, of which its bf16 weights take
parameters x 2 bytes and the rest is KV cache. Sleeping (generator.sleep) frees it while the learner trains, so the
device's peak is the larger of the two phases; awake, the two add up.
"""

from __future__ import annotations

from dataclasses import dataclass

from r3l.plan.architectures import Architecture

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
LOGIT_BYTES = 8  # fp32 logits and their gradient a position


@dataclass(frozen=True)
class Layout:
    dtype: str = "float32"
    lora_rank: int | None = None  # None: full fine-tuning
    lora_targets: tuple[str, ...] = ()
    ranks: int = 1  # learner ranks sharding the model (FSDP)
    kl_reference: bool = False
    gradient_checkpointing: bool = False
    micro_batch: int = 1
    context: int = 4096
    vllm_share: float = 0.0  # of the device, for a vLLM engine on it (0: none)
    vllm_sleeps: bool = True


def trainable_parameters(arch: Architecture, layout: Layout) -> int:
    if layout.lora_rank is None:
        return arch.parameters
    return arch.lora_parameters(layout.lora_rank, list(layout.lora_targets))


def learner_parts(arch: Architecture, layout: Layout) -> dict[str, float]:
    """Bytes of each part of the learner on one rank."""
    width = DTYPE_BYTES[layout.dtype]
    trained = trainable_parameters(arch, layout)
    adapters = 0 if layout.lora_rank is None else trained
    tokens = layout.micro_batch * layout.context
    if layout.gradient_checkpointing:
        per_token = arch.layers * arch.hidden + 8 * arch.hidden + 3 * arch.intermediate
    else:
        per_token = arch.layers * (8 * arch.hidden + 3 * arch.intermediate)
    return {
        "weights": (arch.parameters + adapters) * width / layout.ranks,
        "gradients": trained * width / layout.ranks,
        "optimizer": 2 * trained * width / layout.ranks,
        "kl_reference": arch.parameters * width if layout.kl_reference else 0.0,
        "activations": tokens * per_token * 2 + tokens * arch.vocab * LOGIT_BYTES,
    }


def vllm_parts(arch: Architecture, share: float, device_bytes: float) -> dict[str, float]:
    """Bytes of a vLLM engine given `share` of the device: its bf16 weights and the KV cache the rest holds."""
    engine = share * device_bytes
    weights = arch.parameters * 2
    return {"vllm_weights": weights, "vllm_kv_cache": engine - weights}


def kv_cache_tokens(arch: Architecture, kv_bytes: float) -> int:
    return max(0, int(kv_bytes // arch.kv_bytes_per_token()))


def device_peak(learner: dict[str, float], vllm_share_bytes: float, sleeps: bool) -> float:
    """The device's peak: generation (weights, optimizer, reference and the engine) and training (everything of the
    learner) one after the other when the engine sleeps, together when it stays awake."""
    resident = learner["weights"] + learner["optimizer"] + learner["kl_reference"]
    training = sum(learner.values())
    if sleeps:
        return max(resident + vllm_share_bytes, training)
    return training + vllm_share_bytes
