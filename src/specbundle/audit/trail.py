"""The audit facade: resolve what was asked about, check every link, return one report."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from specbundle.attest import PAIR_BINDING_V1, SLSA_VSA_V1
from specbundle.audit.chain import read_events_lenient
from specbundle.audit.checkpoint import verify_events
from specbundle.audit.collect import (
    artifact_audit,
    attestation_audits,
    own_manifests,
    scan_audit,
)
from specbundle.audit.evidence import admissions, bench_audits, image_audits, render_audits
from specbundle.audit.model import ArtifactAudit, AttestationAudit, AuditReport, BundleAudit, Link
from specbundle.audit.revocation import Revocation, revoked_keys
from specbundle.errors import BundleNotFound, CorruptMirror, VerificationError
from specbundle.mirror import Mirror, utc_now
from specbundle.record import BundleRecord
from specbundle.verify import BundleVerificationFailed, floors, verify_bundle
from specbundle.verify.eligibility import StatementVerdict
from specbundle.verify.policy import TrustPolicy

__all__ = ["apply_revocations", "audit", "audit_bundle", "resolve_subject"]

_HEX = re.compile(r"^[0-9a-f]{7,64}$")


def _matches(rec: BundleRecord, subject: str) -> bool:
    repo, _, commit = subject.partition("@")
    for art in rec.artifacts:
        if art.repo == repo and (not commit or art.commit.startswith(commit)):
            return True
        if _HEX.match(subject) and (art.commit.startswith(subject) or any(
                f.sha256 == subject for f in art.files)):
            return True
    return False


def resolve_subject(mirror: Mirror, subject: str) -> tuple[str, ...]:
    """Bundle names for a bundle name, ``org/name[@commit]``, commit or file digest."""
    names = mirror.bundle_names()
    if subject in names:
        return (subject,)
    found = tuple(n for n in names if _matches(mirror.load_bundle(n), subject))
    if not found:
        raise BundleNotFound(
            f"nothing in mirror {mirror.root} matches {subject!r}",
            hint="give a bundle name, a repo id (org/name[@commit]), a commit or a file sha256",
        )
    return found


def _artifact_links(art: ArtifactAudit) -> list[Link]:
    bad = [f for f in art.files if f.status != "ok"]
    files = (Link(f"{art.role} files", "ok", f"{len(art.files)} files verified")
             if not bad else Link(f"{art.role} files", "failed" if any(
                 f.status == "failed" for f in bad) else "missing",
                 "; ".join(f"{f.path}: {f.status}" for f in bad)))
    return [files, art.model_sig]


def _required(rec: BundleRecord, kinds: set[str]) -> list[Link]:
    need = ["fetch-provenance", "scan-result"] + (["pair-binding"] if rec.draft else [])
    return [Link(k, "missing", f"no {k} attestation for this bundle")
            for k in need if k not in kinds]


def _revoked_link(link: Link, signers: Iterable[str], revoked: Mapping[str, Revocation],
                  policy: TrustPolicy | None, *, counted: bool = False) -> Link:
    hit = sorted(fp for fp in signers if fp in revoked)
    if not hit:
        return link
    why = "; ".join(f"signed by key {k.name if policy and (k := policy.key(fp)) else fp[:16]} "
                    f"({fp[:16]}…), {revoked[fp].detail}" for fp in hit)
    if counted:  # the verifier counted it on another, eligible signature
        return Link(link.name, "ok", f"{link.detail}; also {why} (not counted)"
                    if link.detail else f"also {why} (not counted)")
    if link.status != "ok" and link.detail:  # keep any earlier failure visible too
        why = f"{why}; also {link.status}: {link.detail}"
    return Link(link.name, "failed", why)


def apply_revocations(
    artifacts: Sequence[ArtifactAudit], attestations: Sequence[AttestationAudit],
    revoked: Mapping[str, Revocation], policy: TrustPolicy | None,
) -> tuple[tuple[ArtifactAudit, ...], tuple[AttestationAudit, ...]]:
    """Fail every model.sig a revoked key signed, even if the policy lists it; name the revoked
    signers of every attestation line.

    Whether a line counts is the verifier's verdict, which already weighed the revocations
    (an eligible co-signer may carry it): a line it counted stays ok, with the revoked
    signature named as not counted; any other line fails with the revocation as its reason.
    """
    arts = tuple(replace(a, model_sig=_revoked_link(a.model_sig, a.model_sig_signers, revoked,
                                                    policy)) for a in artifacts)
    atts = tuple(replace(t, link=_revoked_link(t.link, t.signers, revoked, policy,
                                               counted=t.link.status == "ok"))
                 for t in attestations)
    return arts, atts


def _verifier_link(mirror: Mirror, name: str, policy: TrustPolicy | None,
                   revoked: Mapping[str, Revocation]
                   ) -> tuple[Link, tuple[BundleRecord, str] | tuple[()],
                              tuple[StatementVerdict, ...]]:
    """The one verifier's verdict on the current version (audit keeps no rules of its own),
    with the signed record and manifest digest of the version it passed (empty if none) and
    its verdict on each attestation line."""
    if policy is None:
        return Link("signed manifest", "unverified", "no trust policy given (--trust)"), (), ()
    try:
        vb = verify_bundle(mirror, name, policy, revoked={fp: r.detail
                                                          for fp, r in revoked.items()})
    except BundleVerificationFailed as err:
        return Link("signed manifest", "failed", "; ".join(
            str(p) for p in err.report.problems)), (), err.report.statements
    except (VerificationError, CorruptMirror) as err:  # a broken or rolled-back log
        return Link("signed manifest", "failed", err.message), (), ()
    return Link("signed manifest", "ok", f"version {vb.version}, manifest "
                f"{vb.manifest_digest[:16]}…, verified by the same verifier as import/admit"), \
        (vb.record, vb.manifest_digest), vb.report.statements


def _bind_admissions(atts: Sequence[AttestationAudit], verified_manifest: str | None,
                    own: Mapping[str, int]) -> tuple[AttestationAudit, ...]:
    """An admission counts only for the manifest it names (item: admission replay);
    ``verified_manifest``: the digest of the version the verifier passed, if any."""
    out = []
    for a in atts:
        if a.predicate_type == SLSA_VSA_V1 and a.link.status == "ok":
            digest = a.summary.get("manifest_sha256")
            if verified_manifest is not None and digest == verified_manifest:
                pass
            elif isinstance(digest, str) and digest in own:
                a = replace(a, link=Link(a.link.name, "ok", f"for superseded version "
                                         f"{own[digest]}; does not admit the current one"))
            else:
                a = replace(a, link=Link(a.link.name, "failed", "admission names another "
                                         "manifest (another bundle, pairing or version) or "
                                         "none; it does not count here"))
        out.append(a)
    return tuple(out)


def audit_bundle(
    mirror: Mirror, name: str, policy: TrustPolicy | None, *, rehash: bool = True,
    events: Sequence[dict[str, Any]] = (), revoked: Mapping[str, Revocation] | None = None,
) -> BundleAudit:
    """Check every link of one bundle's chain of custody.

    ``revoked`` (fingerprint -> revocation) defaults to the trusted revocations in the
    mirror's event log.
    """
    rec = mirror.load_bundle(name)
    if revoked is None:
        revoked = revoked_keys(mirror, policy.public_keys if policy else (), policy)
    # The verifier re-hashes every byte; only when it fails does the audit hash again, to
    # name each damaged file (one read of the data for an intact bundle).
    verifier, passed, verdicts = _verifier_link(mirror, name, policy, revoked)
    rec = passed[0] if passed else rec  # the signed record, once it verified
    arts = tuple(artifact_audit(mirror, rec, a, policy, rehash=rehash and not passed,
                                proven=bool(passed)) for a in rec.artifacts)
    roots = {a.role: a.oms_root for a in arts if a.oms_root}
    atts, preds, log_problems = attestation_audits(
        mirror, rec, roots, policy, verdicts, {fp: r.detail for fp, r in revoked.items()})
    arts, atts = apply_revocations(arts, atts, revoked, policy)
    atts = _bind_admissions(atts, passed[1] if passed else None, own_manifests(mirror, name))
    scan = scan_audit(mirror, rec, atts)
    bench = bench_audits(mirror, rec, atts, preds)
    images = image_audits(mirror, rec, rehash=rehash)
    renders, alias_links = render_audits(mirror, rec)
    mine = tuple({"seq": e.get("seq"), "time": e.get("time"), "type": e.get("type"),
                  "data": e.get("data")} for e in events if e.get("bundle") == name)
    links = [Link("bundle record", "ok", f"created {rec.created}"), verifier]
    for a in arts:
        links += _artifact_links(a)
    links += [a.link for a in atts] + list(log_problems)
    links += _required(rec, {a.kind for a in atts if a.link.status != "failed"})
    links.append(scan.link)
    links += [b.link for b in bench] + [i.link for i in images] + alias_links
    if not any(e["type"] in ("pull", "import") for e in mine):
        links.append(Link("pull/import event", "missing",
                          "the event log records no pull or import of this bundle"))
    bindings = tuple({**a.summary, "line": a.line, "status": a.link.status}
                     for a in atts if a.predicate_type == PAIR_BINDING_V1)
    return BundleAudit(
        name=rec.name, method=str(rec.spec.get("speculative", {}).get("method", "")),
        created=rec.created, tool_version=rec.tool_version, artifacts=arts, scan=scan,
        attestations=atts, pair_bindings=bindings, bench_runs=bench,
        admissions=admissions(atts), renders=renders, images=images,
        events=mine, links=tuple(links),
    )


def audit(
    mirror: Mirror, subject: str, *, policy: TrustPolicy | None = None, rehash: bool = True,
    now: datetime | None = None,
) -> AuditReport:
    """Answer "where did this come from and who let it in?" for a bundle, repo or digest.

    Verifies the event log (and its signed checkpoints), then each matching bundle's links;
    whatever a key revoked in the log (by a trusted revocation) signed fails.
    ``policy`` is the current trust policy; without one, signatures stay ``unverified`` and
    the report counts as broken (fail closed).
    """
    names = resolve_subject(mirror, subject)
    keys = policy.public_keys if policy else ()
    log = verify_events(mirror, keys, floors.log_floor(policy, mirror) if policy else None,
                        policy)
    events = read_events_lenient(mirror.events_path)
    bundles = tuple(audit_bundle(mirror, n, policy, rehash=rehash, events=events,
                                 revoked=log.revocations.revoked) for n in names)
    generated = (now.isoformat().replace("+00:00", "Z") if now else utc_now())
    return AuditReport(subject, str(mirror.root), policy.source if policy else None,
                       policy.digest if policy else None, generated, bundles, log)

