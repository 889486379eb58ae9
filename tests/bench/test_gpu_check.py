"""ci/gpu-check.sh on the CPU build and the tiny pair: the script a lent GPU runs, end to end.

``GPU_CHECK_CPU=1`` keeps everything the GPU run does (the two synthetic pairs, pull, scan,
sign, ``specbundle bench`` and ``specbundle admit``, the reports and the summary) but serves
on the CPU; the installed llama-server stands in for the CUDA build the script makes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.measures]


def test_gpu_check_runs_the_pipeline_on_both_pairs(llama_server_bin: Path,
                                                   tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "GPU_CHECK_CPU": "1",
           "GPU_CHECK_LLAMA_SERVER": str(llama_server_bin),
           "GPU_CHECK_WORK": str(tmp_path / "work"), "HOME": str(tmp_path),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(ROOT / "ci" / "gpu-check.sh")], env=env,
                          capture_output=True, text=True, timeout=1500, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"good", "self"}
    for name, row in summary.items():
        assert row["admitted"] in (True, False), (name, row)
        assert row["ratio"] is not None and row["ratio_ci"][0] <= row["ratio"], (name, row)
        assert row["mean_acceptance_length"] is not None, (name, row)
    # the draft is the target: it agrees everywhere but costs as much (c ~ 1): never admitted
    assert summary["self"]["admitted"] is False
    assert summary["self"]["alpha"] is None or summary["self"]["alpha"] > 0.9
    table = (out / "summary.md").read_text()
    assert "| good |" in table and "| self |" in table
    for f in ("bench-good.json", "admit-good.json", "bench-self.json", "admit-self.json"):
        assert (out / f).stat().st_size > 0, f
