"""`specbundle demo --key pkcs11:…`: the whole pipeline signs with a key inside a SoftHSM2 token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.hsm import HAVE_SOFTHSM, init_token

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(not HAVE_SOFTHSM, reason="softhsm2/opensc not installed"), pytest.mark.measures]
pytest.importorskip("PyKCS11", reason="PyKCS11 (pkcs11 extra) is not installed")


def test_demo_signs_with_a_token_key(tmp_path: Path) -> None:
    uri, hsm_env = init_token(tmp_path / "hsm")
    work = tmp_path / "demo"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HF_ENDPOINT")},
           **hsm_env}
    proc = subprocess.run(
        [sys.executable, "-m", "specbundle", "demo", "--dir", str(work), "--key", uri,
         "--json"], env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = {s["stage"]: s for s in json.loads(proc.stdout)["stages"]}
    assert stages["import"]["status"] == "imported"
    assert "ok" in stages["verify"]["summary"]
    if "audit" in stages:  # admit and audit run when llama-server is installed
        assert stages["audit"]["broken"] is False
    policy = (work / "trust.yaml").read_text()
    assert stages["sign"]["key"] in policy  # the token's key is the policy's release key
    # the private key never left the token: no key file anywhere the demo wrote
    assert not (work / "keys").exists()
    for f in work.rglob("*"):
        if f.is_file() and f.stat().st_size < (1 << 20):
            assert b"PRIVATE KEY" not in f.read_bytes(), f
