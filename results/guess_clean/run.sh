#!/usr/bin/env bash
# Issue 53's clean reading: GRPO, R3L and R3L without reflect-retry on GuessTheNumber 1-20 (Qwen2.5-Coder-0.5B),
# 5 seeds an arm, GRPO also rerun to R3L's generated tokens, from a frozen worktree at one commit, niced and
# memory-capped. Resumable: run it again (same commit) to go on; finished runs are read where they are.
#   bash results/guess_clean/run.sh [COMMIT]     # default: the commit the reading started at (COMMIT file), else HEAD
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(git -C "$here" rev-parse --show-toplevel)"
commit="${1:-$(cat "$here/COMMIT" 2>/dev/null || git -C "$repo" rev-parse HEAD)}"
echo "$commit" > "$here/COMMIT"
tree="${READING_WORKTREE:-/tmp/r3l-reading-$commit}"
[ -d "$tree" ] || git -C "$repo" worktree add --detach "$tree" "$commit"
if [ -d /sys/fs/cgroup/memory ] && [ -w /sys/fs/cgroup/memory ]; then  # cgroup v1: the reading and its children
  mkdir -p /sys/fs/cgroup/memory/r3l-reading
  echo $((21 * 1024 * 1024 * 1024)) > /sys/fs/cgroup/memory/r3l-reading/memory.limit_in_bytes
  echo $$ > /sys/fs/cgroup/memory/r3l-reading/cgroup.procs
fi
# The code comes from the frozen worktree; the configs and runs are read and written from the repository root by
# relative paths (what the runs record), and the configs must be the commit's own.
if ! git -C "$repo" diff --quiet "$commit" -- results/guess_clean/guess_grpo.yaml results/guess_clean/guess_r3l.yaml \
  results/guess_clean/guess_r3l_no_reflect_retry.yaml examples/qwen_guess_number.yaml; then
  echo "results/guess_clean: the configs differ from commit $commit's; restore them (git checkout $commit -- ...)" >&2
  exit 2
fi
cd "$repo"
export PYTHONPATH="$tree" PYTHONSAFEPATH=1  # the worktree's r3l, not the checkout's (-m would put the cwd first)
out=results/guess_clean/runs
if [ -f "$out/compare.json" ]; then
  set -- --out "$out"
else
  set -- results/guess_clean/guess_grpo.yaml results/guess_clean/guess_r3l.yaml \
    results/guess_clean/guess_r3l_no_reflect_retry.yaml --seeds 5 --out "$out"
fi
exec nice -n 5 python -m r3l.cli compare "$@" --parallel 1 --match-budget tokens --budget-of guess_r3l \
  --budget-for guess_grpo
