#!/usr/bin/env bash
# Pack for an offline CUDA machine (Python 3.12, torch preinstalled, no package index): ../shared/gpu/pack.sh's
# wheels and the embedded model's GGUF, plus pytest for the `cuda` tests, regrouped into three folders so that each
# transfer (the checkout, about 8 MiB, travels with every one) stays under the 64 MiB a transfer may carry.
#   bash scripts/gpu_pack.sh            # writes .gpu/a, .gpu/b, .gpu/c ("/.gpu/" belongs in .git/info/exclude)
# Then, on the CUDA machine, three calls in a row (the machine must stay up in between):
#   carry .gpu/a: bash .gpu/a/stash.sh        (first GGUF half, the hub client's wheels)
#   carry .gpu/b: bash .gpu/b/stash.sh        (second GGUF half)
#   carry .gpu/c: source .gpu/c/unpack.sh && bash scripts/gpu_check.sh
# (or, in the third call, only issue 51's check, ~3 minutes on one H100: its random-weight models still take their
# tokenizer from the embedded GGUF:  source .gpu/c/unpack.sh && python3 scripts/gpu_precision_check.py)
# vLLM (~400 MB of wheels) and Ray (~70 MB) do not fit, and the lent machine reaches no registry: there,
# gpu_check.sh checks what it can without them and names what it left out.
set -eu
cd "$(dirname "$0")/.."
rm -rf .gpu
bash "${SHARED_GPU:-../shared/gpu}/pack.sh" .gpu >/dev/null
for p in pytest pluggy iniconfig packaging pytest-timeout; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    -d .gpu/b/whl "$p" 2>&1 | grep -v '^WARNING' || true
done
mkdir -p .gpu/c
mv .gpu/b/whl .gpu/b/sdist .gpu/b/gguf.sha256 .gpu/c/
mv .gpu/a/transformers-*.whl .gpu/c/whl/
cp .gpu/a/stash.sh .gpu/b/stash.sh  # keeps this folder's GGUF part; it has no wheels
sed 's#"$D/gguf.01"#/root/r3l-stash/gguf.01#' .gpu/b/unpack.sh > .gpu/c/unpack.sh
sed -i 's#/gguf.00"#/gguf.0*"#; s#cp "$D/gguf.0\*"#cp "$D"/gguf.0*#' .gpu/a/stash.sh .gpu/b/stash.sh
rm .gpu/b/unpack.sh
grep -q 'gguf.0\*' .gpu/b/stash.sh && grep -q /root/r3l-stash/gguf.01 .gpu/c/unpack.sh \
  || { echo "error: ../shared/gpu's scripts changed; regroup .gpu by hand" >&2; exit 2; }
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
for d in a b c; do
  size=$(du -sb .gpu/$d | cut -f1)
  total=$(( (size + tree) / 1048576 ))
  echo ".gpu/$d: $((size / 1048576)) MiB + the checkout $((tree / 1048576)) MiB = $total MiB"
  [ "$total" -lt 64 ] || { echo "error: .gpu/$d travels over 64 MiB; move a wheel to another folder" >&2; exit 2; }
done
