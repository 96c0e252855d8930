#!/usr/bin/env bash
# The GPU check, one command on a CUDA machine, from the checkout root, r3l importable (pip install -e . or
# `source .gpu/b/unpack.sh` on an offline machine, see scripts/gpu_pack.sh):
#
#   bash scripts/gpu_check.sh [OUTDIR]          # default OUTDIR: gpu-check
#
# 1. the `cuda` tests (shared-prefix vs plain forward/backward in bf16, finite updates, the cuDNN case);
# 2. the default job on CUDA: learns (held-out gain >= 10 points), no collapse, finite weights;
# 3. `r3l bench --vs trl` on CUDA at the default job's shape and at Qwen2.5-1.5B's shape (random weights);
# 4. issue 11's figures: our side alone at the 1.5B shape (64 completions x 128 tokens) with each HF decode path
#    (dynamic, static, compiled: which is fastest decides generator.decode's default on CUDA), and, where vLLM is
#    installed, generator=vllm against TRL's vLLM colocate mode.
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
QWEN="model=random:qwen2.5-1.5b sampling.max_new_tokens=128 train.tasks_per_step=8 sampling.group_size=8"
for decode in dynamic static compiled; do
  part "bench, 1.5B shape, r3l alone, generator.decode=$decode" $PY -m r3l.cli bench model.device=cuda $QWEN \
    generator.decode=$decode --sections side_by_side,limits --repeats 3 --warmup 1 --out "$OUT/bench-1.5b-$decode"
done
if $PY -c "import vllm" 2>/dev/null; then
  part "bench, 1.5B shape, generator=vllm vs TRL vLLM colocate" $PY -m r3l.cli bench --vs trl --trl-generator vllm \
    model.device=cuda $QWEN generator=vllm --sections side_by_side,limits --repeats 3 --warmup 1 --out "$OUT/bench-1.5b-vllm"
else
  echo "== vLLM is not installed here: generator=vllm not measured"
fi
echo "failed parts: $failed (outputs in $OUT/)"
exit $failed
