"""A GGUF file dequantised once into a plain trainable model, cached as safetensors under $R3L_CACHE
(default ~/.cache/r3l/models/ALIAS), so later loads take about a second."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """Where r3l keeps what it makes once (converted models, drawn tasks, vLLM's environment): R3L_CACHE, else
    ~/.cache/r3l."""
    return Path(environ.get("R3L_CACHE", Path.home() / ".cache" / "r3l"))


def converted_dir(alias: str) -> Path:
    return cache_root() / "models" / alias


def convert_gguf(folder: Path, gguf_file: str, target: Path, alias: str) -> None:
    """Dequantise `folder/gguf_file` into a fresh (unquantised) model and save it with its tokenizer at `target`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    quantized = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=gguf_file, dtype=torch.float32, use_kernels=False
    )
    config = AutoConfig.for_model(**{k: v for k, v in quantized.config.to_dict().items() if k != "quantization_config"})
    config.name_or_path = alias
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    # a private folder renamed into place: runs started together each convert, the first rename wins
    partial = Path(tempfile.mkdtemp(prefix=target.name + ".partial-", dir=target.parent))
    try:
        plain.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        try:
            partial.rename(target)
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def is_converted(target: Path) -> bool:
    return (target / "config.json").exists()
