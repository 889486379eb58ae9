"""OMS certificate method: interop with the reference tool both ways, and the tamper matrix."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID

from specbundle.attest import (
    ChainTrust,
    IdentityRule,
    SigningKey,
    UntrustedCertificate,
    generate_key,
    model_sig_chain,
    open_model_sig_chain,
)
from specbundle.attest.certs import CLOCK_SKEW, parse_crls
from specbundle.errors import UsageError, VerificationError
from specbundle.sign import sign_model
from specbundle.verify import ModelVerificationFailed, verify_model
from tests.lib.cli import run_cli
from tests.lib.models import make_model
from tests.lib.pki import DAY, NOW, Ca, write_pem
from tests.lib.policy import key_files

ms = pytest.importorskip("model_signing", reason="model-signing (test extra) is not installed")


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, object]:
    root = Ca.root()
    sub = root.sub_ca()
    key = generate_key("ecdsa-p256")
    leaf = sub.leaf(key)
    priv, _ = key_files(tmp_path, key, "signer")
    return {"root": root, "sub": sub, "key": key, "leaf": leaf, "priv": priv,
            "leaf_pem": write_pem(tmp_path / "leaf.pem", leaf),
            "sub_pem": write_pem(tmp_path / "sub.pem", sub.cert),
            "root_pem": write_pem(tmp_path / "root.pem", root.cert)}


def _signed(tmp_path: Path, key: SigningKey, *chain: object, name: str = "model") -> Path:
    model = make_model(tmp_path / name)
    sign_model(model, key.with_chain(tuple(chain)))  # type: ignore[arg-type]
    return model


def test_reference_verifies_our_certificate_signature(tmp_path: Path, pki: dict) -> None:
    model = _signed(tmp_path, pki["key"], pki["leaf"], pki["sub"].cert)
    bundle = json.loads((model / "model.sig").read_bytes())
    certs = bundle["verificationMaterial"]["x509CertificateChain"]["certificates"]
    assert len(certs) == 2 and "publicKey" not in bundle["verificationMaterial"]
    hashing = ms.hashing.Config().set_ignored_paths(paths=["model.sig"])
    (ms.verifying.Config().use_certificate_verifier(certificate_chain=[pki["root_pem"]])
     .set_hashing_config(hashing).verify(model, model / "model.sig"))
    other = Ca.root("Other Root")
    with pytest.raises(Exception):  # noqa: B017 - the reference raises OpenSSL errors
        (ms.verifying.Config().use_certificate_verifier(
            certificate_chain=[write_pem(tmp_path / "o.pem", other.cert)])
         .set_hashing_config(hashing).verify(model, model / "model.sig"))


def test_we_verify_the_reference_certificate_signature(tmp_path: Path, pki: dict) -> None:
    model = make_model(tmp_path / "model")
    hashing = ms.hashing.Config().set_ignored_paths(paths=["model.sig"])
    (ms.signing.Config().use_certificate_signer(
        private_key=pki["priv"], signing_certificate=pki["leaf_pem"],
        certificate_chain=[pki["sub_pem"]])
     .set_hashing_config(hashing).sign(model, model / "model.sig"))
    trust = ChainTrust((pki["root"].cert,),
                       identities=(IdentityRule(san="release@example.com"),))
    res = verify_model(model, trust)
    assert res.identity is not None and res.identity.name == "release@example.com"
    assert res.signer == pki["key"].fingerprint
    assert res.identity.anchor == pki["root"].cert.subject.rfc4514_string()
    (model / "config.json").write_text("{}")
    with pytest.raises(ModelVerificationFailed):
        verify_model(model, trust)


def _expect(tmp_path: Path, trust: ChainTrust, key: SigningKey, *chain: object,
            match: str) -> None:
    model = _signed(tmp_path, key, *chain, name=f"m{len(list(tmp_path.iterdir()))}")
    with pytest.raises(UntrustedCertificate, match=match):
        verify_model(model, trust)


def test_tamper_matrix(tmp_path: Path, pki: dict) -> None:
    root, sub, key = pki["root"], pki["sub"], pki["key"]
    trust = ChainTrust((root.cert,))
    assert verify_model(_signed(tmp_path, key, pki["leaf"], sub.cert, name="ok"), trust)
    # wrong chain: the intermediate of another CA (and a missing one)
    other_sub = root.sub_ca("Other Signing CA")
    _expect(tmp_path, trust, key, pki["leaf"], other_sub.cert, match="does not validate")
    _expect(tmp_path, trust, key, pki["leaf"], match="does not validate")
    # expired leaf (beyond the skew), and one that expired within the skew still passes
    _expect(tmp_path, trust, key, sub.leaf(key, start=NOW - 9 * DAY, end=NOW - DAY),
            sub.cert, match="expired")
    # now, not the module's NOW: a long test run must not age this case past the skew
    skew = sub.leaf(key, start=NOW - 9 * DAY, end=dt.datetime.now(dt.UTC) - CLOCK_SKEW / 2)
    assert verify_model(_signed(tmp_path, key, skew, sub.cert, name="skew"), trust)
    _expect(tmp_path, trust, key, sub.leaf(key, start=NOW + DAY), sub.cert,
            match="valid only from")
    # revoked by the issuer's CRL; a CRL signed by someone else is refused too
    crl = parse_crls(sub.crl([pki["leaf"].serial_number]), source="crl")
    _expect(tmp_path, ChainTrust((root.cert,), crl), key, pki["leaf"], sub.cert,
            match="revoked")
    clean = parse_crls(sub.crl([12345]), source="crl")
    assert verify_model(_signed(tmp_path, key, pki["leaf"], sub.cert, name="crl-ok"),
                        ChainTrust((root.cert,), clean))
    forged = Ca(sub.cert, root.key)  # the sub CA's name, the root's key
    _expect(tmp_path, ChainTrust((root.cert,), parse_crls(forged.crl([]), source="c")), key,
            pki["leaf"], sub.cert, match="not signed by that issuer")
    # wrong EKU: TLS client auth, or none at all
    _expect(tmp_path, trust, key, sub.leaf(key, eku=ExtendedKeyUsageOID.CLIENT_AUTH), sub.cert,
            match="code-signing")
    _expect(tmp_path, trust, key, sub.leaf(key, eku=None), sub.cert, match="code-signing")
    # wrong identity
    ident = ChainTrust((root.cert,), identities=(IdentityRule(san="*@example.com",
                                                              subject="*CN=release signer*"),))
    _expect(tmp_path, ident, key, sub.leaf(key, email="intern@example.org"), sub.cert,
            match="not an identity")
    _expect(tmp_path, ident, key, sub.leaf(key, cn="intern"), sub.cert, match="not an identity")
    # untrusted anchor: a chain that ends in a root nobody trusts, even one that copies names
    rogue = Ca.root()
    rogue_sub = rogue.sub_ca()
    _expect(tmp_path, trust, key, rogue_sub.leaf(key), rogue_sub.cert, rogue.cert,
            match="does not validate")


def test_signature_by_another_key_than_the_certificate(tmp_path: Path, pki: dict) -> None:
    with pytest.raises(UsageError, match="certifies key"):
        generate_key().with_chain((pki["leaf"],))
    model = _signed(tmp_path, pki["key"], pki["leaf"], pki["sub"].cert)
    sig = json.loads((model / "model.sig").read_bytes())
    # swap in a chain for another key: the signature no longer verifies with its leaf
    other = generate_key()
    model2 = _signed(tmp_path, other, pki["sub"].leaf(other), pki["sub"].cert, name="m2")
    sig2 = json.loads((model2 / "model.sig").read_bytes())
    sig["verificationMaterial"] = sig2["verificationMaterial"]
    data = json.dumps(sig).encode()
    assert len(model_sig_chain(data)) == 2
    with pytest.raises(VerificationError, match="does not verify"):
        open_model_sig_chain(data, ChainTrust((pki["root"].cert,)))


def test_cli_sign_and_verify_with_reference_option_names(tmp_path: Path, pki: dict,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    model = make_model(tmp_path / "model")
    code, out, _ = run_cli(capsys, "sign-model", str(model), "--key", str(pki["priv"]),
                           "--signing-cert", str(pki["leaf_pem"]), "--cert-chain",
                           str(pki["sub_pem"]), "--json")
    assert code == 0 and json.loads(out)["method"] == "certificate"
    code, out, _ = run_cli(capsys, "verify-model", str(model), "--cert-chain",
                           str(pki["root_pem"]), "--json")
    got = json.loads(out)
    assert code == 0 and got["verified"] and got["identity"]["identity"] == "release@example.com"
    crl = tmp_path / "sub.crl"
    crl.write_bytes(pki["sub"].crl([pki["leaf"].serial_number]))
    code, _, err = run_cli(capsys, "verify-model", str(model), "--cert-chain",
                           str(pki["root_pem"]), "--crl", str(crl))
    assert code == 3 and "revoked" in err
    other = write_pem(tmp_path / "other.pem", Ca.root().cert)
    assert run_cli(capsys, "verify-model", str(model), "--cert-chain", str(other))[0] == 3
    assert run_cli(capsys, "verify-model", str(model))[0] == 2  # neither a key nor anchors
    wrong = write_pem(tmp_path / "wrong-leaf.pem", pki["sub"].leaf(generate_key()))
    code, _, err = run_cli(capsys, "sign-model", str(model), "--key", str(pki["priv"]),
                           "--signing-cert", str(wrong))
    assert code == 2 and "certifies key" in err
