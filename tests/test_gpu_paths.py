"""The GPU paths of issue 35 where their logic runs on a CPU: checkpoints written on a GPU resume elsewhere,
placement of learner ranks and rollout workers on (fake) device counts, precision choice by compute capability.
The `cuda`-marked tests at the end need a GPU (`scripts/gpu_check.sh` runs them)."""

from __future__ import annotations

import pytest
import torch


def cuda_only(test):
    """The `cuda` marker and the skip without a GPU (as in tests/test_cuda.py)."""
    return pytest.mark.cuda(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")(test))


def cuda_tagged_save(monkeypatch, obj, path) -> None:
    """torch.save of `obj` as a GPU run writes it: every storage tagged cuda:0 (this machine has no GPU)."""
    import torch.serialization

    with monkeypatch.context() as patch:
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save(obj, path)


def adam_state() -> torch.optim.AdamW:
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return optimizer


def test_a_gpu_checkpoint_loads_on_the_cpu(monkeypatch, tiny, tmp_path):
    from r3l.errors import UserError
    from r3l.learner.checkpoint import (
        OPTIMIZER_FILE,
        latest_checkpoint,
        load_trainer_state,
        read_checkpoint_file,
        save_checkpoint,
    )

    model, tokenizer = tiny
    optimizer = adam_state()
    folder = save_checkpoint(tmp_path, 1, model, tokenizer, {"scheduler": {}, "sampler": {}})
    cuda_tagged_save(monkeypatch, optimizer.state_dict(), folder / OPTIMIZER_FILE)
    if not torch.cuda.is_available():  # the finding: without map_location this machine cannot read it
        with pytest.raises(UserError, match="cannot be read"):
            read_checkpoint_file(folder / OPTIMIZER_FILE, map_location=None)
    state = load_trainer_state(latest_checkpoint(tmp_path))
    moments = state["optimizer"]["state"][0]
    assert moments["exp_avg"].device.type == "cpu"
    fresh = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=1e-3)
    fresh.load_state_dict(state["optimizer"])
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])


def test_the_map_location_given_is_the_one_used(tmp_path):
    from r3l.learner.checkpoint import read_checkpoint_file

    torch.save({"x": torch.ones(2)}, tmp_path / "file.pt")
    seen = []

    def where(storage, location):
        seen.append(location)
        return storage

    assert torch.equal(read_checkpoint_file(tmp_path / "file.pt", map_location=where)["x"], torch.ones(2))
    assert seen == ["cpu"]
    assert read_checkpoint_file(tmp_path / "file.pt", map_location="meta")["x"].device.type == "meta"


@cuda_only
def test_cuda_checkpoint_resumes_on_the_cpu_and_back(tiny, tmp_path):
    """A real CUDA optimizer state: read onto the CPU, loaded into a CPU and a CUDA optimizer."""
    from r3l.learner.checkpoint import OPTIMIZER_FILE, load_trainer_state, save_checkpoint

    model, tokenizer = tiny
    layer = torch.nn.Linear(3, 2).cuda()
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    layer(torch.ones(1, 3, device="cuda")).sum().backward()
    optimizer.step()
    folder = save_checkpoint(tmp_path, 1, model, tokenizer, {"optimizer": optimizer.state_dict(), "scheduler": {}})
    assert (folder / OPTIMIZER_FILE).exists()
    state = load_trainer_state(folder)
    assert state["optimizer"]["state"][0]["exp_avg"].device.type == "cpu"
    for device in ("cpu", "cuda"):
        fresh = torch.optim.AdamW(torch.nn.Linear(3, 2).to(device).parameters(), lr=1e-3)
        fresh.load_state_dict(state["optimizer"])
        assert fresh.state_dict()["state"][0]["exp_avg"].device.type == device
