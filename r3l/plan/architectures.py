"""A model's shape (no weights): from a local directory's config.json, or a small table of the architectures the
papers' recipes use, for hub names that cannot be downloaded here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from r3l.errors import UserError


@dataclass(frozen=True)
class Architecture:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = True
    head_dim: int | None = None  # None: hidden / heads

    @property
    def head_size(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    def projections(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder layer (LoRA's target_modules names)."""
        q, kv, h, i = self.heads * self.head_size, self.kv_heads * self.head_size, self.hidden, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    @property
    def parameters(self) -> int:
        """Embeddings (twice when the LM head is not tied), linear layers and norms; biases left out (< 0.1%)."""
        per_layer = sum(a * b for a, b in self.projections().values()) + 2 * self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return embeddings + self.layers * per_layer + self.hidden

    def lora_parameters(self, rank: int, targets: list[str]) -> int:
        """Parameters of LoRA adapters of `rank` on the `targets` of every layer: rank x (in + out) each."""
        return self.layers * sum(rank * (a + b) for name, (a, b) in self.projections().items() if name in targets)

    def kv_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """Keys and values of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_size * bytes_per_value


QWEN_05B = Architecture(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, vocab=151936)
KNOWN: dict[str, Architecture] = {
    "smollm2-135m-instruct": Architecture(hidden=576, layers=30, heads=9, kv_heads=3, intermediate=1536, vocab=49152),
    "qwen2.5-coder-0.5b-instruct": QWEN_05B,
    "qwen/qwen2.5-0.5b-instruct": QWEN_05B,
    "qwen/qwen2.5-1.5b-instruct": Architecture(
        hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960, vocab=151936
    ),
    "qwen/qwen2.5-7b-instruct": Architecture(
        hidden=3584, layers=28, heads=28, kv_heads=4, intermediate=18944, vocab=152064, tied_embeddings=False
    ),
    "qwen/qwen3-4b": Architecture(
        hidden=2560, layers=36, heads=32, kv_heads=8, intermediate=9728, vocab=151936, head_dim=128
    ),
    "meta-llama/llama-3.2-3b-instruct": Architecture(
        hidden=3072, layers=28, heads=24, kv_heads=8, intermediate=8192, vocab=128256, head_dim=128
    ),
}
KNOWN["tiny-random"] = Architecture(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=49152)
KNOWN["meta-llama/llama-3.2-3b"] = KNOWN["meta-llama/llama-3.2-3b-instruct"]
KNOWN["qwen/qwen3-4b-instruct-2507"] = KNOWN["qwen/qwen3-4b"]


def from_config_json(path: Path) -> Architecture:
    """The shape a transformers config.json gives."""
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
        heads = values["num_attention_heads"]
        return Architecture(
            hidden=values["hidden_size"],
            layers=values["num_hidden_layers"],
            heads=heads,
            kv_heads=values.get("num_key_value_heads") or heads,
            intermediate=values["intermediate_size"],
            vocab=values["vocab_size"],
            tied_embeddings=bool(values.get("tie_word_embeddings", True)),
            head_dim=values.get("head_dim"),
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path}: cannot read the model's shape ({type(error).__name__}: {error})") from None


def architecture(name: str) -> Architecture:
    """The shape of model `name`: a directory's (or a run's latest checkpoint's) config.json, else the table."""
    folder = Path(name)
    for candidate in (folder / "config.json", folder / "checkpoints" / "latest" / "model" / "config.json"):
        if candidate.is_file():
            return from_config_json(candidate)
    key = name.lower()
    if key in KNOWN:
        return KNOWN[key]
    raise UserError(
        f"the shape of model '{name}' is not known here; pass a local model directory (its config.json is read) "
        f"or one of: {', '.join(sorted(KNOWN))}"
    )
