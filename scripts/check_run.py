"""Check a finished `r3l train` run: held-out success before/after, collapse onto one answer, finite weights.

    python3 scripts/check_run.py RUN_DIR [--min-gain 0.10]

Prints one line per check and exits 1 if any fails (used by scripts/gpu_check.sh; works on any run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from r3l.evaluate import most_common_completion


def weights_finite(run_dir: Path) -> tuple[int, int]:
    """(non-finite tensors, tensors) in the run's latest checkpoint."""
    files = sorted((run_dir / "checkpoints" / "latest" / "model").glob("*.safetensors"))
    tensors = [t for f in files for t in load_file(str(f)).values()]
    return sum(not bool(torch.isfinite(t.float()).all()) for t in tensors), len(tensors)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--min-gain", type=float, default=0.10, help="least held-out gain that counts as learning")
    parser.add_argument(
        "--max-share", type=float, default=0.5, help="most common completion share that counts as a collapse"
    )
    args = parser.parse_args()
    before, after = (json.loads((args.run_dir / f"eval_{label}.json").read_text()) for label in ("before", "after"))
    for record in (before, after):
        record["most_common_completion"], record["most_common_completion_share"] = most_common_completion(
            [sample["completion"] for sample in record["samples"]]
        )
    bad, total = weights_finite(args.run_dir)
    gain = after["success"] - before["success"]
    checks = [
        (
            f"held-out success {before['success']:.2f} -> {after['success']:.2f} (gain {gain:+.2f}, "
            f"at least {args.min_gain:+.2f})",
            gain >= args.min_gain,
        ),
        (
            f"most common completion {before['most_common_completion_share']:.2f} -> "
            f"{after['most_common_completion_share']:.2f} of answers (at most {args.max_share:.2f}): "
            f"{after['most_common_completion']!r}",
            after["most_common_completion_share"] <= args.max_share,
        ),
        (f"non-finite tensors in the final weights: {bad} of {total}", bad == 0 and total > 0),
    ]
    for text, passed in checks:
        print(f"{'PASS' if passed else 'FAIL'}  {text}")
    return 0 if all(passed for _, passed in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
