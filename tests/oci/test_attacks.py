"""Hostile registries and interrupted pushes: tampered blobs, forged referrers, a killed push."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.digest import sha256_bytes
from specbundle.mirror import Mirror, versions
from specbundle.mirror.versions import model_sig_rel, read_version_file
from specbundle.oci import RegistryBackend, push_bundle
from specbundle.oci.media import (
    ANN_LINE,
    ANN_ROLE,
    DSSE_ENVELOPE,
    IMAGE_INDEX,
    IMAGE_MANIFEST,
    SIGSTORE_BUNDLE,
    Descriptor,
    dumps,
)
from specbundle.verify import load_policy, verify_bundle
from tests.lib.bundles import signed_pair
from tests.lib.cli import run_cli
from tests.lib.policy import trust_file
from tests.lib.registry import Registry
from tests.oci.builders import push_referrer
from tests.oci.conftest import backend


def _store(registry: Registry, repo: str) -> RegistryBackend:
    return backend(f"{registry.host}/{repo}:x", plain_http=True)


def _pull(capsys: pytest.CaptureFixture[str], ref: str, dst: Path, trust: Path
          ) -> tuple[int, str, str]:
    return run_cli(capsys, "oci", "pull", ref, "--mirror", str(dst), "--trust", str(trust),
                   "--plain-http", "--json")


def test_a_tampered_blob_in_registry_storage_is_refused_with_exit_3(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=11)
    push_bundle(src, "pair", _store(registry, "tamper/pair"), "v1")
    weights = src.load_bundle("pair").target.file("model.safetensors")
    assert weights is not None
    data = registry.blob_data(f"sha256:{weights.sha256}")
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF  # same size, different bytes: only hashing can tell
    data.chmod(0o644)
    data.write_bytes(bytes(raw))
    dst = tmp_path / "isolated"
    code, out, _ = _pull(capsys, f"{registry.host}/tamper/pair:v1", dst, trust_file(tmp_path, key))
    assert code == 3
    assert weights.sha256 in json.loads(out)["error"]["message"]
    assert Mirror.open(dst).bundle_names() == []  # nothing became visible
    assert not Mirror.open(dst).has_object(weights.sha256)


def test_a_referrer_signed_by_an_untrusted_key_is_ignored(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key, attacker = attest.generate_key(), attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=12)
    store = _store(registry, "forged/pair")
    res = push_bundle(src, "pair", store, "v1")
    target = Descriptor(IMAGE_MANIFEST, res.manifests["target"], len(
        store.get_manifest(res.manifests["target"], 1 << 20)[0]))
    # the attacker re-signs the same manifest with their own key and adds it as a referrer,
    # and adds a DSSE statement of their own to the bundle index
    manifest = attest.open_model_sig(read_version_file(src, "pair", 1, model_sig_rel("target"))
                                     or b"", key.public)
    push_referrer(store, target, SIGSTORE_BUNDLE, attest.build_model_sig(manifest, attacker),
                   {ANN_ROLE: "target"})
    trust = trust_file(tmp_path, key)
    dst = tmp_path / "isolated"
    code, out, err = _pull(capsys, f"{registry.host}/forged/pair:v1", dst, trust)
    assert code == 0, err
    ignored = json.loads(out)["ignored_referrers"]
    assert len(ignored) == 1 and "target model.sig" in ignored[0]
    assert read_version_file(Mirror.open(dst), "pair", 1, model_sig_rel("target")) == \
        read_version_file(src, "pair", 1, model_sig_rel("target"))
    # trusting only the attacker: the forged signature opens, but nothing else the policy
    # needs is signed by them, so the bundle fails closed
    code, out, _ = _pull(capsys, f"{registry.host}/forged/pair:v1", tmp_path / "other",
                         trust_file(tmp_path, attacker, "attacker"))
    assert code == 3
    assert Mirror.open(tmp_path / "other").bundle_names() == []


def test_a_push_killed_mid_upload_resumes_where_the_registry_stopped(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "big", target_seed=13, vocab=16384)  # 512 KiB of weights
    ref = f"{registry.host}/resume/big:v1"
    cmd = [sys.executable, "-m", "specbundle", "oci", "push", "big", ref, "--mirror",
           str(src.root), "--plain-http", "--chunk-size", "64K", "--jobs", "1", "--json"]
    env = {**os.environ, "SPECBUNDLE_CRASH_AT": "oci.chunk-uploaded:3"}
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == 137, killed.stderr
    assert registry.upload_dirs(), "the registry holds the interrupted upload session"
    code, out, _ = _pull(capsys, ref, tmp_path / "early", trust_file(tmp_path, key))
    assert code == 6  # the tag was never written: nothing half-pushed is visible
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    res = json.loads(again.stdout)
    assert res["bytes_resumed"] == 3 * 64 * 1024
    code, out, err = _pull(capsys, ref, tmp_path / "isolated", trust_file(tmp_path, key))
    assert code == 0, err
    assert json.loads(out)["verification"]["ok"]


def test_an_untrusted_attestation_is_ignored_and_an_unsafe_path_refused(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key, attacker = attest.generate_key(), attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=14)
    store = _store(registry, "hostile/pair")
    res = push_bundle(src, "pair", store, "v1")
    index = Descriptor(IMAGE_MANIFEST, res.manifests["bundle"], len(store.get_manifest(
        res.manifests["bundle"], 1 << 20)[0]))
    rec = src.load_bundle("pair")
    # built by hand, as an attacker would (the builder refuses an incomplete VSA)
    st = attest.Statement(attest.artifact_subjects(rec.target.repo, "0" * 64,
                                                   rec.target.commit),
                          attest.SLSA_VSA_V1, {"verificationResult": "PASSED"})
    line = attest.sign_statement(st, [attacker]).to_line()
    push_referrer(store, index, DSSE_ENVELOPE, line, {ANN_LINE: "1"})
    code, out, err = _pull(capsys, f"{registry.host}/hostile/pair:v1", tmp_path / "iso",
                           trust_file(tmp_path, key))
    assert code == 0, err
    assert any("not signed by a trusted key" in x for x in json.loads(out)["ignored_referrers"])
    log = Mirror.open(tmp_path / "iso").read_bundle_file("pair", "attestations.jsonl") or b""
    assert line not in log

    # an index whose metadata names a file outside the bundle folder, or a file the signed
    # version does not sign (the real manifest re-attached to it, as anyone could)
    manifest = versions.read_manifest(src, "pair", 1) or b""
    for n, (title, why) in enumerate([("../../../evil", "unsafe path"),
                                      ("bundle.json", "not a signed file of version 1"),
                                      ("versions/000001/sign/target/model.sig",
                                       "not a signed file of version 1")]):
        tag = _retitled(store, res.index_digest, res.manifests["bundle"], title, manifest)
        code, _, err = _pull(capsys, f"{registry.host}/hostile/pair:{tag}",
                             tmp_path / f"iso{n}", trust_file(tmp_path, key))
        assert code == 3 and why in err, err
        assert Mirror.open(tmp_path / f"iso{n}").bundle_names() == []
    assert not (tmp_path / "evil").exists()


def _retitled(store: RegistryBackend, index_digest: str, meta_digest: str, title: str,
              manifest: bytes) -> str:
    """Tag an index whose metadata's scan report layer is renamed ``title``."""
    meta = json.loads(store.get_manifest(meta_digest, 1 << 22)[0])
    layer = next(x for x in meta["layers"] if x["annotations"].get(
        "org.opencontainers.image.title", "").endswith("scan/report.json"))
    layer["annotations"]["org.opencontainers.image.title"] = title
    evil_meta = dumps(meta)
    evil = Descriptor(IMAGE_MANIFEST, f"sha256:{sha256_bytes(evil_meta)}", len(evil_meta))
    store.put_manifest(evil_meta, IMAGE_MANIFEST, evil.digest)
    push_referrer(store, evil, DSSE_ENVELOPE, manifest, {ANN_ROLE: "manifest"})
    idx = json.loads(store.get_manifest(index_digest, 1 << 22)[0])
    for m in idx["manifests"]:
        if m["digest"] == meta_digest:
            m["digest"], m["size"] = evil.digest, evil.size
    evil_idx = dumps(idx)
    tag = f"evil-{sha256_bytes(title.encode())[:8]}"
    store.put_manifest(evil_idx, IMAGE_INDEX, f"sha256:{sha256_bytes(evil_idx)}", tag=tag)
    return tag


