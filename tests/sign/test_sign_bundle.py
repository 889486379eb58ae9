"""specbundle sign on a pulled bundle: model.sig per artifact, attestations, events."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.cli import main
from specbundle.errors import ScanBlocked, UsageError, VerificationError
from specbundle.mirror import Mirror
from specbundle.sign import sign_bundle
from tests.lib.bundles import pulled_bundle, write_scan_report

ms = pytest.importorskip("model_signing", reason="model-signing (test extra) is not installed")


@pytest.fixture
def mirror(tmp_path: Path) -> Mirror:
    return Mirror.open(tmp_path / "mirror", create=True)


def _statements(mirror: Mirror, name: str, key: attest.SigningKey) -> list[attest.Statement]:
    return [attest.check_statement(e, [key.public]).statement
            for e in attest.read_attestations(mirror, name)]


def test_sign_bundle_writes_oms_signatures_the_reference_accepts(tmp_path: Path,
                                                                 mirror: Mirror) -> None:
    rec = pulled_bundle(tmp_path, mirror)
    write_scan_report(mirror, rec.name)
    key = attest.generate_key("ecdsa-p384")
    attest.write_public_key(key.public, tmp_path / "k.pub")
    res = sign_bundle(mirror, rec.name, [key])
    assert set(res.signatures) == {"target", "draft"}
    for art in rec.artifacts:
        sig = res.signatures[art.role]
        snap = mirror.snapshot_dir(art.repo, art.commit)
        assert sig == (mirror.bundle_dir(rec.name) / "versions" / "000001" / "sign" / art.role
                       / "model.sig")
        assert not sig.is_relative_to(snap)  # never inside the signed file set
        hashing = ms.hashing.Config().set_allow_symlinks(True)
        manifest = (ms.verifying.Config().use_elliptic_key_verifier(public_key=tmp_path / "k.pub")
                    .set_hashing_config(hashing).verify(snap, sig))
        assert manifest is None  # the reference returns nothing and raises on mismatch
        root = attest.open_model_sig(sig.read_bytes(), key.public).root_digest
        assert root == res.roots[art.role]


def test_attestations_carry_provenance_scan_and_pair_binding(tmp_path: Path,
                                                             mirror: Mirror) -> None:
    rec = pulled_bundle(tmp_path, mirror)
    write_scan_report(mirror, rec.name)
    key = attest.generate_key("ed25519")
    first = attest.generate_key("ecdsa-p256")
    res = sign_bundle(mirror, rec.name, [first, key])
    sts = _statements(mirror, rec.name, key)
    assert [s.predicate_type for s in sts] == [
        attest.SLSA_PROVENANCE_V1, attest.SLSA_PROVENANCE_V1, attest.SCAN_RESULT,
        attest.PAIR_BINDING_V1]
    envs = attest.read_attestations(mirror, rec.name)
    assert all(len(e.signatures) == 2 for e in envs)  # every key signs every statement
    prov = sts[0].predicate
    assert prov["buildDefinition"]["externalParameters"]["repo"] == "org/target"
    deps = prov["buildDefinition"]["resolvedDependencies"]
    assert deps[0]["digest"] == {"specbundleContentCommit": rec.target.commit}
    assert {d["name"]: d["digest"]["sha256"] for d in deps[1:]} == {
        f.path: f.sha256 for f in rec.target.files}
    assert sts[0].digests("sha256") == {res.roots["target"]}
    scan = sts[2].predicate
    report = mirror.read_bundle_file(rec.name, "scan/report.json")
    assert report is not None
    assert scan["result"] == "PASSED"
    assert scan["configuration"][0]["digest"]["sha256"] == attest_sha(report)
    pair = sts[3].predicate
    assert pair["target"]["rootDigest"] == res.roots["target"]
    assert pair["draft"]["rootDigest"] == res.roots["draft"]
    assert pair["method"] == "draft_model" and pair["speculative"]["temperature"] == "0.0"
    assert pair["tokenizer"]["digest"] == rec.target.file("tokenizer.json").sha256  # type: ignore[union-attr]
    assert pair["tokenizer"]["draftMatchesTarget"] is True
    ev = [e for e in mirror.read_events() if e["type"] == "sign"]
    assert ev and ev[-1]["data"]["roots"] == res.roots


def attest_sha(data: bytes) -> str:
    from specbundle.digest import sha256_bytes

    return sha256_bytes(data)


def test_unscanned_is_refused_unless_allowed_and_then_recorded_as_failed(
        tmp_path: Path, mirror: Mirror) -> None:
    rec = pulled_bundle(tmp_path, mirror)
    key = attest.generate_key()
    with pytest.raises(UsageError, match="no scan report"):
        sign_bundle(mirror, rec.name, [key])
    assert not (mirror.bundle_dir(rec.name) / "versions").exists()
    res = sign_bundle(mirror, rec.name, [key], allow_unscanned=True)
    assert not res.scanned
    scan = _statements(mirror, rec.name, key)[2].predicate
    assert scan["result"] == "FAILED" and scan["specbundle_unscanned"] is True


def test_blocking_scan_is_never_signed(tmp_path: Path, mirror: Mirror) -> None:
    rec = pulled_bundle(tmp_path, mirror)
    write_scan_report(mirror, rec.name, blocked=True)
    with pytest.raises(ScanBlocked):
        sign_bundle(mirror, rec.name, [attest.generate_key()], allow_unscanned=True)


def test_a_stale_scan_report_is_not_attested(tmp_path: Path, mirror: Mirror) -> None:
    rec = pulled_bundle(tmp_path, mirror)
    write_scan_report(mirror, rec.name)
    other = pulled_bundle(tmp_path, mirror, "other", seed=5)
    report = mirror.read_bundle_file(rec.name, "scan/report.json")
    assert report is not None
    mirror.write_bundle_file(other.name, "scan/report.json", report)  # copied from elsewhere
    with pytest.raises(UsageError, match="stale scan"):
        sign_bundle(mirror, other.name, [attest.generate_key()])


def test_rehash_catches_a_corrupted_object(tmp_path: Path, mirror: Mirror) -> None:
    rec = pulled_bundle(tmp_path, mirror)
    write_scan_report(mirror, rec.name)
    obj = mirror.object_path(rec.draft.files[0].sha256)  # type: ignore[union-attr]
    obj.chmod(0o644)
    data = bytearray(obj.read_bytes())
    data[0] ^= 1
    obj.write_bytes(bytes(data))
    sign_bundle(mirror, rec.name, [attest.generate_key()])  # recorded digests: not re-read
    with pytest.raises(VerificationError, match="mirror objects changed"):
        sign_bundle(mirror, rec.name, [attest.generate_key()], rehash=True)


def test_cli_keys_generate_and_sign(tmp_path: Path, mirror: Mirror,
                                    capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rec = pulled_bundle(tmp_path, mirror)
    write_scan_report(mirror, rec.name)
    monkeypatch.setenv("SPECBUNDLE_KEY_PASSPHRASE", "pw")
    with pytest.raises(SystemExit) as ex:
        main(["keys", "generate", "--out", str(tmp_path / "k.pem"), "--type", "ecdsa-p384",
              "--encrypt", "--json"])
    assert ex.value.code == 0
    info = json.loads(capsys.readouterr().out)
    assert stat.S_IMODE((tmp_path / "k.pem").stat().st_mode) == 0o600
    assert info["encrypted"] and info["algorithm"] == "ecdsa-p384"
    assert attest.load_public_key(tmp_path / "k.pub").fingerprint == info["fingerprint"]
    with pytest.raises(SystemExit) as ex:
        main(["sign", rec.name, "--mirror", str(mirror.root), "--key", str(tmp_path / "k.pem"),
              "--json"])
    assert ex.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["signers"] == [info["fingerprint"]] and out["attestation_lines"] == [1, 2, 3, 4]
    # the private key never lands in the mirror
    pem = (tmp_path / "k.pem").read_bytes()
    assert not any(pem in p.read_bytes() for p in mirror.root.rglob("*")
                   if p.is_file() and not p.is_symlink())
    monkeypatch.delenv("SPECBUNDLE_KEY_PASSPHRASE")
    with pytest.raises(SystemExit) as ex:
        main(["sign", rec.name, "--mirror", str(mirror.root), "--key", str(tmp_path / "k.pem")])
    assert ex.value.code == 6  # encrypted key, no passphrase
