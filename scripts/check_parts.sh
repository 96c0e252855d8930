# Sourced by scripts/gpu_check.sh (and its test): run named parts, count failures by each part's own exit status,
# print one table. Needs OUT (the output folder).
failed=0
rows=()

# part NAME EXPECT COMMAND...: EXPECT is "ok" (exit 0) or "refused" (exit 2 and one line on stderr); a part runs at
# most PART_TIMEOUT seconds (0, the default: no limit) and is then stopped and counted as failed (rc 124)
part() {
  local name=$1 expect=$2 slug rc started result
  shift 2
  slug=$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '_')
  started=$(date +%s)
  echo "== $name"
  timeout "${PART_TIMEOUT:-0}" "$@" > "$OUT/$slug.log" 2> "$OUT/$slug.err"
  rc=$?
  tail -n 3 "$OUT/$slug.err"
  result=failed
  if [ "$expect" = ok ] && [ $rc -eq 0 ]; then result=passed; fi
  if [ "$expect" = refused ] && [ $rc -eq 2 ] && tail -n 1 "$OUT/$slug.err" | grep -q '^error: '; then
    result=passed
  fi
  [ $result = passed ] || failed=$((failed + 1))
  rows+=("$(printf '%-60s | %-6s (rc %s) | %ss' "$name" "$result" "$rc" "$(( $(date +%s) - started ))")")
  return 0
}

summary() {
  echo
  echo "part                                                         | result        | time"
  printf '%s\n' "${rows[@]}"
  echo "failed parts: $failed (outputs in $OUT/)"
}