@pytest.mark.parametrize("point", ["oci.pull-object-staged:2", "oci.pull-object-committed:2",
                                   "oci.pull-objects-moved", "oci.pull-files-written",
                                   "oci.pull-attestations-appended", "oci.pull-logged",
                                   "log.half-written", "versions.ref-flipped"])
def test_a_pull_killed_anywhere_shows_nothing_and_the_rerun_completes(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str],
        point: str) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=15)
    ref = f"{registry.host}/killed/pair:v1"
    push_bundle(src, "pair", _store(registry, "killed/pair"), "v1")
    dst, trust = tmp_path / "iso", trust_file(tmp_path, key)
    cmd = [sys.executable, "-m", "specbundle", "oci", "pull", ref, "--mirror", str(dst),
           "--trust", str(trust), "--plain-http", "--json"]
    killed = subprocess.run(cmd, env={**os.environ, "SPECBUNDLE_CRASH_AT": point},
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == 137, killed.stderr
    m = Mirror.open(dst)
    # the flip is the commit: before it nothing is visible, after it the signed version is
    assert m.bundle_names() == (["pair"] if point == "versions.ref-flipped" else [])
    pulls = [e["data"]["manifest_sha256"] for e in m.read_events() if e["type"] == "oci-pull"]
    if point == "versions.ref-flipped":
        assert pulls == [verify_bundle(m, "pair", load_policy(trust)).manifest_digest]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    out = json.loads(again.stdout)
    assert out["verification"]["ok"]
    pulls = [e["data"]["manifest_sha256"] for e in m.read_events() if e["type"] == "oci-pull"]
    assert len(pulls) == 1, "logged exactly once, before the version became visible"
    assert Mirror.open(dst).load_bundle("pair") == src.load_bundle("pair")
    assert versions.current_version(Mirror.open(dst), "pair") == 1
    assert not list((dst / "tmp").glob("oci-*")), "the rerun leaves no staging behind"
