"""The OMS reference project's published signatures verify here, offline (certificate, Sigstore).

Data: tests/sign/data/oms-reference (see its README). Sigstore tests need the ``sigstore``
package and no network: the trusted root is pinned or embedded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specbundle.attest import ChainTrust, IdentityRule, UntrustedCertificate, load_certificates
from specbundle.attest.sigstore_oms import SigstoreTrust, is_sigstore_signed
from specbundle.errors import VerificationError
from specbundle.verify import ModelVerificationFailed, verify_model
from tests.lib.cli import run_cli

DATA = Path(__file__).parent / "data" / "oms-reference"
IDENTITY, ISSUER = "stefanb@us.ibm.com", "https://sigstore.verify.ibm.com/oauth2"


def _copy(tmp_path: Path, name: str) -> Path:
    model = tmp_path / name
    shutil.copytree(DATA / name, model)
    return model


def test_reference_certificate_signature(tmp_path: Path) -> None:
    model = _copy(tmp_path, "v1.1.0-certificate")
    anchors = load_certificates([DATA / "ca-cert.pem"])
    res = verify_model(model, ChainTrust(anchors), ignore_paths=[model / "ignore-me"])
    assert res.identity is not None and res.identity.anchor == "CN=root-ca"
    with pytest.raises(UntrustedCertificate, match="not an identity"):
        verify_model(model, ChainTrust(anchors, identities=(IdentityRule(subject="CN=x"),)),
                     ignore_paths=[model / "ignore-me"])
    (model / "signme-1").write_bytes(b"changed")
    with pytest.raises(ModelVerificationFailed):
        verify_model(model, ChainTrust(anchors), ignore_paths=[model / "ignore-me"])


sigstore = pytest.importorskip("sigstore", reason="sigstore is not installed")


@pytest.mark.parametrize("root", [None, DATA / "public-good-trusted_root.json"])
def test_reference_sigstore_signature_offline(tmp_path: Path, root: Path | None) -> None:
    model = _copy(tmp_path, "v1.1.0-sigstore")
    assert is_sigstore_signed((model / "model.sig").read_bytes())
    res = verify_model(model, SigstoreTrust(IDENTITY, ISSUER, root),
                       ignore_paths=[model / "ignore-me"])
    assert res.identity is not None and res.identity.to_json()["identity"] == IDENTITY
    assert res.signer == f"sigstore:{IDENTITY}"


@pytest.mark.parametrize(("trust", "why"), [
    (SigstoreTrust("mallory@us.ibm.com", ISSUER), "SANs do not match"),
    (SigstoreTrust(IDENTITY, "https://accounts.google.com"), "issuer|OIDC"),
    (SigstoreTrust(IDENTITY, ISSUER, DATA / "staging-trusted_root.json"), "does not verify"),
])
def test_sigstore_tamper(tmp_path: Path, trust: SigstoreTrust, why: str) -> None:
    model = _copy(tmp_path, "v1.1.0-sigstore")
    with pytest.raises(VerificationError, match=why):
        verify_model(model, trust, ignore_paths=[model / "ignore-me"])


def test_sigstore_bundle_of_another_artifact(tmp_path: Path) -> None:
    model = _copy(tmp_path, "v1.1.0-sigstore")
    trust = SigstoreTrust(IDENTITY, ISSUER)
    # the genuine bundle over other files: the signature holds, the files do not match
    (model / "signme-2").write_bytes(b"other model")
    with pytest.raises(ModelVerificationFailed, match="signme-2"):
        verify_model(model, trust, ignore_paths=[model / "ignore-me"])
    # a bundle whose signed statement was swapped for another artifact's
    sig = json.loads((DATA / "v1.1.0-sigstore" / "model.sig").read_bytes())
    other = json.loads((DATA / "v1.1.0-certificate" / "model.sig").read_bytes())
    sig["dsseEnvelope"]["payload"] = other["dsseEnvelope"]["payload"]
    (model / "model.sig").write_text(json.dumps(sig))
    with pytest.raises(VerificationError, match="does not verify"):
        verify_model(model, trust, ignore_paths=[model / "ignore-me"])


def test_cli_sigstore_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _copy(tmp_path, "v1.1.0-sigstore")
    args = ["verify-model", str(model), "--ignore-paths", str(model / "ignore-me")]
    code, out, err = run_cli(capsys, *args, "--identity", IDENTITY, "--identity_provider",
                             ISSUER, "--trusted-root",
                             str(DATA / "public-good-trusted_root.json"), "--json")
    assert code == 0, err
    assert json.loads(out)["identity"]["issuer"] == ISSUER
    assert run_cli(capsys, *args, "--identity", "eve@example.com", "--identity-provider",
                   ISSUER)[0] == 3
    assert run_cli(capsys, *args, "--identity", IDENTITY)[0] == 2  # no issuer
