"""Load a policy and its tokenizer from an alias, a local path, a run directory or a hub id."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from r3l.errors import UserError
from r3l.registry import Registry

if TYPE_CHECKING:
    import torch

# torch is imported only to load a model: naming one (check_model_name) takes no heavy import
ModelLoader = Callable[["torch.dtype"], tuple["torch.nn.Module", object]]
ALIASES: Registry[ModelLoader] = Registry("model alias")

from r3l.models import chunked_gguf, embedded, random_shape, tiny  # noqa: E402,F401  (register the aliases)


def resolve_local_path(name: str) -> Path | None:
    """A local model directory for `name`: a saved model, or a run directory's latest checkpoint."""
    path = Path(name).expanduser()
    if not path.exists():
        return None
    if (path / "config.json").exists():
        return path
    for candidate in (path / "checkpoints" / "latest" / "model", path / "model"):
        if (candidate / "config.json").exists():
            return candidate
    raise UserError(f"{name} holds no model (no config.json, no checkpoints/latest/model); pass a model directory")


HUB_ID = re.compile(r"\w[\w.-]*/[\w.-]+")  # owner/name, as the hub spells repository ids


def looks_local(name: str) -> bool:
    """Whether a name that names no existing path was meant as one: it starts like a path (/, ./, ../, ~) or its
    folder exists here (`runs/nope` with a `runs` folder), where a hub id's owner would not."""
    path = Path(name).expanduser()
    return name.startswith(("/", "./", "../", "~")) or (path.parent != Path(".") and path.parent.is_dir())


def check_model_name(name: str) -> Path | None:
    """Refuse in one line a model name that names nothing (without importing torch, so that a typo is refused
    at once): an alias, random:SHAPE (the shape checked), a model or run directory, or an owner/name hub id.
    Returns the local model directory when it is one."""
    if name in ALIASES:
        return None
    if name.startswith(random_shape.PREFIX):
        random_shape.shape_settings(name[len(random_shape.PREFIX) :])
        return None
    local = resolve_local_path(name)
    if local is None and looks_local(name):
        raise UserError(f"model folder '{name}' does not exist; pass a saved model or a run directory (or a hub id)")
    if local is None and not HUB_ID.fullmatch(name):
        raise UserError(
            f"unknown model '{name}': not an alias ({', '.join(ALIASES.names())}), random:SHAPE, a local directory "
            "or a hub id"
        )
    return local


def load_policy(name: str, dtype: torch.dtype | None = None):
    """Return (model, tokenizer) ready for training on CPU (float32 unless `dtype`); never reaches the hub for
    local models."""
    import torch

    dtype = torch.float32 if dtype is None else dtype
    local = check_model_name(name)
    if name in ALIASES:
        return ALIASES.get(name)(dtype)
    if name.startswith(random_shape.PREFIX):
        return random_shape.load_random_shape(name[len(random_shape.PREFIX) :], dtype)
    if local is not None:
        return load_pretrained(str(local), dtype, local_only=True)
    return load_pretrained(name, dtype, local_only=os.environ.get("HF_HUB_OFFLINE") == "1")


def load_pretrained(source: str, dtype: torch.dtype, local_only: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
        # use_kernels=False: the model's own torch layers, never layers fetched from the Hub as it loads (transformers
        # 5 turns them on where the `kernels` package is installed; offline GPU machines then fail to load)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, local_files_only=local_only, use_kernels=False
        )
    except OSError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"cannot load model '{source}': {first_line}") from None
    return prepare(model, tokenizer)


def prepare(model, tokenizer):
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.use_cache = True
    return model, tokenizer
