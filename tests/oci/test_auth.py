"""Registries that need credentials and TLS: docker config, a credential helper, a CA bundle;
the secret never appears in any output, --plain-http only on loopback."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from specbundle import attest
from specbundle.mirror import Mirror
from tests.lib.bundles import signed_pair
from tests.lib.cli import run_cli
from tests.lib.policy import trust_file
from tests.lib.registry import run_registry

PASSWORD = "pw-7f3a9c1e-registry"
# bcrypt of PASSWORD (cost 4): distribution's htpasswd reads bcrypt only
HTPASSWD = "ci:$2b$04$INVJDctFU16ifmpghdvYEOydn1ozzBP.gvRm803evbo.bAAa0JfkO\n"


def _docker_config(path: Path, registry: str, password: str) -> Path:
    auth = base64.b64encode(f"ci:{password}".encode()).decode()
    path.write_text(json.dumps({"auths": {registry: {"auth": auth}}}))
    return path


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "specbundle test registry")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    crt, pem = tmp / "registry.crt", tmp / "registry.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return crt, pem


def test_tls_with_basic_auth_from_docker_config_and_a_credential_helper(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=41)
    (tmp_path / "htpasswd").write_text(HTPASSWD)
    crt, pem = _self_signed(tmp_path)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    with run_registry(tmp_path / "reg", htpasswd=tmp_path / "htpasswd", tls=(crt, pem)) as reg:
        ref = f"{reg.host}/secure/pair:v1"
        push = ["oci", "push", "pair", ref, "--mirror", str(src.root), "--json"]
        # TLS without the CA: refused (exit 6), as for any unknown certificate
        code, _, err = run_cli(capsys, *push)
        assert code == 6, err
        # the CA but no credentials, then a wrong password: refused, the secret never shown
        code, _, err = run_cli(capsys, *push, "--ca-bundle", str(crt))
        assert code == 6 and "credentials" in err
        wrong = _docker_config(tmp_path / "wrong.json", reg.host, "not-" + PASSWORD)
        code, out, err = run_cli(capsys, *push, "--ca-bundle", str(crt), "--auth-file",
                                 str(wrong))
        assert code == 6 and PASSWORD not in out + err
        good = _docker_config(tmp_path / "good.json", reg.host, PASSWORD)
        code, out, err = run_cli(capsys, *push, "--ca-bundle", str(crt), "--auth-file",
                                 str(good))
        assert code == 0, err
        assert PASSWORD not in out + err
        # pull with a credential helper (docker-credential-<name> get) found on PATH
        helper_dir = tmp_path / "bin"
        helper_dir.mkdir()
        helper = helper_dir / "docker-credential-specbundletest"
        helper.write_text("#!/bin/sh\nread server\nprintf '{\"ServerURL\":\"%s\",\"Username\":"
                          f"\"ci\",\"Secret\":\"{PASSWORD}\"}}' \"$server\"\n")
        helper.chmod(helper.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{helper_dir}{os.pathsep}{os.environ['PATH']}")
        cfg = tmp_path / "helper.json"
        cfg.write_text(json.dumps({"credHelpers": {reg.host: "specbundletest"}}))
        code, out, err = run_cli(capsys, "oci", "pull", ref, "--mirror", str(tmp_path / "iso"),
                                 "--trust", str(trust_file(tmp_path, key)), "--ca-bundle",
                                 str(crt), "--auth-file", str(cfg), "--json")
        assert code == 0, err
        assert json.loads(out)["verification"]["ok"] and PASSWORD not in out + err
        assert PASSWORD not in reg.log.read_text()


def test_plain_http_is_refused_for_a_registry_that_is_not_loopback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trust = trust_file(tmp_path, attest.generate_key())
    code, _, err = run_cli(capsys, "oci", "pull", "registry.example.com/models/pair:v1",
                           "--mirror", str(tmp_path / "m"), "--trust", str(trust),
                           "--plain-http")
    assert code == 2 and "plain-http" in err


@pytest.mark.parametrize("ref", ["no-registry", "127.0.0.1:5000/UPPER/case:v1",
                                 "127.0.0.1:5000/a/../b:v1", "127.0.0.1:5000/a:bad tag",
                                 "127.0.0.1:5000/a@sha256:xyz"])
def test_malformed_references_are_usage_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], ref: str) -> None:
    src = Mirror.open(tmp_path / "m", create=True)
    code, _, err = run_cli(capsys, "oci", "push", "pair", ref, "--mirror", str(src.root))
    assert code == 2, err
    assert "not a" in err or "does not start" in err  # the reference, not the missing bundle
