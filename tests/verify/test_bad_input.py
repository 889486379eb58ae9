"""Bad input ends in one line with the right exit code, never an internal error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle.mirror import versions
from tests.lib.bundles import Signed
from tests.lib.cli import run_cli


def test_mirror_ls_with_a_non_object_spec(signed: Signed,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = signed.mirror.bundle_dir("pair") / "bundle.json"
    doc = json.loads(path.read_text())
    doc["spec"] = [1, 2]
    path.write_text(json.dumps(doc))
    code, _, err = run_cli(capsys, "mirror", "ls", "--mirror", str(signed.mirror.root))
    assert code == 3 and "spec and artifacts must be" in err, err
    assert _one_line(err), err


def _one_line(err: str) -> bool:
    """One error line (plus its hint), never a traceback or an internal error."""
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("  hint")]
    return len(lines) == 1 and "Traceback" not in err and "internal" not in err


def _key_file(signed: Signed) -> str:
    from specbundle import attest

    key = signed.tmp / "key.pem"
    if not key.exists():
        attest.write_private_key(signed.key, key)
    return str(key)


def _garble_middle(path: Path) -> bytes:
    path.chmod(0o644)
    lines = path.read_bytes().splitlines()
    assert len(lines) >= 2
    path.write_bytes(b"\n".join([lines[0], b"{garbage", *lines[1:]]) + b"\n")
    return path.read_bytes()


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"payload": 5}',
                                  b'{"payload": "eyJ4IjogMX0=", "payloadType": '
                                  b'"application/vnd.in-toto+json", "signatures": '
                                  b'[{"keyid": "a", "sig": "AAAA"}]}'])
def test_sign_refuses_to_chain_to_a_corrupt_current_manifest(
        signed: Signed, body: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    path = signed.mirror.bundle_dir("pair") / versions.manifest_rel(1)
    path.chmod(0o644)
    path.write_bytes(body)
    code, _, err = run_cli(capsys, "sign", "pair", "--mirror", str(signed.mirror.root),
                           "--key", _key_file(signed))
    assert code == 3, err
    assert "is corrupt" in err and _one_line(err), err
    assert versions.current_version(signed.mirror, "pair") == 1


@pytest.mark.parametrize("log", ["attestations", "events"])
def test_sign_never_extends_a_log_garbled_in_the_middle(
        signed: Signed, log: str, capsys: pytest.CaptureFixture[str]) -> None:
    bdir = signed.mirror.bundle_dir("pair")
    path = bdir / "attestations.jsonl" if log == "attestations" else signed.mirror.events_path
    others = [bdir / "attestations.jsonl", signed.mirror.events_path]
    before = {p: p.read_bytes() for p in others}
    garbled = _garble_middle(path)
    code, _, err = run_cli(capsys, "sign", "pair", "--mirror", str(signed.mirror.root),
                           "--key", _key_file(signed))
    # fail closed before anything is committed: no new version, no line after the damage
    assert code == 3, err
    assert "line 2" in err and _one_line(err), err
    assert path.read_bytes() == garbled
    assert all(p.read_bytes() == before[p] for p in others if p != path)
    assert versions.current_version(signed.mirror, "pair") == 1
    assert not (bdir / versions.version_rel(2)).exists()


@pytest.mark.parametrize("what", ["model.sig", "scan report", "attestation line"])
def test_export_refuses_what_import_would_refuse(signed: Signed, what: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bdir = signed.mirror.bundle_dir("pair")
    if what == "model.sig":
        path = bdir / versions.version_rel(1, versions.model_sig_rel("draft"))
    elif what == "scan report":
        path = bdir / versions.version_rel(1, versions.SCAN_REPORT)
    if what == "attestation line":
        _garble_middle(bdir / "attestations.jsonl")
    else:
        path.chmod(0o644)
        path.write_bytes(b"{garbage\n")
    out = signed.tmp / "set"
    code, _, err = run_cli(capsys, "export", "pair", "--to", str(out), "--mirror",
                           str(signed.mirror.root), "--key", _key_file(signed))
    assert code == 3 and _one_line(err), err
    assert not out.exists() or not any(out.iterdir())


def test_verify_never_extends_an_event_log_corrupt_in_the_middle(
        signed: Signed, capsys: pytest.CaptureFixture[str]) -> None:
    log = signed.mirror.events_path
    before = _garble_middle(log)
    code, _, err = run_cli(capsys, "verify", "pair", "--mirror", str(signed.mirror.root),
                           "--trust", str(signed.policy_path))
    # fail closed: a garbled line could hide a revocation, so nothing verifies against this
    # log (the revocation chain is read strictly), and nothing is appended to it
    assert code == 3, err
    assert "line 2 is not a well-formed event" in err
    assert log.read_bytes() == before


def test_an_unverified_render_refuses_a_missing_weight_object(
        signed: Signed, capsys: pytest.CaptureFixture[str]) -> None:
    weights = next(f for f in signed.record.target.files if f.path.endswith(".safetensors"))
    signed.mirror.object_path(weights.sha256).unlink()
    code, _, err = run_cli(capsys, "render", "pair", "--mirror", str(signed.mirror.root),
                           "--unsigned", "--engine", "vllm", "--target", "shell")
    assert code == 3, err
    assert "missing from the mirror's objects" in err and weights.path in err
