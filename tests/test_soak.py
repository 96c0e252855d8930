"""Soak (marker `soak`, run with R3L_SOAK=1; about an hour on 2 CPU cores): 300 steps of the default job and 50
steps of R3 on arithmetic, resident memory sampled after every step; after warm-up it may grow by under 5 %."""

import json
import os

import pytest

from r3l.memory import rss_growth
from tests.conftest import run_cli

pytestmark = [
    pytest.mark.soak,
    pytest.mark.skipif(os.environ.get("R3L_SOAK") != "1", reason="long soak; set R3L_SOAK=1 to run it"),
]
MAX_GROWTH = 0.05


@pytest.mark.parametrize(
    "name, args",
    [
        ("default300", ["train.steps=300"]),
        ("r3_50", ["examples/r3_arithmetic_cpu.yaml", "train.steps=50"]),
    ],
)
def test_resident_memory_stays_flat_over_a_long_run(tmp_path, name, args):
    config_first = [a for a in args if "=" not in a]
    overrides = [a for a in args if "=" in a]
    examples = os.path.join(os.path.dirname(__file__), "..")
    result = run_cli(
        "train",
        *[os.path.join(examples, a) for a in config_first],
        *overrides,
        f"run.dir={tmp_path}",
        f"run.name={name}",
        "logging.progress=false",
        cwd=tmp_path,
        timeout=3 * 3600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    rss = [row["rss_mib"] for row in rows if "rss_mib" in row]
    growth = rss_growth(rss)
    print(
        f"{name}: {len(rss)} steps, rss first {rss[0]:.0f} MiB, last {rss[-1]:.0f} MiB, max {max(rss):.0f} MiB, "
        f"peak {max(row.get('peak_rss_mib', 0) for row in rows):.0f} MiB, growth after warm-up {100 * growth:.1f} %"
    )
    assert growth < MAX_GROWTH
