"""Gather and check each kind of evidence about one bundle (the audit stage's legwork).

Every function reads one stage's output from the mirror, verifies what can be verified
(object digests, OMS signatures, DSSE signatures against the trust policy, report digests
named by signed statements) and returns typed values with a :class:`Link` status. Nothing
here trusts a file because it exists: a missing policy leaves signatures ``unverified``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from specbundle.attest import (
    KIND_BY_PREDICATE,
    SCAN_RESULT,
    Envelope,
    Statement,
    check_statement,
    open_model_sig,
    read_attestations,
)
from specbundle.attest.mirrored import bundle_manifest
from specbundle.attest.models import (
    BenchEvidenceV1,
    PairBindingV1,
    ScanResultV01,
    VerificationSummaryV1,
)
from specbundle.audit.model import (
    ArtifactAudit,
    AttestationAudit,
    FileAudit,
    Link,
    LinkStatus,
    ScanAudit,
)
from specbundle.digest import hash_files, sha256_bytes
from specbundle.errors import SpecbundleError, VerificationError
from specbundle.mirror import Mirror, versions
from specbundle.mirror.versions import SCAN_REPORT, model_sig_rel
from specbundle.record import ArtifactRecord, BundleRecord
from specbundle.scan.findings import ScanReport
from specbundle.strict import loads_json, loads_yaml, read_bounded, read_mirror_file
from specbundle.verify.anchors import open_anchored
from specbundle.verify.eligibility import (
    ArtifactRef,
    StatementVerdict,
    eligible_signers,
    statement_verdicts,
)
from specbundle.verify.policy import TrustPolicy

__all__ = [
    "Predicates", "artifact_audit", "attestation_audits", "license_of", "own_manifests", "purl",
    "scan_audit",
]

_MAX_CARD_BYTES = 16 * 1024 * 1024
_FRONT_MATTER = re.compile(rb"\A---\s*\n(.*?)\n---\s*(\n|\Z)", re.S)


def purl(repo: str, commit: str) -> str:
    """Package URL of a Hugging Face model at a commit."""
    return f"pkg:huggingface/{repo}@{commit}"


def license_of(mirror: Mirror, art: ArtifactRecord) -> tuple[str | None, str | None]:
    """License from the model card front matter, else ``config.json``; with where it was."""
    card = art.file("README.md")
    if card is not None and mirror.has_object(card.sha256):
        # a hub file: bounded read, and the strict YAML loader (alias bombs, duplicate keys)
        try:
            m = _FRONT_MATTER.match(read_bounded(mirror.object_path(card.sha256),
                                                 max_bytes=_MAX_CARD_BYTES))
            meta = loads_yaml(m.group(1), what="README.md front matter") if m else None
        except (OSError, ValueError):
            meta = None
        if isinstance(meta, dict) and meta.get("license"):
            return str(meta["license"]), "README.md front matter"
    cfg = art.file("config.json")
    if cfg is not None and mirror.has_object(cfg.sha256):
        try:
            conf = loads_json(read_bounded(mirror.object_path(cfg.sha256)), what="config.json")
        except (OSError, ValueError):
            conf = None
        if isinstance(conf, dict) and conf.get("license"):
            return str(conf["license"]), "config.json"
    return None, None


def _files(mirror: Mirror, art: ArtifactRecord, rehash: bool,
           proven: bool = False) -> tuple[FileAudit, ...]:
    """Each file's status; ``proven``: the verifier just re-hashed these very bytes."""
    present = {f.sha256: mirror.object_path(f.sha256) for f in art.files
               if mirror.has_object(f.sha256)}
    actual: dict[str, str] = {}
    if rehash and present:
        by_path = hash_files(list(present.values()))
        actual = {d: by_path[p] for d, p in present.items()}
    out: list[FileAudit] = []
    for f in art.files:
        status: LinkStatus
        got = f.sha256 if proven and f.sha256 in present else actual.get(f.sha256)
        if f.sha256 not in present:
            status = "missing"
        elif not mirror.has_object(f.sha256, f.size) or (rehash and got != f.sha256):
            status = "failed"
        else:
            status = "ok"
        out.append(FileAudit(f.path, f.size, f.sha256, f.lfs_sha256, status, got))
    return tuple(out)


