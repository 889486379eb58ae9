"""Trust-policy certificate roles: anchors, identities, CRLs beside the policy, scope."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from specbundle.attest import generate_key
from specbundle.audit.collect import artifact_audit
from specbundle.errors import SpecError
from specbundle.mirror import Mirror
from specbundle.sign import sign_bundle
from specbundle.verify import BundleVerificationFailed, load_policy, parse_policy, verify_bundle
from tests.lib.bundles import pulled_bundle, write_scan_report
from tests.lib.cli import run_cli
from tests.lib.pki import Ca, pem, write_pem
from tests.lib.policy import key_files, policy_doc, write_policy

KEY = generate_key("ecdsa-p256")
ROOT = Ca.root()
SUB = ROOT.sub_ca()
LEAF = SUB.leaf(KEY)


def _doc(**anchor: object) -> dict:
    doc = policy_doc({"release": KEY}, model_signers=["corp"])
    entry = {"name": "corp", "certificates": "root.pem",
             "identities": [{"san": "release@example.com"}], "repos": ["org/*"],
             "bundles": ["*"]}
    entry.update(anchor)
    doc["anchors"] = [entry]
    return doc


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Mirror, Path]:
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    pulled_bundle(tmp_path, mirror, "pair")
    write_scan_report(mirror, "pair")
    sign_bundle(mirror, "pair", [KEY.with_chain((LEAF, SUB.cert))])
    write_pem(tmp_path / "root.pem", ROOT.cert)
    return mirror, tmp_path


def _verify(mirror: Mirror, tmp: Path, doc: dict) -> None:
    verify_bundle(mirror, "pair", load_policy(write_policy(tmp / "trust.yaml", doc)))


def test_certificate_signed_bundle_verifies_against_the_anchor(signed: tuple[Mirror, Path],
                                                               capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    mirror, tmp = signed
    _verify(mirror, tmp, _doc())
    priv, _ = key_files(tmp, KEY, "release")  # and again through the CLI, as a new version
    code, _, err = run_cli(capsys, "sign", "pair", "--mirror", str(mirror.root), "--key",
                           str(priv), "--signing-cert", str(write_pem(tmp / "leaf.pem", LEAF)),
                           "--cert-chain", str(write_pem(tmp / "sub.pem", SUB.cert)))
    assert code == 0, err
    code, out, _ = run_cli(capsys, "verify", "pair", "--trust", str(tmp / "trust.yaml"),
                           "--mirror", str(mirror.root), "--json")
    assert code == 0 and json.loads(out)["model_signers"]["target"] == KEY.fingerprint
    # audit shows the same link: the model.sig opened through the anchor role
    rec = mirror.load_bundle("pair")
    audit = artifact_audit(mirror, rec, rec.target, load_policy(tmp / "trust.yaml"),
                           rehash=False)
    assert audit.model_sig.status == "ok", audit.model_sig
    assert "release@example.com" in audit.model_sig.detail and "corp" in audit.model_sig.detail


@pytest.mark.parametrize(("change", "why"), [
    ({"identities": [{"san": "someone-else@example.com"}]}, "not an identity"),
    ({"repos": ["other/*"]}, "no policy key may sign"),
    ({"crls": ["sub.crl"]}, "revoked"),
    ({"certificates": "other.pem"}, "does not validate"),
])
def test_anchor_tamper(signed: tuple[Mirror, Path], change: dict, why: str) -> None:
    mirror, tmp = signed
    (tmp / "sub.crl").write_bytes(SUB.crl([LEAF.serial_number]))
    write_pem(tmp / "other.pem", Ca.root("Other Root").cert)
    with pytest.raises(BundleVerificationFailed, match=why):
        _verify(mirror, tmp, _doc(**change))


def test_key_signed_bundle_is_not_accepted_by_an_anchor_only_policy(tmp_path: Path) -> None:
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    pulled_bundle(tmp_path, mirror, "pair")
    write_scan_report(mirror, "pair")
    sign_bundle(mirror, "pair", [KEY])  # key method: no chain to validate
    write_pem(tmp_path / "root.pem", ROOT.cert)
    with pytest.raises(BundleVerificationFailed, match="model.sig"):
        _verify(mirror, tmp_path, _doc())


@pytest.mark.parametrize(("change", "field"), [
    ({"certificates": "missing.pem"}, "anchors[corp].certificates: cannot read"),
    ({"certificates": "../root.pem"}, "anchors[corp].certificates"),
    ({"certificates": "leaf.pem"}, "is not a CA"),
    ({"identities": []}, "identities"),
    ({"identities": [{}]}, "anchors[corp].identities[0]: give subject"),
    ({"name": "release"}, "already used"),
    ({"crls": ["forged.crl"]}, "not signed by that CA"),
    ({"repos": []}, "both repos and bundles"),
    ({"colour": "blue"}, "anchors.0.colour"),
])
def test_malformed_anchor_names_the_field(tmp_path: Path, change: dict, field: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    write_pem(tmp_path / "root.pem", ROOT.cert)
    write_pem(tmp_path / "leaf.pem", LEAF)
    (tmp_path / "forged.crl").write_bytes(Ca(ROOT.cert, SUB.key).crl([]))
    path = write_policy(tmp_path / "trust.yaml", _doc(**change))
    with pytest.raises(SpecError) as err:
        load_policy(path)
    assert field in str(err.value) + str(err.value.diagnostics())
    mirror = Mirror.open(tmp_path / "m", create=True)
    code, _, err_text = run_cli(capsys, "verify", "pair", "--trust", str(path), "--mirror",
                                str(mirror.root))
    assert code == 2 and "anchors" in err_text


def test_contradictions_and_inline_pem(tmp_path: Path) -> None:
    doc = _doc(certificates=pem(ROOT.cert).decode())
    doc["require"] = {"scan-result": {"threshold": 1, "signers": ["corp"]}}
    with pytest.raises(SpecError, match="certificate role"):
        parse_policy(yaml.safe_dump(doc).encode())
    doc = _doc(certificates=pem(ROOT.cert).decode())
    assert parse_policy(yaml.safe_dump(doc).encode()).model_anchors[0].name == "corp"
    doc["model_signers"] = []
    with pytest.raises(SpecError, match="model_signers"):
        parse_policy(yaml.safe_dump(doc).encode())
    with pytest.raises(SpecError, match="not read from a file"):
        parse_policy(yaml.safe_dump(_doc()).encode())
    # a policy naming no anchors keeps its meaning (and its digest): every key signs model.sig
    raw = yaml.safe_dump(policy_doc({"release": KEY})).encode()
    old = parse_policy(raw)
    assert old.anchors == () and old.model_signers == {KEY.fingerprint}
    assert old.digest == hashlib.sha256(raw).hexdigest()


def test_policy_digest_covers_the_files_beside_it(tmp_path: Path) -> None:
    write_pem(tmp_path / "root.pem", ROOT.cert)
    (tmp_path / "sub.crl").write_bytes(SUB.crl([]))
    path = write_policy(tmp_path / "trust.yaml", _doc(crls=["sub.crl"]))
    first = load_policy(path).digest
    assert first != hashlib.sha256(path.read_bytes()).hexdigest()
    (tmp_path / "sub.crl").write_bytes(SUB.crl([LEAF.serial_number]))  # a new CRL arrives
    assert load_policy(path).digest != first
