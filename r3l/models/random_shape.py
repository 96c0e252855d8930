"""`random:NAME`: a randomly initialised model of a published shape (or of a config.json), nothing downloaded.

Benchmarks use it to measure speed at a real model's size where its weights cannot be fetched. The
vocabulary is the embedded tokenizer's (49,152 rows), so that every sampled id decodes; the rest
of the shape is the named model's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from r3l.errors import UserError

if TYPE_CHECKING:
    import torch

PREFIX = "random:"

# Published configurations (config.json of each model), vocabulary aside.
SHAPES: dict[str, dict] = {
    "qwen2.5-0.5b": dict(
        model_type="qwen2",
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": dict(
        model_type="qwen2",
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    # Qwen2.5's architecture (GQA, RoPE, tied embeddings) at a width that trains in seconds on a CPU: the
    # recipes' tests run each one with it in place of its model
    "qwen2.5-tiny": dict(
        model_type="qwen2",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "llama-3.2-1b": dict(
        model_type="llama",
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131072,
        rope_theta=500_000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    ),
}


def shape_settings(spec: str) -> dict:
    """The config dict (with `model_type`) named by `spec`: a known shape or a config.json path."""
    if spec in SHAPES:
        return dict(SHAPES[spec])
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise UserError(
            f"random model '{spec}': not a known shape ({', '.join(sorted(SHAPES))}) and no config.json "
            "there; write e.g. model=random:qwen2.5-1.5b or model=random:path/to/config.json"
        )
    try:
        settings = json.loads(path.read_text())
    except ValueError as error:
        raise UserError(f"{path} is not valid JSON ({error}); pass a transformers config.json") from None
    if not isinstance(settings, dict) or "model_type" not in settings:
        raise UserError(f"{path} has no model_type; pass a transformers config.json (e.g. a model's own)")
    return settings


def load_random_shape(spec: str, dtype: torch.dtype, seed: int = 0):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from r3l.models import prepare
    from r3l.models.embedded import load_embedded_tokenizer

    settings = shape_settings(spec)
    tokenizer = load_embedded_tokenizer()
    settings.update(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    settings.pop("architectures", None)
    settings.pop("torch_dtype", None)
    settings.pop("dtype", None)
    config = AutoConfig.for_model(**settings)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    finally:
        torch.random.set_rng_state(state)
    config.name_or_path = PREFIX + spec
    return prepare(model, tokenizer)
