"""`r3l compare`: the statistics on hand-computed numbers, the plan, and a real comparison of two presets x two
seeds on tiny-random whose table `--table-only` reproduces from the finished runs."""
from pathlib import Path

import pytest

from r3l.compare.plan import make_arms
from r3l.compare.run import parse_seeds
from r3l.compare.stats import t_interval
from r3l.compare.summary import RunResult, table
from r3l.errors import UserError
from tests.conftest import run_cli


def test_t_interval_on_hand_computed_numbers():
    centre, low, high = t_interval([0.4, 0.5, 0.6])  # sd 0.1, t(2) = 4.303: half-width 4.303 * 0.1 / sqrt(3)
    assert centre == pytest.approx(0.5) and low == pytest.approx(0.5 - 0.24843, abs=1e-5)
    assert high == pytest.approx(0.5 + 0.24843, abs=1e-5)
    assert t_interval([0.3]) == (0.3, 0.3, 0.3)


def test_seeds_and_arms():
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("0,4,7") == [0, 4, 7] and parse_seeds("5,") == [5]
    for bad in ("x", "1,1", ""):
        with pytest.raises(UserError, match="--seeds"):
            parse_seeds(bad)
    arms = make_arms(["grpo", "r3l_no_pivotal_credit"], None)
    assert [(a.label, a.overrides) for a in arms] == [("grpo", ("algorithm=grpo",)),
                                                      ("r3l_no_pivotal_credit", ("algorithm=r3l_no_pivotal_credit",))]
    with pytest.raises(UserError, match="neither a YAML file nor an algorithm preset"):
        make_arms(["gpro"], None)
    with pytest.raises(UserError, match="share the name"):
        make_arms(["grpo", "grpo"], None)


def test_table_rows():
    results = [RunResult("a", 0, 0.4, 10, 60.0, 100.0, 50.0), RunResult("a", 1, 0.6, 10, 180.0, 300.0, 150.0),
               RunResult("b", 0, None)]
    markdown, csv = table(results)
    rows = markdown.splitlines()
    assert rows[2] == "| a | 2 | 0.500 | [-0.771, 1.771] | 0.40 0.60 | 10 | 2.0 | 200 | 100 |"  # t(1) = 12.706
    assert rows[3].startswith("| b | 0 | - |") and csv.splitlines()[1].startswith("a,2,0.500,")


def test_compare_two_presets_and_rebuild_the_table(tmp_path):
    out = tmp_path / "cmp"
    tiny = ["model=tiny-random", "sampling.group_size=4", "sampling.max_new_tokens=8", "train.tasks_per_step=2",
            "train.steps=2", "eval.size=4", "logging.tensorboard=false"]
    first = run_cli("compare", "grpo", "opmd", "--seeds", "2", "--out", str(out), *tiny, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["grpo", "opmd"]
    assert all((out / arm / f"seed{s}" / "summary.json").exists() for arm in ("grpo", "opmd") for s in (0, 1))
    made = (out / "compare.md").read_text()
    assert made.splitlines()[2].startswith("| grpo | 2 |") and (out / "compare.png").stat().st_size > 0
    again = run_cli("compare", "--out", str(out), "--table-only", cwd=tmp_path)
    assert again.returncode == 0 and (out / "compare.md").read_text() == made
    rerun = run_cli("compare", "--out", str(out), cwd=tmp_path)  # everything finished: nothing runs again
    assert rerun.returncode == 0 and "running" not in rerun.stdout and (out / "compare.md").read_text() == made
    clash = run_cli("compare", "grpo", "--seeds", "1", "--out", str(out), *tiny, cwd=tmp_path)
    assert clash.returncode == 2 and "holds another comparison" in clash.stderr
