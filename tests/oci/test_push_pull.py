"""Push signed bundles to a real registry and pull them back, verified, into empty mirrors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.errors import SourceUnavailable
from specbundle.mirror import Mirror
from specbundle.oci import RegistryBackend, push_bundle
from specbundle.oci.media import (
    DOC,
    FILEPATH,
    MODEL_ARTIFACT,
    MODEL_CONFIG,
    WEIGHT,
    WEIGHT_CONFIG,
)
from specbundle.verify import load_policy, verify_bundle
from tests.lib.bundles import pulled_bundle, signed_pair
from tests.lib.cli import run_cli
from tests.lib.policy import trust_file
from tests.lib.registry import Registry
from tests.oci.conftest import backend


def _store(registry: Registry, repo: str) -> RegistryBackend:
    return backend(f"{registry.host}/{repo}:x", plain_http=True, chunk_size=64 * 1024)


def test_push_then_pull_into_an_empty_mirror_verifies_offline(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "connected", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=1)
    trust = trust_file(tmp_path, key)
    ref = f"{registry.host}/models/pair:v1"
    code, out, err = run_cli(capsys, "oci", "push", "pair", ref, "--mirror", str(src.root),
                             "--plain-http", "--json")
    assert code == 0, err
    pushed = json.loads(out)
    assert pushed["blobs_uploaded"] == len(src.load_bundle("pair").referenced_blobs())
    assert pushed["referrers"] >= 3  # two model.sig + the attestation lines

    dst = tmp_path / "isolated"
    code, out, err = run_cli(capsys, "oci", "pull", ref, "--mirror", str(dst), "--trust",
                             str(trust), "--plain-http", "--render-aliases", "--json")
    assert code == 0, err
    pulled = json.loads(out)
    alias = dst / "bundles/pair/render/models/target"
    assert alias.is_symlink() and (alias / "config.json").is_file()
    assert pulled["index_digest"] == pushed["index_digest"]
    assert pulled["verification"]["ok"] and pulled["ignored_referrers"] == []
    mirror = Mirror.open(dst)
    assert mirror.load_bundle("pair") == src.load_bundle("pair")
    assert not list((dst / "tmp").glob("oci-*")), "staging is cleaned up"
    verify_bundle(mirror, "pair", load_policy(trust))  # offline, from the mirror alone
    # pulling again changes nothing; by digest works too
    by_digest = f"{registry.host}/models/pair@{pushed['index_digest']}"
    code, out, err = run_cli(capsys, "oci", "pull", by_digest, "--mirror", str(dst),
                             "--trust", str(trust), "--plain-http", "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "unchanged"

    # skopeo (containers/image) reads the artifact the registry holds
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                          f"docker://{ref}"], capture_output=True, text=True, check=True)
    index = json.loads(raw.stdout)
    target = next(m for m in index["manifests"] if m["annotations"]["dev.specbundle.role"]
                  == "target")
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                          f"docker://{registry.host}/models/pair@{target['digest']}"],
                         capture_output=True, text=True, check=True)
    manifest = json.loads(raw.stdout)
    assert manifest["artifactType"] == MODEL_ARTIFACT
    assert manifest["config"]["mediaType"] == MODEL_CONFIG
    assert {x["mediaType"] for x in manifest["layers"]} <= {WEIGHT, WEIGHT_CONFIG, DOC}
    paths = [x["annotations"][FILEPATH] for x in manifest["layers"]]
    assert sorted(paths) == sorted(f.path for f in src.load_bundle("pair").target.files)
    # the ModelPack config: the schema's three required objects, modelfs.diffIds = layers
    cfg = subprocess.run(["skopeo", "inspect", "--raw", "--config", "--tls-verify=false",
                          f"docker://{registry.host}/models/pair@{target['digest']}"],
                         capture_output=True, text=True, check=True)
    config = json.loads(cfg.stdout)
    assert set(config) == {"descriptor", "config", "modelfs"}
    assert config["modelfs"] == {"type": "layers",
                                 "diffIds": [x["digest"] for x in manifest["layers"]]}
    assert config["descriptor"]["revision"] == src.load_bundle("pair").target.commit


def test_second_bundle_sharing_the_draft_uploads_no_draft_blob(
        tmp_path: Path, registry: Registry) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    draft = signed_pair(tmp_path, src, key, "one", target_seed=3)
    signed_pair(tmp_path, src, key, "two", target_seed=4, draft_dir=draft)
    store = _store(registry, "models/shared")
    first = push_bundle(src, "one", store, "one")
    second = push_bundle(src, "two", store, "two")
    draft_blobs = {f.sha256 for f in src.load_bundle("two").artifact("draft").files}
    target_blobs = {f.sha256 for f in src.load_bundle("two").target.files}
    assert draft_blobs == {f.sha256 for f in src.load_bundle("one").artifact("draft").files}
    assert first.blobs_uploaded == len(src.load_bundle("one").referenced_blobs())
    # only the new target's blobs that the first bundle did not already hold go up
    new = target_blobs - src.load_bundle("one").referenced_blobs()
    assert second.blobs_uploaded == len(new)
    assert second.blobs_skipped == len(src.load_bundle("two").referenced_blobs()) - len(new)
    assert second.blobs_skipped >= len(draft_blobs)
    # and through a cross-repository mount in another repository: nothing is uploaded either
    other = backend(f"{registry.host}/models/other:x", plain_http=True,
                    mount_from=("models/shared",))
    third = push_bundle(src, "two", other, "two")
    assert third.blobs_uploaded == 0
    assert third.blobs_mounted == len(src.load_bundle("two").referenced_blobs())


def test_a_moved_tag_is_reported(tmp_path: Path, registry: Registry,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "first", target_seed=51)
    signed_pair(tmp_path, src, key, "second", target_seed=52)
    store = _store(registry, "moving/pair")
    one = push_bundle(src, "first", store, "stable")
    trust = trust_file(tmp_path, key)
    pull = ["oci", "pull", f"{registry.host}/moving/pair:stable", "--mirror",
            str(tmp_path / "iso"), "--trust", str(trust), "--plain-http", "--json"]
    code, out, err = run_cli(capsys, *pull)
    assert code == 0, err
    assert json.loads(out)["tag_moved_from"] is None
    two = push_bundle(src, "second", store, "stable")  # someone re-points the tag
    code, out, err = run_cli(capsys, *pull)
    assert code == 0, err
    res = json.loads(out)
    assert res["tag_moved_from"] == one.index_digest
    assert res["index_digest"] == two.index_digest and res["bundle"] == "second"
    events = [e for e in Mirror.open(tmp_path / "iso").read_events()
              if e["type"] == "oci-tag-moved"]
    assert events[-1]["data"]["from"] == one.index_digest


def test_an_unsigned_bundle_is_not_pushed(tmp_path: Path, registry: Registry,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    mirror = Mirror.open(tmp_path / "m", create=True)
    pulled_bundle(tmp_path, mirror, "raw")
    code, _, err = run_cli(capsys, "oci", "push", "raw", f"{registry.host}/unsigned/raw:v1",
                           "--mirror", str(mirror.root), "--plain-http")
    assert code == 2 and "not signed" in err
    store = _store(registry, "unsigned/raw")
    with pytest.raises(SourceUnavailable):
        store.get_manifest("v1", 1 << 20)  # nothing was written
