#!/usr/bin/env bash
# Pack for an offline CUDA machine (Python 3.12, torch preinstalled, no package index): ../shared/gpu/pack.sh's
# two folders (wheels and the embedded model's GGUF, each under 64 MiB) plus pytest for the `cuda` tests.
#   bash scripts/gpu_pack.sh            # writes .gpu/a and .gpu/b ("/.gpu/" belongs in .git/info/exclude)
# Then, on the CUDA machine: transfer 1 carries .gpu/a and runs `bash .gpu/a/stash.sh`; transfer 2 carries
# .gpu/b and runs `source .gpu/b/unpack.sh && bash scripts/gpu_check.sh`. vLLM (~400 MB of wheels) and Ray (~70 MB)
# do not fit the 64 MiB transfers, and the lent machine reaches no registry: there, gpu_check.sh reports the vLLM
# and Ray parts as not checked.
set -eu
cd "$(dirname "$0")/.."
bash "${SHARED_GPU:-../shared/gpu}/pack.sh" .gpu
for p in pytest pluggy iniconfig packaging pytest-timeout; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    -d .gpu/b/whl "$p" 2>&1 | grep -v '^WARNING' || true
done
du -sh .gpu/a .gpu/b