def own_manifests(mirror: Mirror, name: str) -> dict[str, int]:
    """Digest -> version of every manifest this bundle ever had (to name superseded ones)."""
    out: dict[str, int] = {}
    for p in sorted((mirror.bundle_dir(name) / "versions").glob("*/manifest.json")):
        try:
            out[sha256_bytes(Envelope.from_json(loads_json(read_mirror_file(p))).payload)] = \
                int(p.parent.name)
        except (ValueError, OSError, VerificationError):
            continue
    return out


def _version_file(mirror: Mirror, name: str, rel: str) -> bytes | None:
    """A file of the bundle's current signed version (the layout lives with the mirror)."""
    try:
        v = versions.current_version(mirror, name)
    except VerificationError:
        return None
    return None if v is None else versions.read_version_file(mirror, name, v, rel)


def _model_sig(
    mirror: Mirror, rec: BundleRecord, art: ArtifactRecord, root: str, policy: TrustPolicy | None,
) -> tuple[Link, tuple[str, ...]]:
    name = f"{art.role} model.sig"
    data = _version_file(mirror, rec.name, model_sig_rel(art.role))
    if data is None:
        return Link(name, "missing", "the artifact was never signed (specbundle sign)"), ()
    if policy is None:
        return Link(name, "unverified", "no trust policy given (--trust)"), ()
    errors: list[str] = []
    for key in policy.keys:
        if key.fingerprint not in policy.model_signers:
            continue
        try:
            manifest = open_model_sig(data, key.public)
        except VerificationError as err:
            errors.append(f"{key.name}: {err.message}")
            continue
        if manifest.root_digest != root:
            return Link(name, "failed", f"signed root {manifest.root_digest} differs from the "
                        f"recorded files' root {root}"), (key.fingerprint,)
        may = eligible_signers(policy, (key.fingerprint,), bundle=rec.name, repos=(art.repo,),
                               revoked={}, model=True)  # revocations: apply_revocations
        if not may.counted:
            return Link(name, "failed", f"key {key.name} is not allowed to sign {art.repo}: "
                        f"{may.excluded[key.fingerprint]}"), (key.fingerprint,)
        return Link(name, "ok", f"signed by {key.name} ({key.fingerprint[:16]}…)"
                    + _publisher(art)), (
            key.fingerprint,)
    try:  # certificate-signed: a chain to an anchor role of the policy
        anchored = open_anchored(policy.model_anchors, data, art.repo, rec.name, None)
    except VerificationError as err:
        anchored, errors = None, [*errors, err.message]
    if anchored is not None:
        manifest, anchor, cert = anchored
        fp = cert.public.fingerprint
        if manifest.root_digest != root:
            return Link(name, "failed", f"signed root {manifest.root_digest} differs from the "
                        f"recorded files' root {root}"), (fp,)
        return Link(name, "ok", f"signed by {cert.name} (certificate, anchor {anchor.name})"
                    + _publisher(art)), (fp,)
    why = "; ".join(errors) or "no model signer in the policy"
    return Link(name, "failed", f"no trusted key verifies it (revoked or unknown): {why}"), ()


def _publisher(art: ArtifactRecord) -> str:
    """The publisher link pull verified, for the chain shown by audit."""
    p = art.publisher
    return f"; publisher {p.identity} ({p.method}, {p.issuer}) verified at pull" if p else ""


def artifact_audit(
    mirror: Mirror, rec: BundleRecord, art: ArtifactRecord, policy: TrustPolicy | None,
    *, rehash: bool, proven: bool = False,
) -> ArtifactAudit:
    """Origin, files (re-hashed), license and OMS signature of one artifact."""
    files = _files(mirror, art, rehash, proven)
    try:
        root = bundle_manifest(mirror, art).root_digest
    except SpecbundleError:
        root = ""
    sig, signers = (_model_sig(mirror, rec, art, root, policy) if root else
                    (Link(f"{art.role} model.sig", "failed", "objects missing"), ()))
    lic, lic_src = license_of(mirror, art)
    return ArtifactAudit(
        role=art.role, repo=art.repo, source=art.source, endpoint=art.endpoint,
        requested_revision=art.requested_revision, commit=art.commit,
        commit_kind=art.commit_kind, purl=purl(art.repo, art.commit), license=lic,
        license_source=lic_src, oms_root=root, files=files,
        skipped=tuple((s.path, s.reason) for s in art.skipped), model_sig=sig,
        model_sig_signers=signers,
    )


