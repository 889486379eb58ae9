"""The audit of a complete chain, and every way of breaking it, named exactly."""

from __future__ import annotations

import json
from pathlib import Path

from specbundle.attest import read_attestations
from specbundle.audit import audit, resolve_subject
from specbundle.audit.model import BundleAudit
from specbundle.mirror import Mirror, versions
from specbundle.scan.findings import ScanReport
from specbundle.transfer import export_bundle, import_bundle
from tests.lib.chain import Chain, build_chain
from tests.lib.policy import policy_for


def _links(b: BundleAudit) -> dict[str, tuple[str, str]]:
    return {x.name: (x.status, x.detail) for x in b.links}


def test_complete_chain_verifies_every_link(chain: Chain) -> None:
    report = audit(chain.mirror, "pair", policy=chain.policy)
    assert not report.broken, [x for b in report.bundles for x in b.links if x.breaks_chain]
    assert report.log.ok
    assert report.policy_digest == chain.policy.digest
    (b,) = report.bundles
    target, draft = b.artifacts
    assert (target.role, draft.role) == ("target", "draft")
    assert chain.record.draft is not None
    assert draft.commit == chain.record.draft.commit
    assert draft.source.startswith("dir:")
    assert draft.purl == f"pkg:huggingface/{draft.repo}@{draft.commit}"
    assert (draft.license, draft.license_source) == ("apache-2.0", "README.md front matter")
    assert all(f.status == "ok" and f.actual_sha256 == f.sha256 for f in draft.files)
    assert draft.model_sig.status == "ok"
    assert draft.model_sig_signers == (chain.release.fingerprint,)
    kinds = sorted(a.kind for a in b.attestations)
    assert kinds == ["fetch-provenance", "fetch-provenance", "pair-binding", "scan-result"]
    assert all(a.signer_names == ("release",) for a in b.attestations)
    assert b.scan.link.status == "ok"
    assert b.scan.scanners[0]["tool"] == "specbundle"
    (binding,) = b.pair_bindings
    assert binding["status"] == "ok"
    assert [r.path for r in b.renders if r.references_draft]  # the shell script points at it
    assert [e["type"] for e in b.events][:3] == ["pull", "scan", "sign"]
    assert {"fetch-provenance", "scan-result", "pair-binding"} <= {
        a.kind for a in b.attestations if a.link.status == "ok"}


def test_subject_resolution_by_repo_commit_and_digest(chain: Chain) -> None:
    draft = chain.record.draft
    assert draft is not None
    m = chain.mirror
    assert resolve_subject(m, draft.repo) == ("pair",)
    assert resolve_subject(m, f"{draft.repo}@{draft.commit[:12]}") == ("pair",)
    assert resolve_subject(m, draft.commit[:10]) == ("pair",)
    assert resolve_subject(m, draft.files[0].sha256) == ("pair",)


def test_no_policy_leaves_signatures_unverified_and_breaks(chain: Chain) -> None:
    report = audit(chain.mirror, "pair")
    assert report.broken
    (b,) = report.bundles
    assert {a.link.status for a in b.attestations} == {"unverified"}
    assert b.artifacts[1].model_sig.status == "unverified"


def test_revoked_key_names_every_signature_it_made(chain: Chain) -> None:
    revoked = policy_for({"other": chain.other})  # release key removed from the policy
    report = audit(chain.mirror, "pair", policy=revoked)
    assert report.broken
    (b,) = report.bundles
    links = _links(b)
    for role in ("target", "draft"):
        status, detail = links[f"{role} model.sig"]
        assert status == "failed"
        assert "revoked or unknown" in detail
    for a in b.attestations:
        assert a.link.status == "failed"
        assert "revoked or unknown" in a.link.detail
        assert a.unknown_keyids == (chain.release.fingerprint,)
    assert links["pair-binding"][0] == "missing"
    assert not report.log.ok  # the checkpoint was signed by the revoked key too
    assert any("revoked or unknown" in p for p in report.log.problems)


