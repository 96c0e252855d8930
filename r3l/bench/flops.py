"""Pure model arithmetic: FLOPs of a training step and bytes read by decoding, from the model's shape.

Counts are for a decoder-only transformer with gated MLPs (Llama, Qwen2, Mistral, SmolLM): every
linear layer costs 2 FLOPs per weight per position forward, backward twice that; attention costs
4 x heads x head_dim FLOPs per (query, key) pair per layer forward (scores and weighted values).
Norms, rotary embeddings and softmax are left out (well under 1% at these sizes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def from_config(cls, config) -> ModelShape:
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            heads=heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=head_dim,
            intermediate=config.intermediate_size,
            vocab=config.vocab_size,
        )

    @property
    def body_weights(self) -> int:
        """Weights of the decoder's linear layers (attention q, k, v, o and the gated MLP), all layers."""
        attention = 2 * self.hidden * self.heads * self.head_dim + 2 * self.hidden * self.kv_heads * self.head_dim
        return self.layers * (attention + 3 * self.hidden * self.intermediate)

    @property
    def head_weights(self) -> int:
        return self.hidden * self.vocab

    @property
    def attention_flops_per_pair(self) -> int:
        return 4 * self.layers * self.heads * self.head_dim

    def kv_values_per_position(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim

    def to_json(self) -> dict:
        return {**asdict(self), "body_weights": self.body_weights, "head_weights": self.head_weights}


def training_flops(shape: ModelShape, positions: float, attention_pairs: float, head_positions: float) -> float:
    """Forward + backward FLOPs (3x forward) of running `positions` through the decoder with
    `attention_pairs` causal pairs and the LM head at `head_positions`."""
    forward = (
        2 * shape.body_weights * positions
        + shape.attention_flops_per_pair * attention_pairs
        + 2 * shape.head_weights * head_positions
    )
    return 3.0 * forward


def sequence_work(prompt_length: int, completion_length: int) -> dict[str, int]:
    """Forward work of one whole prompt + completion sequence trained on its completion (no sharing)."""
    n = prompt_length + completion_length
    return {"positions": n, "attention_pairs": n * (n + 1) // 2, "head_positions": completion_length}


def decode_flops(shape: ModelShape, rows: float, kv_positions: float) -> float:
    """Forward FLOPs of decoding one token for each of `rows`, attending to `kv_positions` cached positions."""
    return 2 * (shape.body_weights + shape.head_weights) * rows + shape.attention_flops_per_pair * kv_positions


def decode_bytes(shape: ModelShape, steps: float, kv_positions: float, bytes_per_value: int) -> float:
    """Bytes read by `steps` batched decode forwards: every weight once per step (rows share them) plus
    the keys and values of every cached position each row attends to."""
    return (
        steps * (shape.body_weights + shape.head_weights) + kv_positions * shape.kv_values_per_position()
    ) * bytes_per_value


def utilization(amount: float, seconds: float, peak_per_second: float) -> float:
    """Achieved rate (`amount` / `seconds`) as a fraction of `peak_per_second`."""
    return amount / seconds / peak_per_second if seconds > 0 and peak_per_second > 0 else 0.0
