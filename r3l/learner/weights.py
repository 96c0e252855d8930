"""Policy weights as a plain name -> tensor mapping (LoRA merged in), for generators and resumes."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

import torch

from r3l.learner.checkpoint import is_lora


@contextmanager
def merged_state_dict(model) -> Iterator[Mapping[str, torch.Tensor]]:
    """The weights a plain (non-LoRA) copy of the policy would have; valid inside the `with` block."""
    if not is_lora(model):
        yield model.state_dict()
        return
    model.merge_adapter()
    try:
        state = {name.replace(".base_layer", ""): tensor
                 for name, tensor in model.get_base_model().state_dict().items() if "lora_" not in name}
        yield state
    finally:
        model.unmerge_adapter()


def load_weights(model, checkpoint: Path) -> None:
    """Restore trainable weights saved by `save_checkpoint`."""
    from safetensors.torch import load_file

    if is_lora(model):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(str(checkpoint / "adapter" / "adapter_model.safetensors")))
        return
    state = load_file(str(checkpoint / "model" / "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    real_missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    if real_missing or unexpected:
        raise RuntimeError(f"checkpoint {checkpoint} does not match the model: missing {real_missing[:3]}, unexpected {unexpected[:3]}")
