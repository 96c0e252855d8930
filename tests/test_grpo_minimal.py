"""examples/grpo_minimal.py, GRPO in one page from r3l's registries, runs on the embedded model: every step's
answers are scored by the learner exactly as the generator sampled them, and a group with a reward signal moves
the weights."""

import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpo_minimal.py"
STEP = re.compile(r"step (\d)/2 .*groups with a signal (\d+)/8 .*grad norm ([\d.]+) .*log-prob gap ([\d.]+)")


def test_the_one_page_grpo_example_learns_from_what_it_sampled():
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "2", "--tasks", "8", "--group-size", "4", "--max-new-tokens", "16"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    steps = [STEP.search(line) for line in result.stdout.splitlines() if line.startswith("step ")]
    assert len(steps) == 2 and all(steps), result.stdout
    for match in steps:
        signal, grad_norm, gap = int(match[2]), float(match[3]), float(match[4])
        assert gap < 1e-3  # the learner's log-probs of the sampled tokens, from the weights that sampled them
        assert (grad_norm > 0) == (signal > 0)
    assert any(int(match[2]) > 0 for match in steps), result.stdout  # the seed gives the update something to learn
