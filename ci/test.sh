#!/usr/bin/env bash
# The test command the README gives: lint, then the suite. Isolated-side stages (verify, transfer,
# render, bench, admit, audit, review, demo) run inside a network namespace with only loopback
# (`unshare -rn`), which proves they never touch the network; the connected side (pull, scan,
# sign, images) runs normally against loopback servers the tests start. Components the suite
# needs beyond pip (browser, HSM, Docker, SGLang, registry, vLLM) come from ci/setup.sh; tests
# whose component is missing skip, and the closing lines say how many and how to install them.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/timing.sh
[ -n "$SB_TIMINGS_OWNER" ] && trap timing_table EXIT
timed "lint (ruff, mypy --strict)" bash ci/lint.sh

isolated=()
for d in tests/verify tests/transfer tests/render tests/bench tests/admit tests/audit tests/review \
         tests/demo; do
  [ -d "$d" ] && isolated+=("$d")
done
connected=()
for d in tests/*; do
  case " ${isolated[*]} " in *" $d "*) continue ;; esac
  case "$d" in tests/__pycache__|tests/golden|tests/data|tests/lib) continue ;; esac
  [[ -d "$d" || "$d" == tests/test_*.py ]] && connected+=("$d")
done

# Run on the host, not in the namespace: the docker runtime of `bench` needs the host's
# loopback, and the disk-full and read-only mirror tests need `mount` (tmpfs, bind), which an
# unprivileged user namespace refuses. None of them reaches beyond loopback.
host_only=(tests/bench/test_docker_runtime.py tests/verify/test_disk_full.py
           tests/verify/test_read_only.py tests/review/test_diff_oci_read_only.py)
ignore_host_only=()
for f in "${host_only[@]}"; do
  [ -f "$f" ] || continue
  connected+=("$f")
  ignore_host_only+=("--ignore=$f")
done

counts=$(mktemp -d "${TMPDIR:-/tmp}/specbundle-counts.XXXXXX")
pytest_args=(-q -p no:cacheprovider -p tests._timing)
# Most tests use one core: they run on two workers (pytest-xdist, a whole module per worker, so
# a module's fixtures are built once); tests that start an engine only to check what it does
# (flags, outputs, counters) run there too. Tests that judge an engine's speed (marked
# `measures`: bench, admit and the demo on a real engine) run alone, after the rest, so
# nothing else competes for the cores while they measure.
workers=(-n 2 --dist loadfile)
light="not gpu and not online and not measures"
alone="not gpu and not online and measures"
isolate=(sh -c 'exec "$@"' sh)
namespace=""
if unshare -rn true 2>/dev/null; then
  isolate=(unshare -rn sh -c 'ip link set lo up 2>/dev/null || true; exec "$@"' sh)
  namespace="unshare -rn"
else
  echo "unshare -rn unavailable: running isolated-side tests without a network namespace"
  namespace="no namespace"
fi
# pytest's 5 (nothing selected: a -k or -m given here left a phase empty) is not a failure
suite() { "$@" || { rc=$?; [ "$rc" -eq 5 ] || return "$rc"; }; }
status=0
SB_PYTEST_COUNTS="$counts/connected.json" \
  timed "suite: connected side (2 workers)" \
  suite python -m pytest "${pytest_args[@]}" "${workers[@]}" "${connected[@]}" "$@" || status=$?
if [ ${#isolated[@]} -gt 0 ]; then
  SB_PYTEST_COUNTS="$counts/isolated-light.json" \
    timed "suite: isolated side, the rest (2 workers, $namespace)" \
    suite "${isolate[@]}" python -m pytest "${pytest_args[@]}" "${workers[@]}" -m "$light" \
    "${ignore_host_only[@]}" "${isolated[@]}" "$@" || status=$?
  SB_PYTEST_COUNTS="$counts/isolated-engines.json" \
    timed "suite: isolated side, measuring engines (alone, $namespace)" \
    suite "${isolate[@]}" python -m pytest "${pytest_args[@]}" -m "$alone" \
    "${ignore_host_only[@]}" "${isolated[@]}" "$@" || status=$?
fi
# One closing line for both suites, and a plain word on what did not run.
python - "$counts" "$SB_TIMINGS.closing" <<'PY'
import json, pathlib, sys
total = {}
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    for k, v in json.loads(f.read_text()).items():
        total[k] = total.get(k, 0) + v
skipped = total.get("skipped", 0)
if skipped:
    print(f"\n{skipped} tests skipped (reasons listed above); `bash ci/setup.sh` installs the "
          "browser, HSM, Docker, SGLang, registry and vLLM components they need.")
line = (f"total: {total.get('passed', 0)} passed, {total.get('failed', 0)} failed, "
        f"{skipped} skipped")
print(line)
pathlib.Path(sys.argv[2]).write_text(line + "\n")
PY
rm -rf "$counts"
exit $status
