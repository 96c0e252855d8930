# The GPU check's bookkeeping, sourced by scripts/gpu_check.sh (and by tests/test_gpu_check_script.py):
# each part's output goes to a file of its own, never through a pipe, so its exit status is the command's own
# (a `cmd | tee` pipeline ran in a subshell and lost the count), and every result is a line in $OUT/results.tsv.
#   part NAME [--expect N] CMD...   run CMD (within $PART_TIMEOUT s); passes when it exits N (default 0)
#   skip NAME WHY                   a part this machine cannot run (no second GPU, no vLLM), listed as skipped
#   summary                         the table of all parts; returns the number of failed parts (capped at 100)
OUT=${OUT:-gpu-check}
mkdir -p "$OUT/parts"
RESULTS="$OUT/results.tsv"
: > "$RESULTS"

part() {
  local name=$1 expect=0
  shift
  if [ "${1:-}" = "--expect" ]; then expect=$2; shift 2; fi
  local index log started rc verdict
  index=$(($(wc -l < "$RESULTS") + 1))
  log="$OUT/parts/$(printf '%02d' "$index").log"
  started=$SECONDS
  echo "== $name"
  timeout "${PART_TIMEOUT:-900}" "$@" > "$log" 2>&1
  rc=$?
  tail -n 3 "$log"
  if [ "$rc" -eq "$expect" ]; then verdict=pass; else verdict=FAIL; fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$verdict" "$rc" "$((SECONDS - started))" "$log" >> "$RESULTS"
  echo "== $verdict (exit $rc, expected $expect)"
  return 0
}

skip() {
  printf '%s\t%s\t-\t0\t%s\n' "$1" skip "$2" >> "$RESULTS"
  echo "== $1: skipped ($2)"
}

summary() {
  local failed
  failed=$(awk -F '\t' '$2 == "FAIL"' "$RESULTS" | wc -l)
  {
    echo "| part | result | exit | seconds | output |"
    echo "|---|---|---|---|---|"
    awk -F '\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$RESULTS"
    echo
    echo "failed parts: $failed of $(wc -l < "$RESULTS")"
  } | tee "$OUT/summary.md"
  [ "$failed" -gt 100 ] && failed=100
  return "$failed"
}
