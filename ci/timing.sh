# Sourced by .ci/run, ci/setup.sh and ci/test.sh: time each step and print one table at the end,
# so a slow install or suite is visible in every CI log.
#   timed NAME CMD...   run CMD, record NAME, its seconds and exit status in $SB_TIMINGS
#   timing_table        print the table (steps in order, total, share of the total)
# The script that creates the file (SB_TIMINGS_OWNER=1, not exported) prints the table.
SB_TIMINGS_OWNER=""
if [ -z "${SB_TIMINGS:-}" ]; then
  SB_TIMINGS_OWNER=1
  SB_TIMINGS="$(mktemp "${TMPDIR:-/tmp}/specbundle-timings.XXXXXX")"
  export SB_TIMINGS
fi

timed() {
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  "$@" || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$(( $(date +%s) - t0 ))" "$rc" >> "$SB_TIMINGS"
  return "$rc"
}

timing_table() {
  [ -s "$SB_TIMINGS" ] || return 0
  awk -F'\t' '
    { name[NR] = $1; secs[NR] = $2; rc[NR] = $3; total += $2 }
    END {
      printf "\n%-44s %9s %6s %4s\n", "step (timing table)", "min:sec", "share", "rc"
      for (i = 1; i <= NR; i++)
        printf "%-44s %6d:%02d %5.1f%% %4s\n", name[i], secs[i] / 60, secs[i] % 60,
               total ? 100 * secs[i] / total : 0, rc[i]
      printf "%-44s %6d:%02d %5.1f%%\n", "total", total / 60, total % 60, 100
    }' "$SB_TIMINGS"
  # the suites' closing count again, so the log still ends on it
  [ -s "$SB_TIMINGS.closing" ] && cat "$SB_TIMINGS.closing"
  return 0
}
