"""The bundle manifest: one signed, immutable statement per bundle version.

Everything that changes what reaches the GPUs is under this one signature: bundle name and
version, the previous version's manifest digest (a chain, so a version cannot be silently
replaced), the whole spec (canonical JSON text, so floats survive exactly: admission
thresholds, engine settings), both artifacts as pulled (repo, resolved commit, file selection,
per-file digests) with their OMS root digests, method, the scan report's digest and the image
records' digests. Verification builds the bundle from this statement, never from the unsigned
``bundle.json``; the *manifest digest* is the sha256 of the signed payload bytes, and later
statements (admission) name it to count only for this version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specbundle import ids
from specbundle.attest.dsse import Envelope
from specbundle.attest.models import BundleManifestV1, WrongPredicateType
from specbundle.attest.models.own import ScanReportRef
from specbundle.attest.predicates import BUNDLE_MANIFEST_V1
from specbundle.attest.statement import Statement, Subject, artifact_subjects, parse_statement
from specbundle.digest import sha256_bytes
from specbundle.errors import MirrorError, VerificationError
from specbundle.record import BundleRecord
from specbundle.strict import MalformedDocument, loads_json

__all__ = ["BUNDLE_MANIFEST_V1", "BundleManifest", "build_manifest", "parse_manifest",
           "parse_manifest_unverified", "spec_sha256"]



@dataclass(frozen=True)
class BundleManifest:
    """A parsed manifest: the signed bundle version (call only on verified payload bytes)."""

    bundle: str
    version: int
    previous: str | None
    record: BundleRecord
    roots: Mapping[str, str]
    scan_report_sha256: str | None
    images: Mapping[str, str]
    digest: str
    time: str
    #: sha256 of the signed spec text: what approval statements name to bind the spec
    spec_sha256: str = ""

    @property
    def repos(self) -> tuple[str, ...]:
        """Every artifact repo (the key scope check needs all of them)."""
        return tuple(a.repo for a in self.record.artifacts)


def _spec_text(spec: Mapping[str, Any]) -> str:
    # JSON text keeps floats exact and the statement itself float-free (canonical JSON).
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def spec_sha256(spec: Mapping[str, Any]) -> str:
    """The digest of a spec as a manifest signs it (its canonical JSON text)."""
    return sha256_bytes(_spec_text(spec).encode())


def build_manifest(
    rec: BundleRecord, roots: Mapping[str, str], *, version: int, previous: str | None,
    scan_report_sha256: str | None, images: Mapping[str, str], now: str,
) -> Statement:
    """The manifest statement for one version of ``rec`` (subjects: every artifact root)."""
    record = rec.to_json()
    record.pop("spec")
    spec_text = _spec_text(rec.spec)
    subjects = [Subject(f"specbundle:bundle/{rec.name}", {"sha256": sha256_bytes(
        spec_text.encode())})]
    for a in rec.artifacts:
        subjects += artifact_subjects(a.repo, roots[a.role], a.commit, a.commit_kind)
    spec_spec = rec.spec.get("speculative") or {}
    predicate = BundleManifestV1(
        bundle=rec.name, version=version, previous_manifest=previous, spec=spec_text,
        record=record, roots=dict(roots),
        method=spec_spec.get("method") if isinstance(spec_spec, dict) else None,
        scan_report=ScanReportRef(sha256=scan_report_sha256) if scan_report_sha256 else None,
        images=dict(images), time_created=now,
    )
    return Statement.of(subjects, predicate)


def _check_ids(rec: BundleRecord) -> None:
    ids.check_bundle_name(rec.name)
    for a in rec.artifacts:
        ids.check_repo(a.repo)
        ids.check_commit(a.commit)
        for f in a.files:
            ids.check_rel_path(f.path)
            ids.check_digest(f.sha256)


def parse_manifest(st: Statement, payload: bytes) -> BundleManifest:
    """Validate a manifest predicate; every defect is a :class:`VerificationError`."""
    if st.predicate_type != BUNDLE_MANIFEST_V1:
        raise WrongPredicateType(f"manifest has predicate type {st.predicate_type!r}, "
                                 f"expected {BUNDLE_MANIFEST_V1!r}", st.predicate_type)
    try:
        p = st.typed_as(BundleManifestV1)
        spec = loads_json(p.spec, what="manifest spec")
        if not isinstance(spec, dict):
            raise ValueError("the spec is not a mapping")
        rec = BundleRecord.from_json({**p.record, "spec": spec})
        _check_ids(rec)
        roots = {k: ids.check_digest(v) for k, v in p.roots.items()}
        if set(roots) != {a.role for a in rec.artifacts} or rec.name != p.bundle:
            raise ValueError("roots or bundle name disagree with the record")
        scan_sha = ids.check_digest(p.scan_report.sha256) if p.scan_report else None
        images = {k: ids.check_digest(v) for k, v in p.images.items()}
        if p.version < 1:
            raise ValueError(f"version {p.version!r} is not a positive integer")
        if p.previous_manifest is not None:
            ids.check_digest(p.previous_manifest)
        return BundleManifest(rec.name, p.version, p.previous_manifest, rec, roots, scan_sha,
                              images, sha256_bytes(payload), p.time_created,
                              sha256_bytes(p.spec.encode()))
    except (KeyError, TypeError, ValueError, MalformedDocument, AttributeError, MirrorError,
            VerificationError) as err:
        what = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        if isinstance(err, VerificationError):
            what = err.message
        raise VerificationError(f"bundle manifest is malformed: {what}") from err


def parse_manifest_unverified(envelope_bytes: bytes) -> BundleManifest:
    """The manifest this (own, connected-side) mirror signed, without checking signatures.

    For export only: what it writes is verified again, in full, by every importer.
    """
    try:
        env = Envelope.from_json(loads_json(envelope_bytes, what="bundle manifest"))
    except MalformedDocument as err:
        raise VerificationError(str(err)) from None
    return parse_manifest(parse_statement(env.payload), env.payload)
