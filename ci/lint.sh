#!/usr/bin/env bash
# Static checks: ruff and mypy --strict over the library.
set -euo pipefail
cd "$(dirname "$0")/.."
# No tracked symlink may point outside the repository (a helper's venv link once slipped in
# and shadowed the vLLM install of every clean clone).
if git rev-parse --git-dir >/dev/null 2>&1; then
  outside=$(git ls-files -s | awk '$1 == "120000" {print $4}' | while read -r f; do
    case "$(readlink -m "$f")" in "$PWD"/*) ;; *) echo "$f" ;; esac
  done)
  if [ -n "$outside" ]; then
    echo "tracked symlinks pointing outside the repository: $outside" >&2
    exit 1
  fi
fi
ruff check src tests benchmarks
mypy
