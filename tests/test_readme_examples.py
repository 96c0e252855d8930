"""The README's "Bring your own environment" commands run: each `r3l train`/`r3l rollout` line, as a short rollout
with the tiny random model, after the block's own shell lines (the reward function file) ran in the same folder."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["model=tiny-random", "sampling.group_size=2", "sampling.max_new_tokens=16", "--tasks", "1", "--no-show"]


def bring_your_own_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Bring your own environment") :]
    return re.search(r"```bash\n(.*?)```", section, re.S)[1]


def test_the_readme_block_has_the_four_ways_in():
    block = bring_your_own_block()
    assert "env=gym:" in block and "env=verifiers:" in block and "reward.functions=" in block
    assert "agent.env_processes=" in block and "env=openenv:" in block


@pytest.mark.parametrize("way", ["gym", "verifiers", "openenv", "reward.functions", "agent.env_processes"])
def test_a_readme_way_in_runs(tmp_path, way):
    if way == "verifiers":
        pytest.importorskip("verifiers.v1")
    if way == "gym":
        pytest.importorskip("gymnasium")
    if way == "openenv":
        pytest.importorskip("openenv.core.env_server.interfaces")
    block = bring_your_own_block().replace("tests/helpers/", f"{ROOT}/tests/helpers/")
    commands = [line for line in block.splitlines() if line.startswith("r3l ")]
    shell = block.split("\nr3l ")[0]  # nothing but comments before the first command
    assert not [line for line in shell.splitlines() if line and not line.startswith("#")]
    setup = block[block.index("cat > ") : block.index("PY\n", block.index("<<'PY'") + 6) + 3]  # the heredoc
    subprocess.run(["bash", "-c", setup], cwd=tmp_path, check=True)
    (command,) = [c for c in commands if way in c]
    args = shlex.split(command)[1:]
    args[0] = "rollout"  # a rollout of the same settings: what the run would explore first
    result = subprocess.run(
        [sys.executable, "-m", "r3l.cli", *args, *QUICK], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_front_door_stays_small():
    """README.md is the front door: at most 12 KB (details belong in docs/)."""
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 12 * 1024, f"README.md is {size} bytes; move detail to docs/"
