"""scripts/candidate_settings.py, the candidate table with its controls, end to end on the tiny model with the
scripted generator (whose reports always name a pivot, so every column runs): a single-turn setting gets all five
columns, a game the R3L ones; each setting is written as it is measured and read back, not measured again."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ["FrozenLake 4x4, not slippery", "gsm, \\boxed{}"]


def run_script(out: Path, *args: str, settings: list[str] = SETTINGS) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "candidate_settings.py"),
            "tiny-random",
            str(out),
            *settings,
            "--tasks",
            "3",
            "generator=scripted",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_every_column_is_measured_written_per_setting_and_read_back(tmp_path):
    pytest.importorskip("gymnasium")
    done = run_script(tmp_path)
    assert done.returncode == 0, done.stderr
    lake = json.loads((tmp_path / "frozenlake_4x4_not_slippery" / "result.json").read_text())
    gsm = json.loads((tmp_path / "gsm_boxed" / "result.json").read_text())
    for row in (lake, gsm):
        assert set(row["modes"]) == {"greedy", "sampled"} and "env.args.test_size=3" in row["overrides"]
        assert row["modes"]["greedy"]["temperature"] == 0.0 and row["modes"]["sampled"]["temperature"] == 1.0
        for result in row["modes"].values():
            assert result["tasks"] == result["distinct_games"] == 3 and result["seconds_per_episode"] >= 0
            first = result["first"]
            for name in ("r3l", "r3l_no_guidance"):  # the scripted reports name a pivot: every failure is retried
                column = result[name]
                assert column["tried"] == column["failures"] == 3 - first["successes"]
                assert column["success"] >= first["success"] and column["format_missing"] is not None
            assert result["r3l"]["reports_valid"] == result["r3l"]["reports_asking_retry"] == 3 - first["successes"]
    for result in lake["modes"].values():
        assert result["r3"] is None and result["verdict"] is None and result["first"]["format_missing"] == 0.0
    for result in gsm["modes"].values():  # the scripted backend answers in <answer> tags: no \boxed{} to read
        for name in ("first", "r3", "verdict", "r3l", "r3l_no_guidance"):
            assert result[name]["format_missing"] == 1.0 and result[name]["success"] == 0.0
        assert result["r3"]["tried"] == result["verdict"]["tried"] == 3
    # what each column's second tries said, one record per failed first try
    dump = [json.loads(line) for line in (tmp_path / "gsm_boxed" / "replies_sampled.jsonl").read_text().splitlines()]
    assert len(dump) == 3 - gsm["modes"]["sampled"]["first"]["successes"]
    for record in dump:
        assert record["first"] and record["r3_reflection"] and record["r3l_report"]
        assert record["r3"]["replies"] and record["verdict"]["replies"] and not record["r3"]["success"]
        assert record["r3l"]["guidance"] and record["r3l_no_guidance"]["guidance"] is None
        assert record["r3l"]["pivot"] == record["r3l_no_guidance"]["pivot"] and record["r3l"]["replies"]
    lake_dump = (tmp_path / "frozenlake_4x4_not_slippery" / "replies_greedy.jsonl").read_text().splitlines()
    assert len(lake_dump) == 3 - lake["modes"]["greedy"]["first"]["successes"]
    assert all("r3" not in json.loads(line) and json.loads(line)["r3l"]["replies"] for line in lake_dump)
    table = (tmp_path / "candidates.md").read_text()
    assert table.count("| FrozenLake 4x4, not slippery |") == 2 and "| — | — |" in table
    assert len(json.loads((tmp_path / "candidates.json").read_text())) == 2
    stamps = {path: path.stat().st_mtime_ns for path in tmp_path.glob("*/result.json")}
    again = run_script(tmp_path)
    assert again.returncode == 0 and again.stdout.count("read back from") == 2
    assert {path: path.stat().st_mtime_ns for path in tmp_path.glob("*/result.json")} == stamps
    one = run_script(tmp_path, settings=["gsm, \\boxed{}"])  # a command for one setting keeps the others' rows
    assert one.returncode == 0 and one.stdout.count("read back from") == 1
    assert (tmp_path / "candidates.md").read_text() == table
    assert len(json.loads((tmp_path / "candidates.json").read_text())) == 2


def test_a_mode_is_added_to_a_row_with_its_settings_and_table_only_measures_nothing(tmp_path):
    gsm = ["gsm, \\boxed{}"]
    file = tmp_path / "gsm_boxed" / "result.json"
    assert run_script(tmp_path, "--modes", "greedy", settings=gsm).returncode == 0
    greedy = json.loads(file.read_text())["modes"]["greedy"]
    mismatched = run_script(tmp_path, "--modes", "sampled", "sampling.temperature=0.7", settings=gsm)
    assert mismatched.returncode == 1 and "measured with other settings" in mismatched.stderr
    added = run_script(tmp_path, "--modes", "greedy,sampled", settings=gsm)
    assert added.returncode == 0 and "read back" not in added.stdout
    row = json.loads(file.read_text())
    assert set(row["modes"]) == {"greedy", "sampled"} and row["modes"]["greedy"] == greedy
    stamp = file.stat().st_mtime_ns
    rebuilt = run_script(tmp_path, "--table-only", settings=[])
    assert rebuilt.returncode == 0 and "read back" not in rebuilt.stdout and file.stat().st_mtime_ns == stamp
    assert (tmp_path / "candidates.md").read_text().count("| gsm, \\boxed{} |") == 2
