"""Policy weights as a plain name -> tensor mapping (LoRA merged in), for generators and resumes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import torch

from r3l.errors import UserError
from r3l.learner.checkpoint import is_lora, unreadable
from r3l.learner.lora_merge import MergedLora


@contextmanager
def merged_state_dict(model) -> Iterator[Mapping[str, torch.Tensor]]:
    """The weights a plain (non-LoRA) copy of the policy would have; valid inside the `with` block. A LoRA policy's
    adapted weights are merged out of place as they are read (MergedLora), never into its frozen base."""
    yield MergedLora(model) if is_lora(model) else model.state_dict()


@contextmanager
def saved_adapter(model) -> Iterator[Path]:
    """A temporary folder holding the policy's LoRA adapter as PEFT saves it (adapter_config.json,
    adapter_model.safetensors); valid inside the `with` block."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="r3l-adapter-") as folder:
        model.save_pretrained(folder)
        yield Path(folder)


def load_weights(model, checkpoint: Path) -> None:
    """Restore trainable weights saved by `save_checkpoint`."""
    from safetensors.torch import load_file

    lora = is_lora(model)
    path = checkpoint / "adapter" / "adapter_model.safetensors" if lora else checkpoint / "model" / "model.safetensors"
    try:
        state = load_file(str(path))
    except Exception as error:  # noqa: BLE001 - missing, truncated or not safetensors at all
        raise unreadable(path, error) from None
    mismatch = (
        "was written for a different model; resume with the config saved in the run directory "
        "(model, LoRA and dtype as they were)"
    )
    if lora:
        from peft import set_peft_model_state_dict

        try:
            result = set_peft_model_state_dict(model, state)
        except RuntimeError as error:  # shapes that do not fit
            raise UserError(f"{path} {mismatch} ({str(error).splitlines()[0][:160]})") from None
        unexpected_keys = result.unexpected_keys  # type: ignore[attr-defined]  # peft's return annotation is broken
        if unexpected_keys:
            raise UserError(f"{path} {mismatch} (unexpected {unexpected_keys[:3]})")
        return
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as error:
        raise UserError(f"{path} {mismatch} ({str(error).splitlines()[-1].strip()[:160]})") from None
    real_missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    if real_missing or unexpected:
        raise UserError(f"{path} {mismatch} (missing {real_missing[:3]}, unexpected {unexpected[:3]})")
