"""`tiny-random`: a small randomly initialised Llama with the embedded model's tokenizer, for fast tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from r3l.models import ALIASES

if TYPE_CHECKING:
    import torch

TINY_SHAPE: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)


@ALIASES.register("tiny-random")
def load_tiny_random(dtype: torch.dtype, seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from r3l.models import prepare
    from r3l.models.embedded import load_embedded_tokenizer

    tokenizer = load_embedded_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TINY_SHAPE,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(dtype)  # type: ignore[arg-type]  # transformers types .to's wrapper wrongly
    torch.random.set_rng_state(generator_state)
    config.name_or_path = "tiny-random"
    return prepare(model, tokenizer)
