"""`r3l compare` refuses to pool runs of different machines or code versions into one arm or one difference, and
reads them with --allow-mixed, every arm marked; a run that recorded no machine counts as mixed."""

import shutil
from pathlib import Path

from r3l.compare.mixing import MARK, marked, mixing, refusal
from r3l.compare.summary import RunResult
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
XEON, EPYC = "Intel Xeon, 2 cores; torch 2.13.0+cpu", "AMD EPYC, 2 cores; torch 2.13.0+cpu"


def run(label: str, seed: int, machines=(XEON,), code=("aaaa",)) -> RunResult:
    return RunResult(label, seed, settings={"run.seed": seed}, machines=list(machines), code=list(code))


def test_one_machine_and_one_code_version_is_no_mixing():
    assert mixing([run("grpo", s) for s in range(3)] + [run("r3l", s) for s in range(3)]) == []


def test_a_seed_on_another_machine_mixes_its_arm():
    reasons = mixing([run("grpo", 0), run("grpo", 1), run("grpo", 2, machines=(EPYC,)), run("r3l", 0)])
    assert reasons == [f"arm grpo ran on 2 machines ({XEON}: grpo seed 0, grpo seed 1; {EPYC}: grpo seed 2)"]
    assert "pass --allow-mixed" in refusal(reasons) and reasons[0] in refusal(reasons)


def test_arms_each_on_one_machine_but_not_the_same_mix_every_difference():
    reasons = mixing([run("grpo", 0), run("r3l", 0, code=("bbbb",))])
    assert reasons == ["the arms ran on 2 code versions (aaaa: grpo seed 0; bbbb: r3l seed 0)"]


def test_a_run_resumed_under_other_code_and_a_run_with_no_machine_are_mixed():
    resumed = mixing([run("grpo", 0, code=("aaaa", "cccc")), run("grpo", 1, code=("aaaa",))])
    assert resumed == ["arm grpo ran on 2 code versions (aaaa: grpo seed 0, grpo seed 1; cccc: grpo seed 0)"]
    silent = mixing([run("grpo", 0, machines=()), run("grpo", 1)])
    assert silent[0] == "1 run(s) recorded no machine or code version: grpo seed 0"
    assert mixing([RunResult("grpo", 0)]) == []  # not run yet: nothing to pool


def test_marked_results_carry_the_mark_on_every_arm():
    assert [r.label for r in marked([run("grpo", 0), run("r3l", 0)])] == [f"grpo{MARK}", f"r3l{MARK}"]


def test_compare_refuses_a_mixed_reading_and_marks_it_with_allow_mixed(tmp_path):
    """The committed BFCL reading: GRPO and R3 recorded no machine, GRPO@tokens ran other code."""
    shutil.copytree(ROOT / "results" / "qwen_bfcl", tmp_path / "qwen_bfcl")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    refused = run_cli("compare", "--out", "qwen_bfcl", "--table-only", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "pools runs of different machines or code versions" in refused.stderr
    read = run_cli("compare", "--out", "qwen_bfcl", "--table-only", "--allow-mixed", cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    made = (tmp_path / "qwen_bfcl" / "compare.md").read_text()
    assert f"| grpo{MARK} | 1st try |" in made and f"| grpo@tokens{MARK} | 1st try |" in made
    assert "Mixed (read with --allow-mixed" in made and "the arms ran on 2 code versions" in made
