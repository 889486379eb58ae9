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
           tests/verify/test_read_only.py)
ignore_host_only=()
for f in "${host_only[@]}"; do
  [ -f "$f" ] || continue
  connected+=("$f")
  ignore_host_only+=("--ignore=$f")
done

counts=$(mktemp -d "${TMPDIR:-/tmp}/specbundle-counts.XXXXXX")
pytest_args=(-q -p no:cacheprovider -p tests._timing)
status=0
SB_PYTEST_COUNTS="$counts/connected.json" \
  timed "suite: connected side" python -m pytest "${pytest_args[@]}" "${connected[@]}" "$@" \
  || status=$?
if [ ${#isolated[@]} -gt 0 ]; then
  if unshare -rn true 2>/dev/null; then
    SB_PYTEST_COUNTS="$counts/isolated.json" timed "suite: isolated side (unshare -rn)" \
      unshare -rn sh -c 'ip link set lo up 2>/dev/null || true; exec "$@"' sh \
      python -m pytest "${pytest_args[@]}" "${ignore_host_only[@]}" "${isolated[@]}" "$@" \
      || status=$?
  else
    echo "unshare -rn unavailable: running isolated-side tests without a network namespace"
    SB_PYTEST_COUNTS="$counts/isolated.json" timed "suite: isolated side (no namespace)" \
      python -m pytest "${pytest_args[@]}" "${ignore_host_only[@]}" "${isolated[@]}" "$@" \
      || status=$?
  fi
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
