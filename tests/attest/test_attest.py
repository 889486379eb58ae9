"""Keys, DSSE, statements and the attestation log (specbundle.attest)."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.attest import (
    Envelope,
    Statement,
    Subject,
    check_envelope,
    generate_key,
    load_signing_key,
    pae,
    sign_envelope,
)
from specbundle.errors import (
    BundleNotFound,
    CorruptMirror,
    EnvironmentProblem,
    UsageError,
    VerificationError,
)
from specbundle.mirror import Mirror
from tests.lib.bundles import pulled_bundle


def test_pae_matches_the_dsse_spec_example() -> None:
    # secure-systems-lab/dsse protocol.md test vector
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world")


@pytest.mark.parametrize("alg", ["ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "ed25519"])
def test_every_key_type_signs_and_verifies_envelopes(alg: str) -> None:
    key, other = generate_key(alg), generate_key(alg)  # type: ignore[arg-type]
    env = sign_envelope(b'{"a":1}', "application/x", [key])
    assert env.signatures[0].keyid == key.fingerprint
    assert check_envelope(env, [key.public]).signers == {key.fingerprint}
    res = check_envelope(env, [other.public])
    assert not res.signers and "unknown signature" in res.problems[0]
    tampered = Envelope(b'{"a":2}', env.payload_type, env.signatures)
    assert "bad signature" in check_envelope(tampered, [key.public]).problems[0]


def test_fingerprint_is_sha256_of_spki_der_and_stable_across_pem_reload(tmp_path: Path) -> None:
    import hashlib

    from cryptography.hazmat.primitives import serialization

    key = generate_key("ecdsa-p384")
    der = key.public.key.public_bytes(serialization.Encoding.DER,
                                      serialization.PublicFormat.SubjectPublicKeyInfo)
    assert key.fingerprint == hashlib.sha256(der).hexdigest()
    attest.write_public_key(key.public, tmp_path / "k.pub")
    assert attest.load_public_key(tmp_path / "k.pub").fingerprint == key.fingerprint
    assert key.fingerprint not in repr(key) and key.fingerprint[:16] in repr(key)


def test_private_key_file_is_0600_encrypted_and_not_overwritten(tmp_path: Path) -> None:
    key = generate_key("ed25519")
    path = tmp_path / "k.pem"
    attest.write_private_key(key, path, passphrase=b"s3cret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"ENCRYPTED PRIVATE KEY" in path.read_bytes()
    with pytest.raises(EnvironmentProblem, match="encrypted"):
        load_signing_key(path)
    with pytest.raises(EnvironmentProblem, match="passphrase is wrong"):
        load_signing_key(path, b"nope")
    assert load_signing_key(path, b"s3cret").fingerprint == key.fingerprint
    with pytest.raises(UsageError, match="refusing to overwrite"):
        attest.write_private_key(key, path)


def test_der_pkcs8_and_sec1_keys_load(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    raw = ec.generate_private_key(ec.SECP256R1())
    der = raw.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    sec1 = raw.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())
    (tmp_path / "k.der").write_bytes(der)
    (tmp_path / "k.sec1").write_bytes(sec1)
    a, b = load_signing_key(tmp_path / "k.der"), load_signing_key(tmp_path / "k.sec1")
    assert a.fingerprint == b.fingerprint and a.algorithm == "ecdsa-p256"


def test_rsa_keys_are_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "rsa.pem").write_bytes(k.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    with pytest.raises(UsageError, match="unsupported private key"):
        load_signing_key(tmp_path / "rsa.pem")


def test_statement_is_signed_as_canonical_bytes_and_round_trips() -> None:
    key = generate_key()
    st = Statement.build([Subject("org/m", {"sha256": "ab" * 32})], attest.LOG_CHECKPOINT_V1,
                         {"seq": 1, "entries": 2, "mirror": "m", "previous": None,
                          "timeCreated": "2026-01-02T03:04:05Z"})
    env = attest.sign_statement(st, [key])
    assert env.payload == json.dumps(st.to_json(), sort_keys=True,
                                     separators=(",", ":")).encode()
    cs = attest.check_statement(Envelope.from_json(json.loads(env.to_line())), [key.public])
    assert cs.signers == {key.fingerprint}
    assert cs.statement == st and cs.statement.time is not None
    assert cs.statement.time.year == 2026


def test_statement_builder_refuses_floats_and_empty_digests() -> None:
    with pytest.raises(VerificationError, match="floats"):
        Statement.build([Subject("m", {"sha256": "ab" * 32})], "x", {"t": 0.5})
    with pytest.raises(ValueError, match="DigestSet"):
        Statement.build([Subject("m", {})], "x", {})


def test_envelope_parsing_rejects_corrupt_base64_and_accepts_urlsafe() -> None:
    key = generate_key()
    env = sign_envelope(b"\xfb\xff payload", "t", [key]).to_json()
    urlsafe = dict(env, payload=base64.urlsafe_b64encode(b"\xfb\xff payload").decode())
    assert Envelope.from_json(urlsafe).payload == b"\xfb\xff payload"
    broken = dict(env, signatures=[{"sig": "!!notbase64!!", "keyid": ""}])
    with pytest.raises(VerificationError, match="base64"):
        Envelope.from_json(broken)
    with pytest.raises(VerificationError, match="no signatures"):
        Envelope.from_json(dict(env, signatures=[]))


def test_attestation_log_appends_reads_and_survives_a_torn_line(tmp_path: Path) -> None:
    mirror = Mirror.open(tmp_path / "m", create=True)
    rec = pulled_bundle(tmp_path, mirror)
    key = generate_key("ed25519")
    st = Statement.build(attest.artifact_subjects("org/target", "cd" * 32, rec.target.commit),
                         attest.BENCH_EVIDENCE_V1, {
                             "timeCreated": "2026-01-01T00:00:00Z", "runId": "r", "engine": "vllm",
                             "report": {"uri": "u", "digest": {"sha256": "ab" * 32}},
                             "figures": {}})
    with mirror.lock():
        assert attest.append_attestation(mirror, rec.name, attest.sign_statement(st, [key])) == 1
    path = attest.attestations_path(mirror, rec.name)
    with path.open("ab") as fh:
        fh.write(b'{"payload": "tor')  # a crash mid-append
    with mirror.lock():
        line = attest.append_attestation(mirror, rec.name, attest.sign_statement(st, [key]))
    assert line == 2  # the torn fragment was never committed: cut, not kept as a bad line
    problems: list[str] = []
    envs = attest.read_attestations(mirror, rec.name, problems=problems)
    assert len(envs) == 2 and not problems
    with path.open("ab") as fh:  # damage before the tail: no append extends it
        fh.write(b"{garbage\n")
    with mirror.lock(), pytest.raises(CorruptMirror, match="line 3"):
        attest.append_attestation(mirror, rec.name, attest.sign_statement(st, [key]))
    with pytest.raises(VerificationError, match="line 3"):
        attest.read_attestations(mirror, rec.name)
    with pytest.raises(BundleNotFound):
        attest.append_attestation(mirror, "nope", envs[0])


def test_content_commits_are_not_called_git_commits() -> None:
    a, b = attest.artifact_subjects("org/m", "ab" * 32, "c" * 40, "content")
    assert a.digest == {"sha256": "ab" * 32}
    assert b.digest == {"specbundleContentCommit": "c" * 40}
    assert attest.artifact_subjects("org/m", "ab" * 32, "c" * 40)[1].digest == {
        "gitCommit": "c" * 40}
