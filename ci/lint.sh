#!/usr/bin/env bash
# Static checks: ruff and mypy --strict over the library.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check src tests benchmarks
mypy
