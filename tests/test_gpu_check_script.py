"""scripts/gpu_check.sh counts its failures: each part's exit status is the command's own (no pipe loses it),
a part that must be refused passes only on exit 2, and the script's exit status is the number of failed parts."""

from __future__ import annotations

import subprocess
from pathlib import Path

LIB = Path(__file__).parents[1] / "scripts" / "gpu_check_lib.sh"


def run_parts(tmp_path: Path, parts: str) -> subprocess.CompletedProcess:
    script = f"OUT={tmp_path}/out\nsource {LIB}\n{parts}\nsummary\nexit $?\n"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


def test_a_failing_part_is_counted_and_fails_the_check(tmp_path):
    result = run_parts(
        tmp_path,
        "\n".join(
            [
                "part passes true",
                "part fails false",
                "part 'fails in a pipeline' bash -c 'echo output | cat; exit 3'",
                "part 'refused as it must be' --expect 2 bash -c 'exit 2'",
                "part 'not refused' --expect 2 true",
                "skip 'second GPU' 'one GPU here'",
            ]
        ),
    )
    assert result.returncode == 3, result.stdout + result.stderr
    table = (tmp_path / "out" / "summary.md").read_text()
    assert "failed parts: 3 of 6" in table
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:3] for line in table.splitlines()[2:8]}
    assert rows == {
        "passes": ["pass", "0"],
        "fails": ["FAIL", "1"],
        "fails in a pipeline": ["FAIL", "3"],
        "refused as it must be": ["pass", "2"],
        "not refused": ["FAIL", "0"],
        "second GPU": ["skip", "-"],
    }
    assert (tmp_path / "out" / "parts" / "03.log").read_text() == "output\n"  # each part's output in its own file


def test_all_passing_parts_exit_zero(tmp_path):
    result = run_parts(tmp_path, "part one true\npart two bash -c 'exit 0'")
    assert result.returncode == 0 and "failed parts: 0 of 2" in result.stdout


def test_the_check_script_parses():
    assert subprocess.run(["bash", "-n", str(LIB.parent / "gpu_check.sh")], timeout=30).returncode == 0
