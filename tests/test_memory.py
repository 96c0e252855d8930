"""Memory readings, trimming the allocator, and the soak's growth statistic on hand-computed numbers."""

import pytest
import torch

from r3l.memory import (
    headroom_warning,
    memory_limit_mib,
    memory_metrics,
    release_free_memory,
    resident_mib,
    rss_growth,
)


def test_growth_compares_the_late_median_with_the_one_right_after_warm_up():
    rss = [float(v) for v in range(1, 21)]  # 20 steps: warm-up 1-2, early 3-4 (median 3.5), late 19-20 (19.5)
    assert rss_growth(rss) == pytest.approx(19.5 / 3.5 - 1)
    flat = [900.0, 1000.0, 1000.0, 1010.0, 990.0, 1000.0, 1000.0, 1000.0, 1020.0, 1000.0]
    assert rss_growth(flat) == pytest.approx(1000.0 / 1000.0 - 1)  # windows of one step: 1000 then 1000
    with pytest.raises(ValueError, match="too few"):
        rss_growth([1.0, 2.0])


def test_readings_are_positive_and_the_peak_bounds_them():
    metrics = memory_metrics()
    assert 0 < metrics["rss_mib"] <= metrics["peak_rss_mib"] + 16  # the peak is sampled by the kernel, in KiB


def test_trimming_hands_freed_heap_back():
    if not release_free_memory():
        pytest.skip("no glibc malloc_trim here")
    blocks = [torch.ones(1000) for _ in range(200_000)]  # small blocks: heap, not mmap; ~800 MB
    survivors = blocks[::50]  # a few stay alive between the freed ones, as after a training step
    del blocks
    freed = resident_mib()
    release_free_memory()
    assert resident_mib() < freed - 400  # freeing alone kept the pages; the trim gave them back
    del survivors


FRAGMENTING = """
import sys
from r3l.memory import map_large_blocks, resident_mib
if sys.argv[1] == "mapped" and not map_large_blocks(1 << 20):
    print("no-glibc"); sys.exit()
warm = bytearray(8 << 20)
del warm  # freeing a mapped 8 MiB block lifts glibc's sliding threshold above it
big, small = [], []
for _ in range(64):  # 2 MiB blocks with small survivors between them, as a training step leaves the heap
    big.append(bytearray(2 << 20))
    small.append(bytearray(1024))
held = resident_mib()
big.clear()
print(held - resident_mib())
"""


@pytest.mark.parametrize("mode", ["default", "mapped"])
def test_mapped_large_blocks_go_back_to_the_system_when_freed(mode):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", FRAGMENTING, mode], capture_output=True, text=True, check=True)
    if out.stdout.strip() == "no-glibc":
        pytest.skip("no glibc mallopt here")
    returned = float(out.stdout)
    if mode == "mapped":
        assert returned > 100  # the 128 MiB of freed blocks left the process
    else:
        assert returned < 32  # glibc's own threshold had moved above them: they stay in the heap, resident


def _machine(root, cgroup_lines: str, caps: dict[str, str]):
    """A /proc and a /sys/fs/cgroup as files: 8 GiB of memory, this process's cgroups and their caps."""
    proc, cgroups = root / "proc", root / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal:        8388608 kB\nMemFree:         1024 kB\n")
    (proc / "self" / "cgroup").write_text(cgroup_lines)
    for relative, value in caps.items():
        (cgroups / relative).parent.mkdir(parents=True, exist_ok=True)
        (cgroups / relative).write_text(value + "\n")
    return str(proc), str(cgroups)


def test_the_memory_limit_is_the_lowest_cap_above_the_process(tmp_path):
    v1 = _machine(
        tmp_path / "v1",
        "4:memory:/jobs/exp\n3:cpuset:/\n0::/\n",
        {
            "memory/memory.limit_in_bytes": "9223372036854771712",  # no cap at the root
            "memory/jobs/memory.limit_in_bytes": str(6 * 2**30),  # the parent's cap is the lower one
            "memory/jobs/exp/memory.limit_in_bytes": str(7 * 2**30),
        },
    )
    assert memory_limit_mib(*v1) == (6 * 1024, "memory cgroup /jobs")
    v2 = _machine(tmp_path / "v2", "0::/user/run\n", {"user/run/memory.max": "max", "user/memory.max": str(2**32)})
    assert memory_limit_mib(*v2) == (4096, "memory cgroup /user")
    uncapped = _machine(tmp_path / "none", "0::/user/run\n", {"user/run/memory.max": "max"})
    assert memory_limit_mib(*uncapped) == (8192, "the machine's memory")
    assert memory_limit_mib(str(tmp_path / "nowhere"), str(tmp_path)) is None
    real = memory_limit_mib()
    assert real is not None and real[0] > 0


def test_a_warning_once_the_peak_nears_the_limit():
    limit = (20480.0, "memory cgroup /exp")
    assert headroom_warning(18000, limit) is None  # 88 %
    warning = headroom_warning(19775, limit)  # R3L's GuessTheNumber arm at step 9, a step before it was killed
    assert warning is not None and "97% of the 20,480 MiB" in warning and "train.micro_batch_tokens" in warning
    assert headroom_warning(19775, None) is None


def test_a_run_warns_once_when_its_peak_nears_what_it_may_hold(tmp_path, capsys):
    from r3l.config import load_config
    from r3l.trainer import Trainer

    small = ["model=tiny-random", "env=countdown", "sampling.group_size=2", "sampling.max_new_tokens=4"]
    quiet = ["eval.size=0", "logging.progress=false", "logging.tensorboard=false", "generator.dtype=float32"]
    config = load_config(None, [*small, *quiet, "train.tasks_per_step=2", "train.steps=2", f"run.dir={tmp_path}"])
    trainer = Trainer(config)
    assert trainer.memory_limit is not None  # this machine's, read at the start
    trainer.memory_limit = (1.0, "a cap of 1 MiB")  # what a run near its cgroup's cap sees
    trainer.run()
    printed = capsys.readouterr().err  # the console writes to stderr
    assert printed.count("warning: peak resident memory") == 1 and "(a cap of 1 MiB)" in printed
