#!/usr/bin/env bash
# SGLang's own argument parser and resolver, for the render tests (idempotent).
#
# Creates <repo>/.venv-sglang (gitignored) with sglang==0.5.23 installed --no-deps plus only
# what `sglang.srt.server_args` and its resolution pipeline import on a CPU box (no CUDA
# kernels, no server dependencies). torch is the CPU build 2.13.0 (sglang pins 2.14.1, whose
# wheel pulls ~4 GB of CUDA libraries; ServerArgs resolution needs no kernel, and the tests
# verify it resolves). Tests that need it skip when the venv is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${SGLANG_VENV:-$PWD/.venv-sglang}"
SGLANG_VERSION=0.5.23
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"  # the sglang wheel is cp311
# The stamp names the dependency set: a venv built for an older set is rebuilt.
stamp="$VENV/.specbundle-sglang-$SGLANG_VERSION-2"
if [ -f "$stamp" ]; then
    echo "sglang $SGLANG_VERSION already in $VENV"
    exit 0
fi
rm -rf "$VENV"
# A half-built venv must not look installed to the tests: remove it on any failure.
trap 'rm -rf "$VENV"' ERR
"$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
cons="$VENV/constraints.txt"
printf 'torch==2.13.0\n' > "$cons"
# torchvision's wheel is built for CUDA torch: its Python part is used, its _C kernels are not
# (tests/render/sglang_oracle_main.py declares the two op schemas it registers fakes for).
# CPU torch first (on PyPI's default index the 2.13.0 linux wheel is the CUDA one; the
# CPU build comes from PIP_INDEX_URL/PIP_EXTRA_INDEX_URL where one is configured).
"${pip[@]}" torch==2.13.0
"${pip[@]}" --no-deps "sglang==$SGLANG_VERSION"
# What `import sglang.srt.server_args` and `ServerArgs.resolve_once()` import.
"${pip[@]}" -c "$cons" \
    msgspec numpy orjson psutil pybase64 requests packaging pillow starlette pydantic \
    pyzmq tqdm ipython aiohttp dill sentencepiece gguf triton "apache-tvm-ffi==0.1.11" \
    "transformers==5.19.0" compressed-tensors "torchvision==0.28.0"
# What DSPARK's resolution imports (dspark_config -> sampler -> the OpenAI protocol types).
"${pip[@]}" -c "$cons" openai partial-json-parser einops
# The oracle the render tests run must load SGLang's own parser here (offline).
HF_HUB_OFFLINE=1 "$VENV/bin/python" tests/render/sglang_oracle_main.py --list-flags \
    | "$VENV/bin/python" -c 'import json, sys; print(len(json.load(sys.stdin)), "sglang flags")'
touch "$stamp"
