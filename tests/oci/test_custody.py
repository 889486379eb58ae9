"""The custody model over a registry: the signed bundle manifest is what travels and what
pull trusts (version chain, rollback, key scope name AND repos, revocations, forged or
replayed manifests as referrers)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from specbundle import attest
from specbundle._fsutil import canonical_json
from specbundle.attest.manifest import build_manifest, parse_manifest_unverified
from specbundle.audit.revocation import revoke_key
from specbundle.mirror import Mirror, versions
from specbundle.oci import RegistryBackend, push_bundle
from specbundle.oci.media import ANN_ROLE, DSSE_ENVELOPE, IMAGE_MANIFEST, Descriptor
from specbundle.sign import sign_bundle
from specbundle.verify import load_policy, verify_bundle
from tests.lib.bundles import signed_pair
from tests.lib.cli import run_cli
from tests.lib.policy import policy_doc, trust_file, write_policy
from tests.lib.registry import Registry
from tests.oci.builders import push_referrer
from tests.oci.conftest import backend


def _store(registry: Registry, repo: str) -> RegistryBackend:
    return backend(f"{registry.host}/{repo}:x", plain_http=True)


def _pull(capsys: pytest.CaptureFixture[str], ref: str, dst: Path, trust: Path
          ) -> tuple[int, dict[str, object], str]:
    code, out, err = run_cli(capsys, "oci", "pull", ref, "--mirror", str(dst), "--trust",
                             str(trust), "--plain-http", "--json")
    return code, json.loads(out) if out.strip() else {}, err


def _meta(store: RegistryBackend, digest: str) -> Descriptor:
    return Descriptor(IMAGE_MANIFEST, digest, len(store.get_manifest(digest, 1 << 22)[0]))


def test_an_update_chains_onto_the_pulled_version_and_a_rollback_is_refused(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=61)
    store = _store(registry, "custody/pair")
    v1 = push_bundle(src, "pair", store, "v1")
    trust = trust_file(tmp_path, key)
    iso = tmp_path / "iso"
    code, res, err = _pull(capsys, f"{registry.host}/custody/pair:v1", iso, trust)
    assert code == 0, err
    dst = Mirror.open(iso)
    assert versions.current_version(dst, "pair") == 1
    assert versions.read_manifest(dst, "pair", 1) == versions.read_manifest(src, "pair", 1)
    sign_bundle(src, "pair", [key])  # version 2, chained to version 1
    v2 = push_bundle(src, "pair", store, "v2")
    assert v2.index_digest != v1.index_digest
    # a trusted manifest of another version, replayed as a referrer of v1's metadata, is
    # ignored: the version the artifact carries is the one pulled
    two = versions.read_manifest(src, "pair", 2) or b""
    push_referrer(store, _meta(store, v1.manifests["bundle"]), DSSE_ENVELOPE, two,
                  {ANN_ROLE: "manifest"})
    code, res, err = _pull(capsys, f"{registry.host}/custody/pair:v2", iso, trust)
    assert code == 0, err
    assert versions.current_version(dst, "pair") == 2
    verified = verify_bundle(dst, "pair", load_policy(trust))
    assert verified.version == 2 and verified.manifest.previous == \
        parse_manifest_unverified(versions.read_manifest(dst, "pair", 1) or b"").digest
    code, res, err = _pull(capsys, f"{registry.host}/custody/pair:v1", iso, trust)
    assert code == 3 and "rollback refused" in err
    assert versions.current_version(dst, "pair") == 2
    code, res, err = _pull(capsys, f"{registry.host}/custody/pair:v1", tmp_path / "fresh",
                           trust)
    assert code == 0, err
    assert any("version 2, the artifact carries version 1" in str(x)
               for x in res["ignored_referrers"])  # type: ignore[union-attr]


def test_a_forged_manifest_referrer_is_ignored(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key, attacker = attest.generate_key(), attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=62)
    store = _store(registry, "forged-manifest/pair")
    res = push_bundle(src, "pair", store, "v1")
    # the attacker's own manifest for the same version: 64 speculative tokens
    real = parse_manifest_unverified(versions.read_manifest(src, "pair", 1) or b"")
    spec = dict(real.record.spec)
    spec["speculative"] = {**spec["speculative"], "num_speculative_tokens": 64}
    st = build_manifest(replace(real.record, spec=spec), real.roots, version=1, previous=None,
                        scan_report_sha256=real.scan_report_sha256, images=real.images,
                        now=real.time)
    forged = canonical_json(attest.sign_statement(st, [attacker]).to_json()) + b"\n"
    push_referrer(store, _meta(store, res.manifests["bundle"]), DSSE_ENVELOPE, forged,
                  {ANN_ROLE: "manifest"})
    trust = trust_file(tmp_path, key)
    code, out, err = _pull(capsys, f"{registry.host}/forged-manifest/pair:v1",
                           tmp_path / "iso", trust)
    assert code == 0, err
    ignored = out["ignored_referrers"]
    assert isinstance(ignored, list) and len(ignored) == 1
    assert "bundle manifest referrer" in ignored[0]
    dst = Mirror.open(tmp_path / "iso")
    assert versions.read_manifest(dst, "pair", 1) == versions.read_manifest(src, "pair", 1)
    assert verify_bundle(dst, "pair", load_policy(trust)).spec.speculative \
        .num_speculative_tokens == 4
    # trusting only the attacker: their manifest opens, their model.sig does not exist, so
    # the bundle fails closed and nothing becomes visible
    code, _, err = _pull(capsys, f"{registry.host}/forged-manifest/pair:v1", tmp_path / "bad",
                         trust_file(tmp_path, attacker, "attacker"))
    assert code == 3, err
    assert Mirror.open(tmp_path / "bad").bundle_names() == []


@pytest.mark.parametrize("scope", ["bundles", "repos"])
def test_a_key_not_scoped_to_the_bundle_name_and_repos_is_refused(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str],
        scope: str) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=63)
    push_bundle(src, "pair", _store(registry, f"scope-{scope}/pair"), "v1")
    doc = policy_doc({"release": key})
    keys = doc["keys"]
    assert isinstance(keys, list)
    keys[0][scope] = ["other"] if scope == "bundles" else ["narrow/*"]
    trust = write_policy(tmp_path / "narrow.yaml", doc)
    code, _, err = _pull(capsys, f"{registry.host}/scope-{scope}/pair:v1", tmp_path / "iso",
                         trust)
    assert code == 3 and "no signer may sign bundle 'pair'" in err
    assert Mirror.open(tmp_path / "iso").bundle_names() == []
    # refused before a byte was fetched or staged
    assert not [p for p in (tmp_path / "iso").rglob("*") if p.is_file()
                and p.parts[-2:] != ("iso", "events.jsonl") and "objects" in p.parts]
    assert not list((tmp_path / "iso" / "tmp").glob("oci-*"))


def test_a_revoked_key_is_refused_from_the_policy_and_from_the_mirror_log(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key, ops = attest.generate_key(), attest.generate_key("ecdsa-p256")
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=64)
    push_bundle(src, "pair", _store(registry, "revoked/pair"), "v1")
    ref = f"{registry.host}/revoked/pair:v1"
    doc = policy_doc({"release": key, "ops": ops})
    both = write_policy(tmp_path / "both.yaml", doc)
    doc["revoked"] = [{"fingerprint": key.fingerprint, "reason": "retired"}]
    code, _, err = _pull(capsys, ref, tmp_path / "iso",
                         write_policy(tmp_path / "revoked.yaml", doc))
    assert code == 3 and "retired" in err
    assert Mirror.open(tmp_path / "iso").bundle_names() == []
    logged = Mirror.open(tmp_path / "logged", create=True)
    revoke_key(logged, key.fingerprint, signer=ops, reason="key leaked")
    code, _, err = _pull(capsys, ref, logged.root, both)
    assert code == 3 and "key leaked" in err
    assert logged.bundle_names() == []


def test_a_version_that_does_not_chain_onto_the_mirrors_is_refused(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    """Another lineage's version 2 (same name, same key) must not follow this mirror's 1."""
    key = attest.generate_key()
    one, other = Mirror.open(tmp_path / "a", create=True), Mirror.open(tmp_path / "b",
                                                                       create=True)
    signed_pair(tmp_path / "a", one, key, "pair", target_seed=65)
    signed_pair(tmp_path / "b", other, key, "pair", target_seed=66)
    sign_bundle(other, "pair", [key])  # version 2 of the other lineage
    store = _store(registry, "lineage/pair")
    push_bundle(one, "pair", store, "a1")
    push_bundle(other, "pair", store, "b2")
    trust = trust_file(tmp_path, key)
    code, _, err = _pull(capsys, f"{registry.host}/lineage/pair:a1", tmp_path / "iso", trust)
    assert code == 0, err
    code, _, err = _pull(capsys, f"{registry.host}/lineage/pair:b2", tmp_path / "iso", trust)
    assert code == 3 and "does not chain" in err, err
    dst = Mirror.open(tmp_path / "iso")
    assert versions.current_version(dst, "pair") == 1
    assert verify_bundle(dst, "pair", load_policy(trust)).version == 1
