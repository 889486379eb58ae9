"""``admit`` opens every output with the verdict: the JSON's first key, the table's first line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from specbundle.attest import generate_key
from specbundle.attest.keys import write_private_key
from specbundle.synth import SynthPair
from tests.lib.bundles import pull_synth
from tests.lib.specs import bundle_doc


def _admit(tmp_path: Path, pair: SynthPair, *extra: str) -> subprocess.CompletedProcess[str]:
    mirror = pull_synth(tmp_path / "mirror", bundle_doc("raw", pair, levels=[1]))
    key = generate_key("ecdsa-p256")
    write_private_key(key, tmp_path / "gate.pem")
    (tmp_path / "trust.yaml").write_text(yaml.safe_dump({
        "apiVersion": "specbundle/v1", "kind": "TrustPolicy", "keys": [
            {"name": "gate", "fingerprint": key.fingerprint,
             "public_key": key.public.pem.decode(), "repos": ["*"], "bundles": ["*"]}]}))
    return subprocess.run(
        [sys.executable, "-m", "specbundle", "admit", "raw", "--trust", str(tmp_path / "trust.yaml"),
         "--key", str(tmp_path / "gate.pem"), "--mirror", str(mirror.root), *extra],
        capture_output=True, text=True, timeout=120, check=False)


def test_json_opens_with_the_verdict_of_an_unsigned_bundle(
        tmp_path: Path, bench_pairs: dict[str, SynthPair]) -> None:
    res = _admit(tmp_path, bench_pairs["good"], "--json")
    assert res.returncode == 5, res.stderr
    out = json.loads(res.stdout)
    assert next(iter(out)) == "verdict"
    v = out["verdict"]
    assert v["outcome"] == "rejected"
    assert v["headline"].startswith("rejected before the gate: verification:")
    assert out["result"] == "FAILED"  # the decision's own fields follow, unchanged


def test_table_opens_with_the_verdict(tmp_path: Path, bench_pairs: dict[str, SynthPair]) -> None:
    res = _admit(tmp_path, bench_pairs["good"])
    assert res.returncode == 5
    lines = res.stdout.splitlines()
    assert lines[0].startswith("REJECTED: verification:")  # one word, one sentence of why
    head = next(i for i, ln in enumerate(lines) if ln.startswith("rejected before the gate:"))
    assert head < next(i for i, ln in enumerate(lines) if "criterion" in ln)  # then the table
