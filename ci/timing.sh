# Sourced by .ci/run, ci/setup.sh and ci/test.sh: time each step and print one table at the end,
# so a slow install or suite is visible in every CI log.
#   timed NAME CMD...   run CMD, record NAME, its seconds, exit status, start and end in
#                       $SB_TIMINGS (steps may run side by side: .ci/run overlaps setup)
#   timing_table        print the table (steps in order of start, total, share of the total);
#                       a step that ran beside another is marked "||", and the total is the
#                       wall time the steps covered, so overlapping steps are not counted twice
# The script that creates the file (SB_TIMINGS_OWNER=1, not exported) prints the table.
SB_TIMINGS_OWNER=""
if [ -z "${SB_TIMINGS:-}" ]; then
  SB_TIMINGS_OWNER=1
  SB_TIMINGS="$(mktemp "${TMPDIR:-/tmp}/specbundle-timings.XXXXXX")"
  export SB_TIMINGS
fi

timed() {
  local name=$1 t0 t1 rc=0
  shift
  t0=$(date +%s)
  "$@" || rc=$?
  t1=$(date +%s)
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$(( t1 - t0 ))" "$rc" "$t0" "$t1" >> "$SB_TIMINGS"
  return "$rc"
}

timing_table() {
  [ -s "$SB_TIMINGS" ] || return 0
  sort -t "$(printf '\t')" -k4,4n -s "$SB_TIMINGS" | awk -F'\t' '
    { name[NR] = $1; secs[NR] = $2; rc[NR] = $3; t0[NR] = $4; t1[NR] = $5 }
    END {
      # wall time covered by the steps (rows are sorted by start): overlaps count once
      for (i = 1; i <= NR; i++) {
        if (i == 1 || t0[i] >= end) { total += t1[i] - t0[i]; end = t1[i] }
        else if (t1[i] > end) { total += t1[i] - end; end = t1[i] }
        for (j = 1; j <= NR; j++)
          if (j != i && t0[j] < t1[i] && t0[i] < t1[j]) par[i] = 1
      }
      printf "\n%-50s %9s %6s %4s\n", "step (timing table; || ran beside another)",
             "min:sec", "share", "rc"
      for (i = 1; i <= NR; i++)
        printf "%-50s %6d:%02d %5.1f%% %4s\n", (par[i] ? "|| " : "") name[i], secs[i] / 60,
               secs[i] % 60, total ? 100 * secs[i] / total : 0, rc[i]
      printf "%-50s %6d:%02d %5.1f%%\n", "total (wall)", total / 60, total % 60, 100
    }'
  # the suites' closing count again, so the log still ends on it
  [ -s "$SB_TIMINGS.closing" ] && cat "$SB_TIMINGS.closing"
  return 0
}
