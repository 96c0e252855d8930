"""Memory readings, trimming the allocator, and the soak's growth statistic on hand-computed numbers."""

import pytest
import torch

from r3l.memory import memory_metrics, release_free_memory, resident_mib, rss_growth


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
