#!/usr/bin/env bash
# The GPU check, one command on a CUDA machine, from the checkout root, r3l importable (pip install -e . or
# `source .gpu/b/unpack.sh` on an offline machine, see scripts/gpu_pack.sh):
#
#   bash scripts/gpu_check.sh [OUTDIR]          # default OUTDIR: gpu-check
#
# 1. the `cuda` tests (shared-prefix vs plain forward/backward in bf16, finite updates, the cuDNN case);
# 2. the default job on CUDA: learns (held-out gain >= 10 points), no collapse, finite weights;
# 3. `r3l bench --vs trl` on CUDA at the default job's shape and at Qwen2.5-1.5B's shape (random weights).
# Everything lands in OUTDIR; the last lines summarise each part. Exit status: the number of failed parts.
set -u
OUT=${1:-gpu-check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
failed=0
part() { echo "== $1"; shift; "$@"; local rc=$?; echo "== rc=$rc"; [ $rc -eq 0 ] || failed=$((failed + 1)); return 0; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" | tee "$OUT/device.txt"
part "cuda tests" $PY -m pytest -q -m cuda tests/test_cuda.py -p no:cacheprovider 2>&1 | tee "$OUT/cuda_tests.txt"
part "default job on cuda" bash -c "$PY -m r3l.cli train model.device=cuda run.dir=$OUT run.name=default-cuda \
  logging.progress=false > $OUT/train.json 2> $OUT/train.log; tail -n 3 $OUT/train.log; \
  $PY scripts/check_run.py $OUT/default-cuda"
part "bench, default job" $PY -m r3l.cli bench --vs trl model.device=cuda --sections side_by_side,limits \
  --out "$OUT/bench-default"
part "bench, Qwen2.5-1.5B shape" $PY -m r3l.cli bench --vs trl model.device=cuda model=random:qwen2.5-1.5b \
  sampling.max_new_tokens=128 --sections side_by_side,limits --repeats 3 --warmup 1 --out "$OUT/bench-1.5b"
echo "failed parts: $failed (outputs in $OUT/)"
exit $failed
