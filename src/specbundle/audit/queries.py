"""The questions an auditor asks across all bundles of a mirror.

* :func:`bundles_using_digest`: which bundles carry a file, commit, OMS root or image archive;
* :func:`admitted_by`: which drafts a given key admitted (signature verified with that key);
* :func:`admissions_older_than`: bundles whose newest admission is older than N days;
* :func:`no_longer_verifying`: bundles whose signatures fail under the *current* policy
  (a key removed from it, or revoked by a trusted ``revocation`` event of the log), naming
  each failing signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from specbundle.attest import check_statement, read_attestations
from specbundle.attest.mirrored import bundle_manifest
from specbundle.attest.models import VerificationSummaryV1
from specbundle.audit.collect import own_manifests
from specbundle.audit.model import Link
from specbundle.audit.revocation import revoked_keys
from specbundle.audit.trail import audit_bundle
from specbundle.errors import SpecbundleError, UsageError, VerificationError
from specbundle.image_record import read_image_records
from specbundle.mirror import Mirror, versions
from specbundle.verify.policy import TrustedKey, TrustPolicy

__all__ = [
    "Admission",
    "DigestUse",
    "Unverifiable",
    "admissions_older_than",
    "admitted_by",
    "bundles_using_digest",
    "no_longer_verifying",
]


@dataclass(frozen=True)
class DigestUse:
    """Where a digest occurs in a bundle."""

    bundle: str
    role: str
    what: str
    repo: str
    commit: str

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Admission:
    """One admission decision (SLSA VSA) and the draft it let in."""

    bundle: str
    line: int
    result: str
    time: str | None
    target: str
    draft: str | None
    signers: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {**self.__dict__, "signers": list(self.signers)}


@dataclass(frozen=True)
class Unverifiable:
    """A bundle whose signatures no longer verify, and exactly which ones."""

    bundle: str
    failing: tuple[Link, ...]

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"bundle": self.bundle,
                "failing": [{"name": x.name, "status": x.status, "detail": x.detail}
                            for x in self.failing]}


def bundles_using_digest(mirror: Mirror, digest: str) -> tuple[DigestUse, ...]:
    """Bundles with a file, commit, OMS root digest or image archive equal to ``digest``."""
    digest = digest.removeprefix("sha256:").lower()
    if len(digest) < 7:
        raise UsageError("give at least 7 hex digits of the digest")
    out: list[DigestUse] = []
    for name in mirror.bundle_names():
        rec = mirror.load_bundle(name)
        for art in rec.artifacts:
            hits = [f"file {f.path}" for f in art.files if f.sha256 == digest]
            if art.commit.startswith(digest):
                hits.append("commit")
            if len(digest) == 64:
                try:
                    if bundle_manifest(mirror, art).root_digest == digest:
                        hits.append("OMS root digest")
                except SpecbundleError:
                    pass
            out += [DigestUse(name, art.role, h, art.repo, art.commit) for h in hits]
        try:
            images = read_image_records(mirror, name)
        except SpecbundleError:
            images = {}
        out += [DigestUse(name, "image", f"{e} image archive", r.reference, r.image_id)
                for e, r in images.items()
                if digest in (r.archive_sha256, r.image_id.removeprefix("sha256:"))]
    return tuple(out)


def _key(policy: TrustPolicy, who: str) -> TrustedKey:
    key = next((k for k in policy.keys if who in (k.name, k.fingerprint)), None)
    if key is None:
        raise UsageError(f"no key named {who!r} in the trust policy {policy.source}",
                         hint="name a key by its policy name or full fingerprint")
    return key


def _admissions(mirror: Mirror, policy: TrustPolicy) -> list[Admission]:
    out: list[Admission] = []
    for name in mirror.bundle_names():
        rec = mirror.load_bundle(name)
        own = own_manifests(mirror, name)
        try:
            cur = versions.current_version(mirror, name)
        except VerificationError:
            cur = None
        current = next((d for d, v in own.items() if v == cur), None)
        for line, env in enumerate(read_attestations(mirror, name, problems=[]), start=1):
            try:
                checked = check_statement(env, policy.public_keys)
            except VerificationError:
                continue
            st = checked.statement
            vsa = st.typed if checked.signers else None
            if not isinstance(vsa, VerificationSummaryV1):
                continue
            if current is None or vsa.specbundle is None \
                    or vsa.specbundle.manifest_sha256 != current:
                continue  # an admission counts only for the manifest it names
            time = st.time.isoformat().replace("+00:00", "Z") if st.time else None
            out.append(Admission(
                name, line, vsa.verification_result, time,
                f"{rec.target.repo}@{rec.target.commit}",
                f"{rec.draft.repo}@{rec.draft.commit}" if rec.draft else None,
                tuple(sorted(checked.signers))))
    return out


def admitted_by(mirror: Mirror, policy: TrustPolicy, who: str) -> tuple[Admission, ...]:
    """PASSED admissions whose signature verifies with the key named ``who``."""
    key = _key(policy, who)
    return tuple(a for a in _admissions(mirror, policy)
                 if key.fingerprint in a.signers and a.result == "PASSED")


def admissions_older_than(
    mirror: Mirror, policy: TrustPolicy, days: float, *, now: datetime | None = None,
) -> tuple[Admission, ...]:
    """Each bundle's newest verified PASSED admission, where it is older than ``days``.

    An admission without a readable time counts as old (it cannot prove it is recent).
    """
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    newest: dict[str, Admission] = {}
    for a in _admissions(mirror, policy):
        if a.result != "PASSED":
            continue
        cur = newest.get(a.bundle)
        if cur is None or (a.time or "") > (cur.time or ""):
            newest[a.bundle] = a
    return tuple(a for a in newest.values()
                 if a.time is None or datetime.fromisoformat(a.time.replace("Z", "+00:00"))
                 < cutoff)


def no_longer_verifying(mirror: Mirror, policy: TrustPolicy) -> tuple[Unverifiable, ...]:
    """Bundles with a model.sig or attestation that fails under ``policy`` or was signed by a
    revoked key (no re-hash)."""
    out: list[Unverifiable] = []
    revoked = revoked_keys(mirror, policy.public_keys, policy)
    for name in mirror.bundle_names():
        ba = audit_bundle(mirror, name, policy, rehash=False, revoked=revoked)
        sig_links = [a.model_sig for a in ba.artifacts] + [a.link for a in ba.attestations]
        failing = tuple(x for x in sig_links if x.status == "failed")
        if failing:
            out.append(Unverifiable(name, failing))
    return tuple(out)
