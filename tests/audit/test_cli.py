"""``specbundle audit``: exit codes, --json, the log check, queries and exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from specbundle.attest import write_private_key
from tests.lib.chain import Chain
from tests.lib.cli import run_cli


def _trust(chain: Chain, tmp_path: Path, *, revoke: bool = False) -> str:
    key = chain.other if revoke else chain.release
    doc = {"apiVersion": "specbundle/v1", "kind": "TrustPolicy", "keys": [
        {"name": "release", "fingerprint": key.fingerprint, "public_key": key.public.pem.decode(),
         "repos": ["*"], "bundles": ["*"]}]}
    path = tmp_path / ("revoked.yaml" if revoke else "trust.yaml")
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_audit_subject_json_and_exit_codes(
    chain: Chain, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = str(chain.mirror.root)
    assert chain.record.draft is not None
    code, out, _ = run_cli(capsys, "audit", chain.record.draft.repo, "--mirror", m,
                           "--trust", _trust(chain, tmp_path), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["broken"] is False
    assert [b["name"] for b in doc["bundles"]] == ["pair"]
    code, out, err = run_cli(capsys, "audit", "pair", "--mirror", m,
                             "--trust", _trust(chain, tmp_path, revoke=True))
    assert code == 3
    assert "chain of custody broken" in err
    assert "failed" in out
    code, _, err = run_cli(capsys, "audit", "nope/nothing", "--mirror", m)
    assert code == 2
    assert "matches" in err


def test_audit_log_verify_names_the_deleted_entry(
    chain: Chain, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = str(chain.mirror.root)
    trust = _trust(chain, tmp_path)
    code, out, _ = run_cli(capsys, "audit", "log", "--verify", "--mirror", m, "--trust", trust,
                           "--json")
    assert code == 0
    assert json.loads(out)["ok"] is True
    log = chain.mirror.events_path
    lines = log.read_bytes().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    log.write_bytes(b"".join(lines))
    code, out, err = run_cli(capsys, "audit", "log", "--verify", "--mirror", m, "--trust", trust,
                             "--json")
    assert code == 3
    (issue,) = json.loads(out)["chain"]["issues"]
    assert (issue["kind"], issue["seq"], issue["line"]) == ("reordered", 1, 3)
    assert "reordered" in err
    code, out, _ = run_cli(capsys, "audit", "log", "--mirror", m, "--json")
    assert code == 0
    assert [e["type"] for e in json.loads(out)["events"]][:3] == ["pull", "sign", "scan"]


def test_checkpoint_command_signs_the_head(
    chain: Chain, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "release.pem"
    write_private_key(chain.release, key)
    m = str(chain.mirror.root)
    code, out, _ = run_cli(capsys, "audit", "checkpoint", "--mirror", m, "--key", str(key),
                           "--json")
    assert code == 0
    cp = json.loads(out)
    assert cp["signers"] == [chain.release.fingerprint]
    # the tail the new checkpoint covers can no longer be truncated unnoticed
    log = chain.mirror.events_path
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:-2]))
    code, out, _ = run_cli(capsys, "audit", "log", "--verify", "--mirror", m,
                           "--trust", _trust(chain, tmp_path), "--json")
    assert code == 3
    assert json.loads(out)["chain"]["issues"][0]["kind"] == "deleted"


def test_query_and_exports(chain: Chain, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = str(chain.mirror.root)
    trust = _trust(chain, tmp_path)
    assert chain.record.draft is not None
    digest = chain.record.draft.files[0].sha256
    code, out, _ = run_cli(capsys, "audit", "query", "uses-digest", digest, "--mirror", m,
                           "--json")
    assert code == 0
    assert json.loads(out)["results"][0]["bundle"] == "pair"
    code, out, _ = run_cli(capsys, "audit", "query", "unverifiable", "--mirror", m,
                           "--trust", _trust(chain, tmp_path, revoke=True), "--json")
    assert code == 0
    assert json.loads(out)["results"][0]["bundle"] == "pair"
    code, _, err = run_cli(capsys, "audit", "query", "admitted-by", "release", "--mirror", m)
    assert code == 2
    assert "--trust" in err
    bom = tmp_path / "pair.cdx.json"
    code, _, _ = run_cli(capsys, "audit", "bom", "pair", "--mirror", m, "--trust", trust,
                         "--out", str(bom))
    assert code == 0
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(bom.read_text()) is None
    page = tmp_path / "pair.html"
    code, _, _ = run_cli(capsys, "audit", "html", "pair", "--mirror", m, "--out", str(page))
    assert code == 3  # written, but without a policy the signatures are unverified
    assert "Chain of custody BROKEN" in page.read_text()
