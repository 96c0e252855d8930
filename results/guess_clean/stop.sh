#!/usr/bin/env bash
# Stop the reading before a session ends: the run in flight is killed and its folder removed (its checkpoint is
# not committed, so it could not resume on another machine: it starts again from step 0 next time), finished runs
# stay; then commit results/guess_clean. Lists what has finished.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pkill -f "guess_clean/run.sh" || true
pkill -f "r3l.cli compare .*guess_clean" || true
pkill -f "r3l.cli train .*guess_clean" || true
sleep 3
for run in "$here"/runs/*/seed*/; do
  [ -d "$run" ] || continue
  if [ -f "$run/summary.json" ]; then
    rm -rf "$run/checkpoints" "$run/tensorboard"
    echo "finished: ${run#"$here"/runs/}"
  else
    rm -rf "$run" "${run%/}.log"
    echo "removed (unfinished): ${run#"$here"/runs/}"
  fi
done
