"""The bench's env_processes section: both modes play the same episodes (same steps) and the table reads them
(run in this process with the JVM-free and the TextWorldExpress workloads; ScienceWorld's is left to `r3l bench`)."""

import json

from r3l.bench import env_processes
from r3l.config import load_config


def test_section_measures_both_modes_on_the_same_episodes(tmp_path, monkeypatch):
    from r3l.bench.run import run_bench

    workloads = {
        label: overrides for label, overrides in env_processes.WORKLOADS.items() if "scienceworld" not in label
    }
    monkeypatch.setattr(env_processes, "WORKLOADS", workloads)
    config = load_config(
        None, ["model=tiny-random", "generator=scripted", "sampling.max_new_tokens=48", f"run.dir={tmp_path / 'runs'}"]
    )
    out_dir, markdown = run_bench(config, out=tmp_path / "bench", repeats=1, warmup=0, sections="env_processes")
    section = json.loads((out_dir / "bench.json").read_text())["sections"]["env_processes"]
    assert section["environments"] == 4 and section["tasks"] == 16
    assert set(section["workloads"]) == set(workloads)
    for label, figures in section["workloads"].items():
        if "skipped" in figures:
            assert "textarena" in label
            continue
        here, apart = figures["in process"], figures["processes"]
        assert here["steps"]["median"] == apart["steps"]["median"] >= 16
        for mode in (here, apart):
            assert 0 < mode["environment_seconds"]["median"] < mode["wall_seconds"]["median"]
        assert figures["environment_speedup"] > 0
    assert "| in process / processes |" in markdown
