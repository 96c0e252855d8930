#!/usr/bin/env bash
# The GPU check, one command on a CUDA machine, from the checkout root, r3l importable (pip install -e . or
# `source .gpu/b/unpack.sh` on an offline machine, see scripts/gpu_pack.sh):
#
#   bash scripts/gpu_check.sh [OUTDIR]          # default OUTDIR: gpu-check; about 13 minutes on one H200
#
# Each part runs with its output in OUTDIR/<part>.log and is counted by its own exit status (never through a
# pipeline, whose status would be the last command's); a part that must be refused is counted as passed only when
# it exits 2 with one line. Parts: the `cuda` tests; scripts/gpu_precision_check.py (bf16 vs fp32 weights under
# AdamW at lr 1e-6, a 1.5B multi-turn update's peak memory against `r3l plan`, a one-rank NCCL FSDP update with
# per-layer units and checkpointing against one process, the HF decode modes' tokens/s; its table is printed; it
# needs only torch, transformers and peft, ~3 minutes, stopped at 6); learner ranks on one GPU (2 ranks refused
# in one line) and, where there are several GPUs, 2 ranks training (and beside a vLLM engine); Ray rollout workers
# without a GPU, with a GPU share where the learner leaves one (weights over NCCL: one rank per GPU, so one worker
# where one GPU is left; NCCL refuses two ranks of one communicator on one device), else refused in one line; each
# examples/layout_*.yaml for 2 steps at the Qwen2.5-1.5B shape (random weights); vLLM colocated sleep/wake with the
# memory each phase holds; a GPU checkpoint resumed on the CPU; the default job learning on CUDA.
# PART_TIMEOUT (seconds, default 300) stops a part that hangs. The last lines are one table, part | result | seconds. Exit status: the number of failed parts.
set -u
OUT=${1:-gpu-check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} PART_TIMEOUT=${PART_TIMEOUT:-300}
source "$(dirname "$0")/check_parts.sh"  # part, summary: each part counted by its own exit status

$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.device_count(), \
'x', torch.cuda.get_device_name(0))" | tee "$OUT/device.txt"
GPUS=$($PY -c "import torch; print(torch.cuda.device_count())")
HAVE_RAY=$($PY -c "import ray" 2>/dev/null && echo 1 || echo 0)
HAVE_VLLM=$($PY -c "import vllm" 2>/dev/null && echo 1 || echo 0)
TWO_STEPS="train.steps=2 train.tasks_per_step=4 sampling.group_size=4 sampling.max_new_tokens=32 eval.size=0 \
logging.progress=false logging.tensorboard=false"
QWEN="model=random:qwen2.5-1.5b"

part "cuda tests" ok $PY -m pytest -q -m cuda tests/test_cuda.py tests/test_rollout_workers.py -p no:cacheprovider
PART_TIMEOUT=360 part "gpu_precision_check.py: bf16 AdamW, 1.5B memory vs plan, 1-rank FSDP, decode modes" ok \
  $PY scripts/gpu_precision_check.py
sed -n '/^| part /,$p' "$OUT"/gpu_precision_check_py_*.log
part "learner ranks: 1 rank on cuda" ok $PY -m r3l.cli train model=tiny-random model.device=cuda $TWO_STEPS \
  run.dir="$OUT" run.name=rank1
part "a GPU run's checkpoint: 2 steps on cuda" ok $PY -m r3l.cli train model=tiny-random model.device=cuda \
  $TWO_STEPS train.steps=2 train.checkpoint_every=1 train.keep_optimizer=true run.dir="$OUT" run.name=resume
part "... resumed on the CPU for a third step" ok env CUDA_VISIBLE_DEVICES= $PY -m r3l.cli train \
  --resume "$OUT/resume" model.device=cpu train.steps=3
part "default job on cuda learns" ok bash -c "$PY -m r3l.cli train model.device=cuda run.dir=$OUT \
  run.name=default-cuda logging.progress=false && $PY scripts/check_run.py $OUT/default-cuda"