def _summary(st: Statement) -> dict[str, Any]:
    """What the report shows of a signed statement, read through its typed predicate."""
    p = st.typed
    if isinstance(p, ScanResultV01):
        return {"result": p.result,
                "report_sha256": p.specbundle_scan.report_sha256 if p.specbundle_scan else None}
    if isinstance(p, PairBindingV1):
        return p.to_predicate()
    if isinstance(p, VerificationSummaryV1):
        sb = p.specbundle
        return {"result": p.verification_result, "time": p.time_verified,
                "policy": p.policy.to_json(), "verifier": p.verifier.to_json(),
                "resourceUri": p.resource_uri,
                "manifest_sha256": sb.manifest_sha256 if sb else None,
                "outcome": sb.outcome if sb else None, "reasons": sb.reasons if sb else None}
    if isinstance(p, BenchEvidenceV1):
        return {"runId": p.run_id, "report": p.report.to_json(), "engine": p.engine}
    return {}


Predicates = tuple[tuple[str, Any], ...]


def _inputs_problem(mirror: Mirror, rec: BundleRecord, vsa: VerificationSummaryV1,
                    lines: Sequence[Envelope]) -> str | None:
    """Each VSA input (attestation line or bench report) must still hash to what was signed."""
    for item in vsa.input_attestations or ():
        uri = item.uri or ""
        want = (item.digest or {}).get("sha256")
        prefix = f"specbundle:bundle/{rec.name}/"
        if not uri.startswith(prefix) or not want:
            continue
        rel = uri[len(prefix):]
        path, _, frag = rel.partition("#")
        if path == "attestations.jsonl" and frag.isdigit():
            no = int(frag)
            got = sha256_bytes(lines[no - 1].to_line()) if 0 < no <= len(lines) else None
        else:
            data = mirror.read_bundle_file(rec.name, path)
            got = sha256_bytes(data) if data is not None else None
        if got != want:
            return f"input {rel} {'is missing' if got is None else 'changed since it was signed'}"
    return None


def _verdicts(envelopes: Sequence[Envelope], rec: BundleRecord, roots: Mapping[str, str],
              policy: TrustPolicy, revoked: Mapping[str, str]) -> dict[int, StatementVerdict]:
    """The verifier's verdicts computed by its own function, for a version it did not reach
    (no manifest, a rolled-back version): the same rule, over the record's roots."""
    arts: dict[str, ArtifactRef] = {a.role: ArtifactRef(a.role, a.repo, a.commit, roots[a.role])
                                    for a in rec.artifacts if a.role in roots}
    stmts = []
    for no, env in enumerate(envelopes, start=1):
        try:
            cs = check_statement(env, policy.public_keys)
        except VerificationError:
            continue
        if cs.signers:
            stmts.append((no, cs))
    return {v.line: v for v in statement_verdicts(stmts, policy, rec.name, arts,
                                                  datetime.now(UTC), revoked)}