def test_changed_object_is_named_with_both_digests(chain: Chain) -> None:
    draft = chain.record.draft
    assert draft is not None
    f = draft.file("model.gguf")
    assert f is not None
    obj = chain.mirror.object_path(f.sha256)
    obj.chmod(0o644)
    data = bytearray(obj.read_bytes())
    data[-1] ^= 1
    obj.write_bytes(bytes(data))
    (b,) = audit(chain.mirror, "pair", policy=chain.policy).bundles
    status, detail = _links(b)["draft files"]
    assert status == "failed"
    assert "model.gguf: failed" in detail
    bad = next(x for x in b.artifacts[1].files if x.path == "model.gguf")
    assert bad.actual_sha256 not in (None, f.sha256)


def test_edited_scan_report_is_not_the_signed_one(chain: Chain) -> None:
    rel = versions.version_rel(1, "scan/report.json")  # the copy the signed version keeps
    raw = chain.mirror.read_bundle_file("pair", rel)
    assert raw is not None
    report = ScanReport.from_bytes(raw)
    edited = report.to_json()
    edited["tool_version"] = "9.9.9"
    chain.mirror.write_bundle_file("pair", rel, json.dumps(edited).encode())
    (b,) = audit(chain.mirror, "pair", policy=chain.policy).bundles
    assert b.scan.link.status == "failed"
    assert "no scan attestation names this report's digest" in b.scan.link.detail


def test_deleted_attestation_line_is_a_missing_link(chain: Chain) -> None:
    path = chain.mirror.bundle_dir("pair") / "attestations.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    kept = [ln for ln, env in zip(lines, read_attestations(chain.mirror, "pair"), strict=True)
            if b"pair-binding" not in env.payload]
    path.write_bytes(b"".join(kept))
    (b,) = audit(chain.mirror, "pair", policy=chain.policy).bundles
    assert _links(b)["pair-binding"] == ("missing", "no pair-binding attestation for this bundle")


def test_edited_event_log_breaks_the_report(chain: Chain) -> None:
    log = chain.mirror.events_path
    lines = log.read_bytes().splitlines(keepends=True)
    del lines[1]  # the scan event
    log.write_bytes(b"".join(lines))
    report = audit(chain.mirror, "pair", policy=chain.policy)
    assert report.broken
    assert [(i.kind, i.seq) for i in report.log.chain.issues] == [("deleted", 1)]


def test_two_bundles_audit_independently(chain: Chain, tmp_path: Path) -> None:
    build_chain(tmp_path / "second", name="other", seed=3, release=chain.release,
                mirror=chain.mirror)
    report = audit(chain.mirror, "other", policy=chain.policy)
    assert [b.name for b in report.bundles] == ["other"]
    assert not report.broken


def test_manifest_alias_repointed_to_another_model_is_caught(chain: Chain) -> None:
    alias = chain.mirror.bundle_dir("pair") / "render" / "models" / "draft"
    target_alias = alias.with_name("target")
    alias.unlink()
    alias.symlink_to(target_alias.readlink())  # the manifests would now serve the target
    (b,) = audit(chain.mirror, "pair", policy=chain.policy).bundles
    status, detail = _links(b)["draft manifest alias"]
    assert status == "failed"
    assert "not synth/draft-pair@" in detail
    assert b.broken


def test_isolated_side_audit_after_transfer(chain: Chain, tmp_path: Path) -> None:
    """Imported (not pulled) into a fresh mirror: the chain verifies there too."""
    export_bundle(chain.mirror, "pair", tmp_path / "set", [chain.release])
    isolated = Mirror.open(tmp_path / "isolated", create=True)
    import_bundle(tmp_path / "set", isolated, chain.policy)
    report = audit(isolated, "pair", policy=chain.policy)
    assert not report.broken, [x for x in report.bundles[0].links if x.breaks_chain]
    (b,) = report.bundles
    assert [e["type"] for e in b.events] == ["import"]
    assert b.artifacts[1].source.startswith("dir:")  # the origin survives the air gap
    with isolated.lock():
        isolated.events_path.write_bytes(b"")  # a wiped log loses the import event
    (b,) = audit(isolated, "pair", policy=chain.policy).bundles
    assert _links(b)["pull/import event"][0] == "missing"
