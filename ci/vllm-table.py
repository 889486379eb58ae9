#!/usr/bin/env python3
"""Regenerate src/specbundle/render/vllm_args.json from the installed (pinned) vLLM.

    python ci/vllm-table.py [VLLM_BIN]        # default: $VLLM_BIN, else .venv-vllm/bin/vllm

The table is what lint and the tests fall back to when vLLM is not installed; with vLLM
installed, vLLM's own parser and config builder judge every command instead
(``specbundle lint --engine-check``). The file names the version it was dumped from.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from specbundle.render.vllm_oracle import dump_table, find_vllm  # noqa: E402

OUT = ROOT / "src" / "specbundle" / "render" / "vllm_args.json"


def main() -> int:
    given = sys.argv[1] if len(sys.argv) > 1 else None
    default = ROOT / ".venv-vllm" / "bin" / "vllm"
    vllm = Path(given) if given else find_vllm() or (default if default.is_file() else None)
    if vllm is None:
        print("no vLLM: run bash ci/install-vllm.sh or set VLLM_BIN", file=sys.stderr)  # noqa: T201
        return 6
    os.environ.setdefault("VLLM_BIN", str(vllm))
    doc = dump_table(vllm)
    doc["generated_by"] = "ci/vllm-table.py (vLLM's serve parser and SpeculativeConfig)"
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(  # noqa: T201
          f"wrote {OUT.relative_to(ROOT)} from vLLM {doc['vllm_version']}: "
          f"{len(doc['flags'])} flags, {len(doc['speculative_keys'])} speculative keys")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
