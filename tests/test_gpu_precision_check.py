"""scripts/gpu_precision_check.py, the GPU check of bf16 weights, multi-turn memory, one-rank FSDP and decode modes:
its arithmetic on hand-computed numbers, and its CPU-runnable parts end to end at tiny shapes (--device cpu
--small), where bf16 weights at lr 1e-6 must show the finding (almost nothing moves) and fp32 must not."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_precision_check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_precision_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_share_changed_counts_elements_that_moved(check):
    assert check.share_changed(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 2.5, 3.0, 0.0])) == 0.5


def test_update_kept_is_the_projection_on_the_reference_update(check):
    before = torch.tensor([1.0, 1.0])
    reference = torch.tensor([2.0, 0.0])
    assert check.update_kept(before, torch.tensor([3.0, 1.0]), reference) == 1.0  # all of it
    assert check.update_kept(before, torch.tensor([2.0, 5.0]), reference) == 0.5  # (1*2 + 4*0) / 4
    assert check.update_kept(before, before, reference) == 0.0  # nothing moved


def test_relative_difference_and_within(check):
    assert check.relative_difference(torch.tensor([3.0, 5.0]), torch.tensor([3.0, 4.0])) == pytest.approx(0.2)
    assert check.relative_difference(torch.zeros(2), torch.zeros(2)) == 0.0
    assert check.within(10.0, 12.5, 0.25) and check.within(10.0, 7.5, 0.25)
    assert not check.within(10.0, 12.6, 0.25) and not check.within(0.0, 1.0, 0.25)


def test_turns_mask_trains_the_replies_only(check):
    assert check.turns_mask(prompt=2, turns=2, observation=1, reply=2) == [0, 0, 0, 1, 1, 0, 1, 1]
    full = check.turns_mask(check.FULL.memory_prompt, check.FULL.memory_turns, 1472, 512)
    assert len(full) == 16384 and sum(full) == 4096  # the shape: a 16k row, ~4k trained


def test_a_part_that_raises_is_a_failed_row_and_counts_in_the_exit_status(check, monkeypatch, capsys):
    def broken(device, sizes):
        raise RuntimeError("CUDA out of memory\nmore lines")

    monkeypatch.setitem(check.PARTS, "broken", broken)
    assert check.main(["--device", "cpu", "--small", "--parts", "broken"]) == 1
    assert "| broken | failed | RuntimeError: CUDA out of memory |" in capsys.readouterr().out


def test_bad_arguments_are_refused_in_one_line():
    for args in (["--parts", "adamw,nope", "--device", "cpu"], ["--device", "cuda"]):
        if args[-1] == "cuda" and torch.cuda.is_available():
            continue
        result = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")


def test_the_cpu_parts_run_at_tiny_shapes_and_show_the_bf16_finding():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--small"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {
        cells[1].strip(): (cells[2].strip(), cells[3].strip())
        for cells in (line.split("|") for line in result.stdout.splitlines())
        if len(cells) == 6 and cells[1].strip() not in ("part", "---")
    }
    assert rows["adamw lr 1e-6: fp32 weights"][0] == "passed"
    assert float(rows["adamw lr 1e-6: fp32 weights"][1].split("%")[0]) > 99.0
    assert float(rows["adamw lr 1e-6: bf16 weights (the finding)"][1].split("%")[0]) < 10.0
    assert rows["adamw lr 1e-6: bf16, stochastic rounding"][0] in ("passed", "shown")
    assert rows["fsdp: one rank, per-layer units + checkpointing = one process"][0] == "passed"
    assert "3 FSDP units (2 layers + root)" in rows["fsdp: one rank, per-layer units + checkpointing = one process"][1]
    assert rows["memory: one multi-turn update vs r3l plan"][0] == "passed"
    assert rows["decode: dynamic"][0] == rows["decode: static"][0] == "passed"
    assert "failed rows: 0" in result.stdout
