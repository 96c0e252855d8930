"""The bench's env_processes section: both modes play the same episodes (same steps) and the table reads them."""
import json

from tests.conftest import run_cli


def test_section_measures_both_modes_on_the_same_episodes(tmp_path):
    result = run_cli("bench", "--sections", "env_processes", "--repeats", "1", "--warmup", "0", "model=tiny-random",
                     "generator=scripted", "sampling.max_new_tokens=48", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    section = json.loads((tmp_path / "bench.json").read_text())["sections"]["env_processes"]
    assert section["environments"] == 4 and section["tasks"] == 16
    for label, figures in section["workloads"].items():
        if "skipped" in figures:
            assert "textarena" in label
            continue
        here, apart = figures["in process"], figures["processes"]
        assert here["steps"]["median"] == apart["steps"]["median"] >= 16
        for mode in (here, apart):
            assert 0 < mode["environment_seconds"]["median"] < mode["wall_seconds"]["median"]
        assert figures["environment_speedup"] > 0
    assert "| in process / processes |" in (tmp_path / "bench.md").read_text()
