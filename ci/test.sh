#!/usr/bin/env bash
# The test command the README gives: lint, then the suite. Isolated-side stages (verify, render,
# bench, admit, audit, demo) run inside a network namespace with only loopback (`unshare -rn`),
# which proves they never touch the network; the connected side (pull, scan, sign, images) runs
# normally against loopback servers the tests start.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/lint.sh

isolated=()
for d in tests/verify tests/render tests/bench tests/admit tests/audit tests/demo; do
  [ -d "$d" ] && isolated+=("$d")
done
connected=()
for d in tests/*; do
  case " ${isolated[*]} " in *" $d "*) continue ;; esac
  case "$d" in tests/__pycache__|tests/golden|tests/data) continue ;; esac
  [[ -d "$d" || "$d" == tests/test_*.py ]] && connected+=("$d")
done

# The docker runtime of `bench` needs the host's loopback, which a network namespace hides.
docker_bench=tests/bench/test_docker_runtime.py
[ -f "$docker_bench" ] && connected+=("$docker_bench")

status=0
python -m pytest -q -p no:cacheprovider "${connected[@]}" "$@" || status=$?
if [ ${#isolated[@]} -gt 0 ]; then
  if unshare -rn true 2>/dev/null; then
    unshare -rn sh -c 'ip link set lo up 2>/dev/null || true; exec "$@"' sh \
      python -m pytest -q -p no:cacheprovider --ignore="$docker_bench" "${isolated[@]}" "$@" \
      || status=$?
  else
    echo "unshare -rn unavailable: running isolated-side tests without a network namespace"
    python -m pytest -q -p no:cacheprovider --ignore="$docker_bench" "${isolated[@]}" "$@" \
      || status=$?
  fi
fi
exit $status
