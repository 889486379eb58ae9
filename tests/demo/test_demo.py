"""`specbundle demo`: the README's first command runs every stage offline, twice in a row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specbundle.mirror import Mirror
from specbundle.mirror.versions import current_version, model_sig_rel, read_version_file

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.measures]


def _demo(work: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_ENDPOINT")}
    proc = subprocess.run(
        [sys.executable, "-m", "specbundle", "demo", "--dir", str(work), "--json"],
        env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_demo_runs_every_stage(tmp_path: Path) -> None:
    work = tmp_path / "specbundle-demo"
    doc = _demo(work)
    stages = {s["stage"]: s for s in doc["stages"]}
    assert list(stages) == ["models", "publish", "pull", "scan", "sign", "export", "import",
                            "verify", "render", "admit", "audit"]
    assert stages["pull"]["endpoint"].startswith("http://127.0.0.1:")
    assert stages["scan"]["blocked"] is False
    assert stages["audit"]["broken"] is False
    m = Mirror.open(work / "mirror")
    rec = m.load_bundle("demo")
    assert rec.target.commit == stages["publish"]["target_commit"]
    assert rec.draft is not None and rec.draft.commit == stages["publish"]["draft_commit"]
    version = current_version(m, "demo")
    assert version is not None
    assert read_version_file(m, "demo", version, model_sig_rel("draft")) is not None
    # past the air gap: a separate mirror that only the transfer set filled
    iso = Mirror.open(work / "isolated" / "mirror")
    assert stages["import"]["status"] == "imported"
    assert iso.load_bundle("demo").draft == rec.draft
    assert (iso.bundle_dir("demo") / "render" / "llamacpp" / "shell").is_dir()
    admit = stages["admit"]
    if "criteria" in admit:  # llama-server installed: a signed decision with every criterion
        names = {c["name"] for c in admit["criteria"]}
        assert {"throughput_ratio", "alpha_above_c"} <= names
        status = json.loads((iso.bundle_dir("demo") / "admit" / "status.json").read_text())
        assert status["admitted"] is admit["admitted"]
    # each side's event log tells its part of the story, hash-chained
    assert [e["type"] for e in m.read_events()][:3] == ["pull", "scan", "sign"]
    assert iso.read_events()[0]["type"] == "import"

    # a second run is idempotent: same commits, nothing fetched again
    again = _demo(work)
    pull2 = next(s for s in again["stages"] if s["stage"] == "pull")
    assert pull2["fetched_files"] == 0
    assert Mirror.open(work / "mirror").load_bundle("demo").target.commit == rec.target.commit
