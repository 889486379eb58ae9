"""Signing with a key in a real SoftHSM2 token: the private key never leaves it."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from specbundle.attest import ChainTrust, write_public_key
from specbundle.attest.pkcs11 import MODULE_ENV, PIN_ENV, load_token_key, parse_pkcs11_uri
from specbundle.errors import EnvironmentProblem, UsageError
from specbundle.mirror import Mirror
from specbundle.verify import load_policy, verify_bundle, verify_model
from tests.lib.bundles import pulled_bundle, write_scan_report
from tests.lib.cli import run_cli
from tests.lib.hsm import HAVE_SOFTHSM, MODULE, PIN, init_token
from tests.lib.models import make_model
from tests.lib.pki import Ca, write_pem
from tests.lib.policy import policy_doc, write_policy

PyKCS11 = pytest.importorskip("PyKCS11", reason="PyKCS11 (pkcs11 extra) is not installed")
pytestmark = pytest.mark.skipif(not HAVE_SOFTHSM,
                                reason="softhsm2 and opensc (Debian) are not installed")


@dataclass
class Token:
    uri: str
    dir: Path


@pytest.fixture
def token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Token]:
    """A fresh SoftHSM2 token with one P-256 key pair generated inside it."""
    uri, env = init_token(tmp_path / "hsm")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv(MODULE_ENV, raising=False)
    yield Token(uri, tmp_path / "hsm")
    # the module keeps its login (and its configuration) while any session lives in this
    # process; collect them so the next test's token starts logged out
    gc.collect()


def _no_private_key_outside(root: Path, token_dir: Path) -> None:
    for f in root.rglob("*"):
        if f.is_file() and token_dir not in f.parents:
            assert b"PRIVATE KEY" not in f.read_bytes(), f


def test_uri_rules() -> None:
    assert parse_pkcs11_uri("pkcs11:token=a%20b;id=%01%02").path == {"token": b"a b",
                                                                     "id": b"\x01\x02"}
    for bad, why in [("pkcs11:token=a;object=k?pin-value=1234", "must not be on the command"),
                     ("pkcs11:token=a", "names no key"), ("pkcs11:tokn=a;object=k", "unknown"),
                     ("pkcs11:object=k;object=j", "twice"), ("pkcs11:object=k;type=public",
                                                             "type=private")]:
        with pytest.raises(UsageError, match=why):
            parse_pkcs11_uri(bad)


def test_key_stays_in_the_token(tmp_path: Path, token: Token) -> None:
    key = load_token_key(token.uri)
    assert key.in_token and "token" in repr(key)
    with pytest.raises(UsageError, match="cannot be exported"):
        key.private_pem()
    # the token itself says the key is sensitive and was never extractable
    lib = PyKCS11.PyKCS11Lib()
    lib.load(str(MODULE))
    session = lib.openSession(lib.getSlotList(tokenPresent=True)[0])  # logged in by the key
    (priv,) = session.findObjects([(PyKCS11.CKA_CLASS, PyKCS11.CKO_PRIVATE_KEY)])
    attrs = session.getAttributeValue(priv, [PyKCS11.CKA_SENSITIVE, PyKCS11.CKA_EXTRACTABLE,
                                             PyKCS11.CKA_NEVER_EXTRACTABLE])
    assert attrs == [True, False, True]
    assert not session.getAttributeValue(priv, [PyKCS11.CKA_VALUE], allAsBinary=True)[0]
    assert key.public.verify(key.sign(b"payload"), b"payload")
    # a second key handle of the same token in this process (already logged in) works too
    assert load_token_key(token.uri.replace("object=signing-key", "id=%01")).fingerprint \
        == key.fingerprint
    _no_private_key_outside(tmp_path, token.dir)


def test_sign_model_and_bundle_with_a_token_key(tmp_path: Path, token: Token,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    key = load_token_key(token.uri)
    pub = tmp_path / "release.pub"
    write_public_key(key.public, pub)
    model = make_model(tmp_path / "model")
    code, out, _ = run_cli(capsys, "sign-model", str(model), "--key", token.uri, "--json")
    assert code == 0 and json.loads(out)["signer"] == key.fingerprint
    assert run_cli(capsys, "verify-model", str(model), "--public-key", str(pub))[0] == 0
    ms = pytest.importorskip("model_signing")
    (ms.verifying.Config().use_elliptic_key_verifier(public_key=pub)
     .set_hashing_config(ms.hashing.Config().set_ignored_paths(paths=["model.sig"]))
     .verify(model, model / "model.sig"))
    # the token key with a certificate: the certificate method, end to end
    root = Ca.root()
    leaf = write_pem(tmp_path / "leaf.pem", root.leaf(key))
    code, out, _ = run_cli(capsys, "sign-model", str(model), "--key", token.uri,
                           "--signing-cert", str(leaf), "--json")
    assert code == 0 and json.loads(out)["method"] == "certificate"
    assert verify_model(model, ChainTrust((root.cert,))).identity is not None
    # a whole bundle: model.sig and every attestation signed in the token, then verified
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    rec = pulled_bundle(tmp_path, mirror, "pair")
    write_scan_report(mirror, "pair")
    code, _, err = run_cli(capsys, "sign", "pair", "--mirror", str(mirror.root),
                           "--key", token.uri)
    assert code == 0, err
    policy = write_policy(tmp_path / "trust.yaml", policy_doc({"hsm": key}))
    assert verify_bundle(mirror, rec.name, load_policy(policy)).report.ok
    _no_private_key_outside(tmp_path, token.dir)


def test_pin_and_module_errors(tmp_path: Path, token: Token, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    model = make_model(tmp_path / "model")
    monkeypatch.setenv(PIN_ENV, "wrong-pin-9876")
    code, out, err = run_cli(capsys, "sign-model", str(model), "--key", token.uri)
    assert code == 6 and "PIN_INCORRECT" in err and "wrong-pin-9876" not in out + err
    monkeypatch.delenv(PIN_ENV)
    with pytest.raises(EnvironmentProblem, match="no PIN"):
        load_token_key(token.uri)
    pin_file = tmp_path / "pin"
    pin_file.write_text(PIN + "\n")
    assert load_token_key(f"{token.uri}&pin-source={pin_file}").in_token
    with pytest.raises(EnvironmentProblem, match="no PKCS#11 module"):
        load_token_key("pkcs11:token=release;object=signing-key")
    monkeypatch.setenv(MODULE_ENV, str(MODULE))
    with pytest.raises(UsageError, match="0 private"):
        load_token_key(f"pkcs11:token=release;object=nope?pin-source={pin_file}")
    code, _, err = run_cli(capsys, "sign-model", str(model), "--key",
                           "pkcs11:token=release;object=k?pin-value=1234")
    assert code == 2 and "1234" not in err
