#!/usr/bin/env bash
# The GPU check, one command on a CUDA machine, from the checkout root, r3l importable (pip install -e . or
# `source .gpu/b/unpack.sh` on an offline machine, see scripts/gpu_pack.sh):
#
#   bash scripts/gpu_check.sh [OUTDIR]          # default OUTDIR: gpu-check; about 10 minutes on one H200
#   FULL=1 bash scripts/gpu_check.sh            # also the default job to the end and the benches (an hour)
#
# Parts (each one line of the summary table; a part the machine cannot run is listed as skipped, one it must
# refuse passes only when it is refused in one line with exit 2):
#  1. the `cuda` tests: tests/test_cuda.py and tests/test_gpu_paths.py (cross-device checkpoints, bf16 by
#     compute capability, CUDA cache release, placement against the real GPU count, decode syncs);
#  2. learner ranks on one GPU and on two (refused where there is one);
#  3. Ray rollout workers without GPUs (CPU workers) and with one GPU each (refused without a GPU to spare);
#  4. each examples/layout_*.yaml for 2 steps at Qwen2.5-1.5B's shape (random weights);
#  5. vLLM colocated: memory before and after sleep, an update and the wake (scripts/vllm_sleep_memory.py);
#  6. a checkpoint written on the GPU resumed on the CPU;
#  FULL=1: the default job on CUDA checked by scripts/check_run.py, `r3l bench --vs trl`, the HF decode paths.
# Every part's output is in OUTDIR/parts/NN.log; OUTDIR/summary.md is the table. Exit status: the number of
# failed parts (0: all passed).
set -u
OUT=${1:-gpu-check}
PY=${PYTHON:-python3}
PART_TIMEOUT=${PART_TIMEOUT:-600}
# shellcheck source=scripts/gpu_check_lib.sh
source "$(dirname "$0")/gpu_check_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
GPUS=$($PY -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
has() { $PY -c "import $1" 2>/dev/null; }
R3L=("$PY" -m r3l.cli)
SHORT=(train.steps=2 eval.size=0 train.tasks_per_step=2 sampling.group_size=4 sampling.max_new_tokens=32
       logging.progress=false "run.dir=$OUT/runs")
SHAPE=model=random:qwen2.5-1.5b
refused_unless() { if [ "$GPUS" -ge "$1" ]; then echo 0; else echo 2; fi; }  # expected exit: runs, or refused

part "device" "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
torch.cuda.device_count(), 'GPU(s)', torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))"
part "cuda tests" "$PY" -m pytest -q -m cuda tests/test_cuda.py tests/test_gpu_paths.py -p no:cacheprovider

# 2. learner ranks
part "learner ranks: 1 on cuda" "${R3L[@]}" train model.device=cuda "${SHORT[@]}" run.name=ranks1
part "learner ranks: 2 ($GPUS GPU(s))" --expect "$(refused_unless 2)" \
  "${R3L[@]}" train model.device=cuda distributed.learner_ranks=2 "${SHORT[@]}" run.name=ranks2

# 3. Ray rollout workers
if has ray; then
  part "ray workers: 2 on the CPU" "${R3L[@]}" train model.device=cuda distributed.rollout_workers=2 \
    distributed.worker_gpus=0 "${SHORT[@]}" run.name=workers-cpu
  part "ray workers: 1 with a GPU of its own ($GPUS GPU(s))" --expect "$(refused_unless 2)" \
    "${R3L[@]}" train model.device=cuda distributed.rollout_workers=1 distributed.worker_gpus=1 "${SHORT[@]}" \
    run.name=workers-gpu
else
  skip "ray workers" "Ray is not installed (pip install -e '.[ray]')"
fi

# 4. the layouts, 2 steps each at the 1.5B shape (the CPU layout at its own model: 1.5B on CPU ranks is hours)
ENGINE=(); has vllm || ENGINE=(generator=hf)  # without vLLM the layouts run with the HF generator (said below)
for layout in examples/layout_*.yaml; do
  name=$(basename "$layout" .yaml)
  case $name in
    layout_cpu_workers_and_ranks)
      if has ray; then part "$name" "${R3L[@]}" train "$layout" "${SHORT[@]}" run.name="$name"
      else skip "$name" "Ray is not installed"; fi ;;
    layout_ray_cluster)  # a local Ray here: workers on the GPUs the two learner ranks leave
      if has ray; then
        part "$name (${GPUS} GPUs${ENGINE:+, generator=hf})" --expect "$(refused_unless 3)" \
          "${R3L[@]}" train "$layout" "$SHAPE" "${ENGINE[@]}" distributed.ray_address=null \
          distributed.rollout_workers=$((GPUS > 2 ? GPUS - 2 : 1)) distributed.worker_cpus=1 \
          distributed.max_staleness=0 "${SHORT[@]}" run.name="$name"
      else skip "$name" "Ray is not installed"; fi ;;
    *)
      part "$name${ENGINE:+ (generator=hf)}" "${R3L[@]}" train "$layout" "$SHAPE" "${ENGINE[@]}" "${SHORT[@]}" \
        run.name="$name" ;;
  esac
done

# 5. vLLM colocated: sleep and wake with memory figures
if has vllm; then
  part "vllm sleep/wake memory" "$PY" scripts/vllm_sleep_memory.py random:qwen2.5-1.5b --out "$OUT/vllm_memory.json"
else
  skip "vllm sleep/wake memory" "vLLM is not installed (pip install -e '.[vllm]')"
fi

# 6. a GPU checkpoint resumed on the CPU
part "checkpoint written on cuda" "${R3L[@]}" train model=tiny-random model.device=cuda train.steps=1 \
  train.keep_optimizer=true "${SHORT[@]:1}" run.name=resume-on-cpu
part "the same run resumed on the cpu" "${R3L[@]}" train --resume "$OUT/runs/resume-on-cpu" model.device=cpu \
  train.steps=2

if [ "${FULL:-0}" = 1 ]; then
  PART_TIMEOUT=3600
  part "default job on cuda" bash -c "$PY -m r3l.cli train model.device=cuda run.dir=$OUT run.name=default-cuda \
    logging.progress=false && $PY scripts/check_run.py $OUT/default-cuda"
  part "bench --vs trl, default job" "${R3L[@]}" bench --vs trl model.device=cuda --sections side_by_side,limits \
    --out "$OUT/bench-default"
  QWEN=("$SHAPE" sampling.max_new_tokens=128 train.tasks_per_step=8 sampling.group_size=8)
  for decode in dynamic static compiled; do
    part "bench, 1.5B shape, generator.decode=$decode" "${R3L[@]}" bench model.device=cuda "${QWEN[@]}" \
      generator.decode=$decode --sections side_by_side,limits --repeats 3 --warmup 1 --out "$OUT/bench-$decode"
  done
  # ours alone: TRL's colocated vLLM loads model.name_or_path, which a random-weight model does not have
  if has vllm; then
    part "bench, 1.5B shape, generator=vllm" "${R3L[@]}" bench model.device=cuda "${QWEN[@]}" generator=vllm \
      --sections side_by_side,limits --repeats 3 --warmup 1 --out "$OUT/bench-vllm"
  fi
fi

summary
exit $?
