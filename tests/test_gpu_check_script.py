"""scripts/gpu_check.sh counts a failed part by the part's own exit status (no pipeline hides it), passes a part
that must be refused only when it exits 2 with one `error:` line, and exits with the number of failed parts."""

import re
import subprocess
from pathlib import Path

PARTS = Path(__file__).resolve().parents[1] / "scripts" / "check_parts.sh"


def test_failed_parts_are_counted_and_make_the_exit_status(tmp_path):
    script = f"""
OUT={tmp_path}
source {PARTS}
part "passes" ok true
part "fails on purpose" ok bash -c 'echo partial output; exit 3'
part "refused in one line" refused bash -c 'echo "error: two ranks on one GPU" >&2; exit 2'
part "refused with a traceback" refused bash -c 'echo "Traceback (most recent call last):" >&2; exit 2'
part "expected a refusal, ran" refused true
summary
exit $failed
"""
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stdout + result.stderr
    cells = [line.split("|") for line in result.stdout.splitlines() if "| " in line]
    rows = {cell[0].strip(): cell[1].strip() for cell in cells}
    assert rows["passes"] == "passed (rc 0)"
    assert rows["fails on purpose"] == "failed (rc 3)"
    assert rows["refused in one line"] == "passed (rc 2)"
    assert rows["refused with a traceback"] == "failed (rc 2)"
    assert rows["expected a refusal, ran"] == "failed (rc 0)"
    assert "failed parts: 3" in result.stdout
    assert (tmp_path / "fails_on_purpose.log").read_text() == "partial output\n"


def test_the_gpu_check_is_valid_bash_and_counts_with_check_parts():
    script = PARTS.parent / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    assert 'source "$(dirname "$0")/check_parts.sh"' in text and "exit $failed" in text
    assert not re.search(r"^\s*part .*\|\s*tee", text, re.MULTILINE)  # a pipeline's status would hide a failure


def test_a_part_that_hangs_is_stopped_at_its_limit_and_counted_as_failed(tmp_path):
    script = f"""
OUT={tmp_path}
PART_TIMEOUT=1
source {PARTS}
part "hangs" ok sleep 30
part "quick" ok true
summary
exit $failed
"""
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {
        cell[0].strip(): cell[1].strip()
        for cell in (line.split("|") for line in result.stdout.splitlines())
        if len(cell) > 2
    }
    assert rows["hangs"] == "failed (rc 124)" and rows["quick"] == "passed (rc 0)"


def test_the_gpu_check_runs_the_precision_check_as_one_part_within_six_minutes():
    text = (PARTS.parent / "gpu_check.sh").read_text()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("PART_TIMEOUT=") and " part " in line)
    assert int(lines[at].split("=")[1].split()[0]) <= 360
    assert lines[at].endswith("\\") and lines[at + 1].strip() == "$PY scripts/gpu_precision_check.py"
    assert "sed -n '/^| part /,$p' \"$OUT\"/gpu_precision_check_py_*.log" in text  # its table in the output


def test_weights_over_nccl_never_put_two_workers_on_the_one_gpu_the_learner_leaves():
    """Two GPUs: the learner takes one, and two workers on the other would be two ranks of one NCCL communicator
    on one device, which NCCL refuses; the check runs one worker there."""
    text = (PARTS.parent / "gpu_check.sh").read_text()
    two_gpus = text.split('elif [ "$GPUS" -eq 2 ]')[1].split("\n  else")[0]
    assert "distributed.rollout_workers=1" in two_gpus and "weight_sync=broadcast" in two_gpus