def attestation_audits(
    mirror: Mirror, rec: BundleRecord, roots: Mapping[str, str], policy: TrustPolicy | None,
    verdicts: Sequence[StatementVerdict] = (), revoked: Mapping[str, str] | None = None,
) -> tuple[tuple[AttestationAudit, ...], Predicates, tuple[Link, ...]]:
    """Every line of ``attestations.jsonl`` verified, the raw predicates, and log problems.

    Whether a signed line counts is the verifier's verdict (``verdicts``, from the report
    :func:`~specbundle.verify.verify_bundle` returned); when the verifier stopped before the
    log, the verdicts come from its own :func:`~specbundle.verify.eligibility.statement_verdicts`.
    """
    problems: list[str] = []
    envelopes: Sequence[Envelope] = read_attestations(mirror, rec.name, problems=problems)
    keys = policy.public_keys if policy else ()
    out: list[AttestationAudit] = []
    raw: list[tuple[str, Any]] = []
    by_line = ({v.line: v for v in verdicts} if verdicts or policy is None
               else _verdicts(envelopes, rec, roots, policy, revoked or {}))
    for no, env in enumerate(envelopes, start=1):
        hints = tuple(s.keyid or "-" for s in env.signatures)
        try:
            checked = check_statement(env, keys)
        except VerificationError as err:
            out.append(AttestationAudit(no, "?", env.payload_type, None, (), (), hints,
                                        Link(f"attestation #{no}", "failed", err.message)))
            raw.append(("", {}))
            continue
        st = checked.statement
        kind = KIND_BY_PREDICATE.get(st.predicate_type, st.predicate_type)
        time = st.time.isoformat().replace("+00:00", "Z") if st.time else None
        signers = checked.signers
        names = tuple(k.name for fp in sorted(signers) if policy and (k := policy.key(fp)))
        unknown = tuple(s.keyid or "-" for s in env.signatures
                        if (s.keyid or "") not in signers)
        status: LinkStatus
        if policy is None:
            status, detail = "unverified", "no trust policy given (--trust)"
        elif not signers:
            status, detail = "failed", ("no signature verifies under the current policy "
                                        "(key revoked or unknown): " + "; ".join(
                                            checked.check.problems))
        elif (verdict := by_line.get(no)) is not None and verdict.superseded:
            status, detail = "ok", (f"superseded: {verdict.reason}; counts only for the "
                                    "version it names, not the current one")
        elif verdict is None or not verdict.ok:
            status, detail = "failed", (verdict.reason if verdict and verdict.reason
                                        else "the verifier did not count it")
        elif problem := (_inputs_problem(mirror, rec, st.typed, envelopes)
                         if isinstance(st.typed, VerificationSummaryV1) else None):
            status, detail = "failed", problem
        else:
            status, detail = "ok", "signed by " + ", ".join(names)
        out.append(AttestationAudit(no, kind, st.predicate_type, time, tuple(sorted(signers)),
                                    names, unknown, Link(f"{kind} #{no}", status, detail),
                                    _summary(st)))
        raw.append((st.predicate_type, dict(st.predicate)))
    return tuple(out), tuple(raw), tuple(Link("attestation log", "failed", p) for p in problems)


def scan_audit(
    mirror: Mirror, rec: BundleRecord, attestations: Sequence[AttestationAudit],
) -> ScanAudit:
    """The scan report, and whether a verified scan attestation names its exact digest."""
    raw = _version_file(mirror, rec.name, SCAN_REPORT)
    if raw is None:
        return ScanAudit(False, None, None, {}, (), (), "", "",
                         Link("scan report", "missing", "the bundle was never scanned"))
    digest = sha256_bytes(raw)
    try:
        report = ScanReport.from_bytes(raw)
    except SpecbundleError as err:
        return ScanAudit(True, digest, None, {}, (), (), "", "",
                         Link("scan report", "failed", err.message))
    scanners = tuple({"tool": s.tool, "version": s.version, "status": s.status}
                     for s in report.second_opinions)
    scanners = ({"tool": "specbundle", "version": report.tool_version, "status": "ran"},
                *scanners)
    named = [a for a in attestations if a.predicate_type == SCAN_RESULT
             and a.summary.get("report_sha256") == digest]
    if not named:
        link = Link("scan report", "failed" if any(
            a.predicate_type == SCAN_RESULT for a in attestations) else "missing",
            f"no scan attestation names this report's digest {digest}")
    elif any(a.link.status == "ok" for a in named):
        link = Link("scan report", "ok", f"digest {digest[:16]}… named by a verified attestation")
    else:
        link = Link("scan report", named[0].link.status, named[0].link.detail)
    if report.blocked and link.status == "ok":
        link = Link("scan report", "failed", "the scan report blocks this bundle")
    return ScanAudit(True, digest, report.blocked, report.counts(),
                     tuple(f.to_json() for f in report.findings), scanners,
                     report.tool_version, report.scanned_at, link)
