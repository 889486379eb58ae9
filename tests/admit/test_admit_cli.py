"""The ``admit`` and ``bench`` commands: exit codes and JSON on the fail-closed paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from specbundle.admit import read_status
from specbundle.attest import SLSA_VSA_V1, check_statement, generate_key, read_attestations
from specbundle.attest.keys import write_private_key
from specbundle.synth import SynthPair
from tests.lib.bundles import pull_synth
from tests.lib.specs import bundle_doc

BENCH_SCHEMA = Path(__file__).parents[2] / "manifests" / "schemas" / "bench-report.schema.json"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specbundle", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_unsigned_bundle_is_rejected_with_a_signed_failed_decision(
        tmp_path: Path, bench_pairs: dict[str, SynthPair]) -> None:
    mirror = pull_synth(tmp_path / "mirror", bundle_doc("raw", bench_pairs["good"], levels=[1]))
    key = generate_key("ecdsa-p256")
    write_private_key(key, tmp_path / "gate.pem")
    (tmp_path / "trust.yaml").write_text(yaml.safe_dump({
        "apiVersion": "specbundle/v1", "kind": "TrustPolicy", "keys": [
            {"name": "gate", "fingerprint": key.fingerprint,
             "public_key": key.public.pem.decode(), "repos": ["*"], "bundles": ["*"]}]}))
    res = _run("admit", "raw", "--trust", str(tmp_path / "trust.yaml"), "--key",
               str(tmp_path / "gate.pem"), "--mirror", str(mirror.root), "--json")
    assert res.returncode == 5, res.stderr
    out = json.loads(res.stdout)
    assert out["result"] == "FAILED" and out["admitted"] is False
    assert out["reasons"] and out["reasons"][0].startswith("verification:")
    assert out["bench_run_id"] is None  # nothing was benchmarked after verify failed
    assert "rejected" in res.stderr
    status = read_status(mirror, "raw")
    assert status is not None and status["admitted"] is False
    (env,) = read_attestations(mirror, "raw")
    st = check_statement(env, [key.public]).statement
    assert st.predicate_type == SLSA_VSA_V1 and st.predicate["verificationResult"] == "FAILED"


def test_bench_without_a_baseline_server_is_a_usage_error(
        tmp_path: Path, bench_pairs: dict[str, SynthPair]) -> None:
    mirror = pull_synth(tmp_path / "mirror", bundle_doc("b", bench_pairs["good"], levels=[1]))
    res = _run("bench", "b", "--mirror", str(mirror.root), "--base-url", "http://127.0.0.1:9",
               "--json")
    assert res.returncode == 2  # an incomplete pair of options, caught before any work
    assert "--baseline-url" in res.stderr


def test_bench_rejects_bad_levels(tmp_path: Path) -> None:
    res = _run("bench", "b", "--mirror", str(tmp_path), "--levels", "1,x")
    assert res.returncode == 2 and "--levels" in res.stderr


@pytest.mark.engine
def test_bench_json_validates_against_the_published_schema(
        tmp_path: Path, bench_pairs: dict[str, SynthPair], llama_server_bin: Path) -> None:
    """A real ``bench --json`` (its time budget spent at the first look, so it is short):
    the document it prints is the bench report the published schema describes."""
    mirror = pull_synth(tmp_path / "mirror", bundle_doc("b", bench_pairs["good"], levels=[1]))
    res = _run("bench", "b", "--unsigned", "--mirror", str(mirror.root), "--binary",
               str(llama_server_bin), "--time-budget", "1", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, json.loads(BENCH_SCHEMA.read_text()))
    assert doc["stopping"]["reason"] == "time_budget"