if [ "$GPUS" -ge 2 ]; then
  part "learner ranks: 2 ranks on 2 GPUs" ok $PY -m r3l.cli train model=tiny-random model.device=cuda \
    distributed.learner_ranks=2 $TWO_STEPS run.dir="$OUT" run.name=rank2
else
  part "learner ranks: 2 ranks on 1 GPU are refused" refused $PY -m r3l.cli train model=tiny-random \
    model.device=cuda distributed.learner_ranks=2 $TWO_STEPS run.dir="$OUT" run.name=rank2
fi
if [ "$HAVE_RAY" = 1 ]; then
  part "ray workers without a GPU (learner on cuda)" ok $PY -m r3l.cli train model=tiny-random model.device=cuda \
    distributed.rollout_workers=2 distributed.worker_gpus=0 $TWO_STEPS run.dir="$OUT" run.name=workers-cpu
  if [ "$GPUS" -ge 3 ]; then  # a local Ray is shown only the GPUs the learner leaves
    part "ray workers with a GPU share, weights over NCCL" ok $PY -m r3l.cli train model=tiny-random \
      model.device=cuda distributed.rollout_workers=2 distributed.worker_gpus=0.5 distributed.weight_sync=broadcast \
      $TWO_STEPS run.dir="$OUT" run.name=workers-gpu
  elif [ "$GPUS" -eq 2 ]; then  # one GPU left: one worker on it (two would be two NCCL ranks on one device)
    part "a ray worker on the GPU the learner leaves, weights over NCCL" ok $PY -m r3l.cli train model=tiny-random \
      model.device=cuda distributed.rollout_workers=1 distributed.worker_gpus=1 distributed.weight_sync=broadcast \
      $TWO_STEPS run.dir="$OUT" run.name=workers-gpu
  else
    part "ray workers on the learner's only GPU are refused" refused $PY -m r3l.cli train model=tiny-random \
      model.device=cuda distributed.rollout_workers=2 distributed.worker_gpus=0.25 $TWO_STEPS run.dir="$OUT" \
      run.name=workers-gpu
  fi
else
  rows+=("ray is not installed here: rollout workers not checked")
fi
for layout in examples/layout_*.yaml; do  # each as far as this machine allows, the substitutions named in its row
  name=$(basename "$layout" .yaml)
  if grep -q "rollout_workers: *[1-9]" "$layout" && [ "$HAVE_RAY" = 0 ]; then
    rows+=("$name: not checked, its rollout workers need Ray"); continue
  fi
  extra=() notes=""
  if grep -q "name: vllm" "$layout" && [ "$HAVE_VLLM" = 0 ]; then extra+=(generator=hf); notes+=", hf generator (no vLLM)"; fi
  if grep -q "learner_ranks: *[2-9]" "$layout" && [ "$GPUS" -lt 2 ]; then
    extra+=(distributed.learner_ranks=1); notes+=", 1 learner rank (1 GPU)"
  fi
  part "$name, 2 steps at the 1.5B shape$notes" ok $PY -m r3l.cli train "$layout" $QWEN model.device=cuda \
    env=countdown agent.max_context_tokens=2048 distributed.ray_address=null "${extra[@]}" $TWO_STEPS \
    run.dir="$OUT" run.name="$name"
done
if [ "$HAVE_VLLM" = 1 ] && [ "$GPUS" -ge 2 ]; then
  part "vllm beside 2 learner ranks (engine in its own process)" ok $PY -m r3l.cli train model=tiny-random \
    model.device=cuda generator=vllm distributed.learner_ranks=2 $TWO_STEPS run.dir="$OUT" run.name=vllm-ranks
fi
if [ "$HAVE_VLLM" = 1 ]; then
  part "vllm colocated: memory per phase (sleep, learner step, wake)" ok $PY scripts/gpu_memory_phases.py
  cat "$OUT"/vllm_colocated*.log
else
  rows+=("vLLM is not installed here: sleep/wake not measured")
fi
summary | tee "$OUT/summary.txt"
exit $failed
