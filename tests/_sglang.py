"""SGLang's own ``ServerArgs`` parsing and resolution, run in ``.venv-sglang`` as a subprocess.

``ci/install-sglang.sh`` builds that venv (sglang 0.5.23 ``--no-deps`` plus what
``sglang.srt.server_args`` imports). Every command of a test goes through one subprocess:
importing SGLang costs seconds, resolving a command milliseconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("SGLANG_VENV", ROOT / ".venv-sglang"))
PYTHON = VENV / "bin" / "python"
MAIN = Path(__file__).parent / "render" / "sglang_oracle_main.py"
LAUNCH = ("python3", "-m", "sglang.launch_server")

needs_sglang = pytest.mark.skipif(
    not PYTHON.exists(), reason="SGLang not installed (run ci/install-sglang.sh)")


def resolve(commands: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """SGLang's verdict on each rendered command: ``resolved`` fields or its ``error``."""
    argvs = []
    for argv in commands:
        assert tuple(argv[:3]) == LAUNCH, argv[:3]
        argvs.append(list(argv[3:]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(PYTHON), str(MAIN)], input=json.dumps(argvs), env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise AssertionError(f"the SGLang oracle crashed (rc {proc.returncode})")
    out: list[dict[str, Any]] = json.loads(proc.stdout)
    return out


def flags() -> dict[str, str]:
    """Every option string SGLang's own parser accepts -> bool/int/float/choice/str."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(PYTHON), str(MAIN), "--list-flags"], env=env,
                          capture_output=True, text=True, timeout=600, check=True)
    out: dict[str, str] = json.loads(proc.stdout)
    return out


def choices() -> dict[str, list[str]]:
    """Every option string of SGLang's parser that has argparse choices -> the choices."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(PYTHON), str(MAIN), "--list-choices"], env=env,
                          capture_output=True, text=True, timeout=600, check=True)
    out: dict[str, list[str]] = json.loads(proc.stdout)
    return out


def algorithms() -> set[str]:
    """SGLang's builtin ``--speculative-algorithm`` names (its enum and aliases, not NONE)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(PYTHON), str(MAIN), "--list-algorithms"], env=env,
                          capture_output=True, text=True, timeout=600, check=True)
    return set(json.loads(proc.stdout))
