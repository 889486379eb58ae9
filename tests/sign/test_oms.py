"""OMS model.sig interop with the reference tool (model-signing), both directions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specbundle.attest import KeyAlgorithm, generate_key, load_public_key
from specbundle.cli import main
from specbundle.errors import UsageError, VerificationError
from specbundle.sign import sign_model
from specbundle.verify import ModelVerificationFailed, verify_model
from tests.lib.models import make_model
from tests.lib.policy import key_files

ms = pytest.importorskip("model_signing", reason="model-signing (test extra) is not installed")

CURVES: list[KeyAlgorithm] = ["ecdsa-p256", "ecdsa-p384"]


def _tricky_model(path: Path) -> Path:
    make_model(path)
    # names whose component order differs from code-point order (the reference's quirk)
    for rel in ("a/b.bin", "a-b/c", "a-b.txt", "a.b/z", "nested/deeper/w.bin"):
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(rel.encode() * 3)
    (path / ".gitattributes").write_text("*.bin filter=lfs\n")
    (path / ".git").mkdir()
    (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return path


def _ms_verify(model: Path, sig: Path, pub: Path, *, symlinks: bool = False) -> None:
    hashing = ms.hashing.Config().set_ignored_paths(paths=[sig.name]).set_allow_symlinks(symlinks)
    (ms.verifying.Config().use_elliptic_key_verifier(public_key=pub)
     .set_hashing_config(hashing).verify(model, sig))


def _ms_sign(model: Path, sig: Path, priv: Path) -> None:
    hashing = ms.hashing.Config().set_ignored_paths(paths=[sig.name])
    (ms.signing.Config().use_elliptic_key_signer(private_key=priv)
     .set_hashing_config(hashing).sign(model, sig))


@pytest.mark.parametrize("alg", CURVES)
def test_reference_verifies_what_specbundle_signs(tmp_path: Path, alg: KeyAlgorithm) -> None:
    model = _tricky_model(tmp_path / "model")
    key = generate_key(alg)
    _, pub = key_files(tmp_path, key, "k")
    res = sign_model(model, key)
    assert res.signature == model / "model.sig"
    names = [r.name for r in res.manifest.resources]
    assert ".gitattributes" not in names and "model.sig" not in names
    assert names.index("a/b.bin") < names.index("a-b.txt")  # component order
    _ms_verify(model, res.signature, pub)
    bundle = json.loads(res.signature.read_bytes())
    assert list(bundle) == ["mediaType", "verificationMaterial", "dsseEnvelope"]
    assert bundle["verificationMaterial"] == {"publicKey": {"hint": key.public.oms_hint},
                                              "tlogEntries": []}
    assert bundle["dsseEnvelope"]["signatures"][0]["keyid"] == ""


@pytest.mark.parametrize("alg", CURVES)
def test_specbundle_verifies_what_the_reference_signs(tmp_path: Path, alg: KeyAlgorithm) -> None:
    model = _tricky_model(tmp_path / "model")
    key = generate_key(alg)
    priv, pub = key_files(tmp_path, key, "k")
    _ms_sign(model, model / "model.sig", priv)
    res = verify_model(model, load_public_key(pub))
    ours = sign_model(model, key, signature=tmp_path / "ours.sig",
                      ignore_paths=[model / "model.sig"]).manifest
    assert res.manifest.resources == ours.resources  # same order ...
    assert res.manifest.root_digest == ours.root_digest  # ... same root
    (model / "a-b.txt").write_bytes(b"changed")
    with pytest.raises(ModelVerificationFailed) as err:
        verify_model(model, load_public_key(pub))
    (p,) = err.value.problems
    assert p.kind == "changed-file" and p.subject == "model:a-b.txt"
    assert p.expected == res.manifest.digests()["a-b.txt"] and p.actual != p.expected


def test_reference_cli_round_trip(tmp_path: Path) -> None:
    """The exact commands a user runs: `model_signing sign key` / `verify key`."""
    model = make_model(tmp_path / "model")
    key = generate_key("ecdsa-p256")
    priv, pub = key_files(tmp_path, key, "k")
    sign_model(model, key)
    cli = [sys.executable, "-m", "model_signing"]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    out = subprocess.run([*cli, "verify", "key", "--signature", str(model / "model.sig"),
                          "--public_key", str(pub), str(model)],
                         capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    sig2 = tmp_path / "ref.sig"
    out = subprocess.run([*cli, "sign", "key", "--signature", str(sig2), "--private_key",
                          str(priv), str(model)], capture_output=True, text=True, env=env,
                         check=False)
    assert out.returncode == 0, out.stderr
    # with the signature outside the folder, the reference signs model.sig like any file
    res = verify_model(model, key.public, signature=sig2)
    assert "model.sig" in res.manifest.digests()
    (model / "model.sig").unlink()
    with pytest.raises(ModelVerificationFailed, match=r"missing-file.*model\.sig"):
        verify_model(model, key.public, signature=sig2)


def test_symlinks_refused_unless_allowed_both_tools_agree(tmp_path: Path) -> None:
    model = make_model(tmp_path / "model")
    (tmp_path / "outside.bin").write_bytes(b"weights elsewhere")
    (model / "linked.bin").symlink_to(tmp_path / "outside.bin")
    key = generate_key()
    _, pub = key_files(tmp_path, key, "k")
    with pytest.raises(UsageError, match="linked.bin: symlink"):
        sign_model(model, key)
    res = sign_model(model, key, allow_symlinks=True)
    assert "linked.bin" in res.manifest.digests()
    _ms_verify(model, res.signature, pub, symlinks=True)
    with pytest.raises(ModelVerificationFailed) as err:
        verify_model(model, key.public)
    assert [p.kind for p in err.value.problems] == ["unsafe-file"]
    assert verify_model(model, key.public, allow_symlinks=True)


def test_empty_model_and_ed25519_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty" / ".git").mkdir(parents=True)
    with pytest.raises(UsageError, match="empty"):
        sign_model(tmp_path / "empty", generate_key())
    with pytest.raises(UsageError, match="ECDSA"):
        sign_model(make_model(tmp_path / "m"), generate_key("ed25519"))


def test_extra_missing_and_wrong_key(tmp_path: Path) -> None:
    model = make_model(tmp_path / "model")
    key = generate_key()
    sign_model(model, key)
    (model / "extra.txt").write_text("new")
    (model / "config.json").unlink()
    with pytest.raises(ModelVerificationFailed) as err:
        verify_model(model, key.public)
    kinds = {(p.kind, p.subject) for p in err.value.problems}
    assert kinds == {("extra-file", "model:extra.txt"), ("missing-file", "model:config.json")}
    with pytest.raises(VerificationError, match="another key"):
        verify_model(model, generate_key().public)


def test_cli_sign_model_and_verify_model_exit_codes(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    model = make_model(tmp_path / "model")
    priv, pub = key_files(tmp_path, generate_key("ecdsa-p384"), "k")
    with pytest.raises(SystemExit) as ex:
        main(["sign-model", str(model), "--key", str(priv), "--ignore-paths", "README.md",
              "--json"])
    assert ex.value.code == 0
    assert json.loads(capsys.readouterr().out)["files"] == 5
    with pytest.raises(SystemExit) as ex:
        main(["verify-model", str(model), "--public-key", str(pub)])
    assert ex.value.code == 0
    assert "verified 5 files" in capsys.readouterr().out
    (model / "model.safetensors").write_bytes(b"flipped")
    with pytest.raises(SystemExit) as ex:
        main(["verify-model", str(model), "--public-key", str(pub), "--json"])
    assert ex.value.code == 3
    out = json.loads(capsys.readouterr().out)
    assert out["verified"] is False and out["problems"][0]["kind"] == "changed-file"
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as ex:
        main(["sign-model", str(tmp_path / "empty"), "--key", str(priv)])
    assert ex.value.code == 2


def _lone_gguf(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    return path


@pytest.mark.parametrize("alg", CURVES)
def test_single_file_model_signs_and_verifies_both_ways(tmp_path: Path, alg: KeyAlgorithm) -> None:
    """A lone GGUF is a model (OMS §6.1.2): its one resource is named by its basename."""
    model = _lone_gguf(tmp_path / "m" / "tiny.gguf")
    key = generate_key(alg)
    priv, pub = key_files(tmp_path, key, "k")
    ours = tmp_path / "ours.sig"
    res = sign_model(model, key, signature=ours)
    assert [r.name for r in res.manifest.resources] == ["tiny.gguf"]
    assert res.manifest.model_name == "tiny.gguf"
    verify_model(model, key.public, signature=ours)
    # the reference tool signs the same file; specbundle verifies its signature
    theirs = tmp_path / "theirs.sig"
    _ms_sign(model, theirs, priv)
    got = verify_model(model, load_public_key(pub), signature=theirs)
    assert got.manifest.root_digest == res.manifest.root_digest
    # the reference verifies specbundle's signature over the folder holding just that file
    # (given the file itself, model-signing 1.1.1 names its resource "." instead of the
    # basename the OMS spec and the conformance suite's key-single-file vector use)
    _ms_verify(model.parent, ours, pub)
    model.write_bytes(model.read_bytes()[:-1] + b"\x00")
    for sig in (ours, theirs):
        with pytest.raises(ModelVerificationFailed):
            verify_model(model, key.public, signature=sig)


def test_single_file_model_via_the_cli(tmp_path: Path) -> None:
    model = _lone_gguf(tmp_path / "lone.gguf")
    key = generate_key("ecdsa-p256")
    priv, pub = key_files(tmp_path, key, "k")
    sig = tmp_path / "lone.sig"
    for args in (["sign-model", str(model), "--key", str(priv), "--signature", str(sig)],
                 ["verify-model", str(model), "--public-key", str(pub), "--signature",
                  str(sig)]):
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 0, args
