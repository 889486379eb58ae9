"""Stage 3: sign model directories and pulled bundles (connected side).

:func:`sign_model` writes an OMS ``model.sig`` for any directory (the surface an OMS
conformance adapter drives). :func:`sign_bundle` signs a pulled bundle: one ``model.sig`` per
artifact under ``bundles/<name>/sign/<role>/`` (outside the signed file set), then appends
fetch provenance, scan result and pair binding to ``attestations.jsonl``, then a ``sign``
event, all under the mirror lock. Digests come from the bundle record (pull verified them
while streaming) unless ``rehash`` asks to read every object again, in parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specbundle import _faults
from specbundle._fsutil import atomic_write_bytes, canonical_json
from specbundle.attest import (
    OmsManifest,
    SigningKey,
    append_attestation,
    build_model_sig,
    check_attestation_log,
    sign_statement,
)
from specbundle.attest.manifest import build_manifest, parse_manifest_unverified
from specbundle.attest.mirrored import bundle_manifest
from specbundle.attest.modeldir import hash_model_tree, scan_model_dir
from specbundle.digest import sha256_bytes
from specbundle.errors import ScanBlocked, UsageError, VerificationError
from specbundle.image_record import bundle_image_bytes
from specbundle.mirror import Mirror, utc_now, versions
from specbundle.mirror.eventlog import read_events
from specbundle.mirror.versions import SCAN_REPORT, model_sig_rel
from specbundle.record import BundleRecord
from specbundle.scan.findings import ScanReport
from specbundle.sign.statements import fetch_provenance, pair_binding, scan_result
from specbundle.strict import MalformedDocument

__all__ = [
    "SCAN_REPORT",
    "SignedBundle",
    "SignedModel",
    "model_sig_rel",
    "sign_bundle",
    "sign_model",
]

Progress = Callable[[int], None]


_faults.register("sign.model-sig-written", "sign.attestations-appended",
                 "sign.manifest-written")


def _next_version(mirror: Mirror, name: str) -> tuple[int, str | None]:
    """The version to write and the current manifest's digest (caller holds the lock).

    Versions above ``current`` were left by a writer that died before its flip: never
    visible, so they are reclaimed and their number is used again.
    """
    cur = versions.read_current_manifest(mirror, name)
    versions.reclaim_unflipped(mirror, name)
    if cur is None:
        return 1, None
    where = f"bundles/{name}/{versions.manifest_rel(cur[0])}"
    try:
        man = parse_manifest_unverified(cur[1])
    except (VerificationError, MalformedDocument) as err:
        why = (str(err).splitlines() or ["malformed"])[0][:200]
        raise VerificationError(f"{where} is corrupt: {why}",
                                hint="restore the bundle from a transfer set; a new version "
                                     "cannot chain to a corrupt one") from None
    if man.bundle != name or man.version != cur[0]:
        raise VerificationError(f"{where} names bundle {man.bundle!r} version {man.version}",
                                hint="restore the bundle from a transfer set")
    return cur[0] + 1, man.digest


def _manifest_envelope(rec: BundleRecord, roots: dict[str, str], report_sha: str | None,
                       images: dict[str, bytes], keys: Sequence[SigningKey], now: str,
                       version: int, previous: str | None) -> bytes:
    """The version's signed manifest, chained to the previous one."""
    st = build_manifest(rec, roots, version=version, previous=previous,
                        scan_report_sha256=report_sha,
                        images={e: sha256_bytes(b) for e, b in images.items()}, now=now)
    return canonical_json(sign_statement(st, keys).to_json()) + b"\n"


@dataclass(frozen=True)
class SignedModel:
    """A written ``model.sig`` and the manifest it signs."""

    signature: Path
    manifest: OmsManifest


@dataclass(frozen=True)
class SignedBundle:
    """Proof that :func:`sign_bundle` ran: roots, signatures, attestation log lines."""

    name: str
    roots: dict[str, str]
    signatures: dict[str, Path]
    attestation_lines: tuple[int, ...]
    signers: tuple[str, ...]
    scanned: bool


def sign_model(
    model_dir: Path, key: SigningKey, *, signature: Path | None = None,
    ignore_paths: Iterable[str | Path] = (), ignore_git_paths: bool = True,
    allow_symlinks: bool = False, workers: int | None = None, progress: Progress | None = None,
) -> SignedModel:
    """Hash ``model_dir`` (files in parallel) and write its OMS signature.

    Raises:
        UsageError: empty model, symlinks without ``allow_symlinks``, special files, or a key
            OMS does not allow (Ed25519).
    """
    sig = signature or model_dir / "model.sig"
    tree = scan_model_dir(model_dir, ignore_paths=ignore_paths, ignore_git_paths=ignore_git_paths,
                          allow_symlinks=allow_symlinks, signature=sig)
    if tree.refused:
        raise UsageError(f"cannot sign {model_dir}: "
                         + "; ".join(f"{p}: {why}" for p, why in tree.refused))
    if not tree.files:
        raise UsageError(f"refusing to sign an empty model directory {model_dir}",
                         hint="OMS v1.0 requires at least one file")
    manifest = hash_model_tree(tree, workers=workers, progress=progress)
    data = build_model_sig(manifest, key)
    atomic_write_bytes(sig, data)
    return SignedModel(sig, manifest)


def _read_scan(mirror: Mirror, name: str) -> tuple[ScanReport | None, bytes | None]:
    raw = mirror.read_bundle_file(name, SCAN_REPORT)
    if raw is None:
        return None, None
    return ScanReport.from_bytes(raw), raw


def _check_scan_matches(report: ScanReport, rec: BundleRecord) -> None:
    """A scan of other bytes (a re-pulled bundle, a copied report) must not be attested."""
    want = {a.role: f"{a.repo}@{a.commit}" for a in rec.artifacts}
    if report.subject != rec.name or (report.artifacts and dict(report.artifacts) != want):
        raise UsageError(
            f"scan report is for {report.subject!r} {dict(report.artifacts)}, not for bundle "
            f"{rec.name!r} {want}; refusing to sign a stale scan", hint="run `specbundle scan`")


def sign_bundle(
    mirror: Mirror, name: str, keys: Sequence[SigningKey], *, allow_unscanned: bool = False,
    rehash: bool = False, workers: int | None = None, progress: Progress | None = None,
) -> SignedBundle:
    """Sign a pulled bundle: model.sig per artifact + three attestations + a ``sign`` event.

    The first key signs ``model.sig`` (the reference verifier checks one signature only);
    every key signs each attestation, so k-of-n approvals can be met in one run.

    Raises:
        ScanBlocked: the scan report blocks (never signed, whatever the flags).
        UsageError: no scan report and not ``allow_unscanned``; no key; a non-ECDSA first key.
    """
    if not keys:
        raise UsageError("no signing key given", hint="pass --key KEY.pem")
    rec: BundleRecord = mirror.load_bundle(name)
    report, report_raw = _read_scan(mirror, name)
    report_sha = sha256_bytes(report_raw) if report_raw is not None else None
    if report is None and not allow_unscanned:
        raise UsageError(f"bundle {name!r} has no scan report ({SCAN_REPORT}); refusing to sign",
                         hint="run `specbundle scan` first, or pass --allow-unscanned "
                              "(recorded as a FAILED scan attestation)")
    if report is not None:
        _check_scan_matches(report, rec)
    if report is not None and report.blocked:
        raise ScanBlocked(f"bundle {name!r}: the scan report blocks "
                          f"({len(report.blocking())} finding(s) at or above "
                          f"{report.fail_on.value}); refusing to sign")
    manifests: dict[str, OmsManifest] = {
        a.role: bundle_manifest(mirror, a, rehash=rehash, workers=workers, progress=progress)
        for a in rec.artifacts}
    roots: dict[str, str] = {role: m.root_digest for role, m in manifests.items()}
    sigs = {role: build_model_sig(m, keys[0]) for role, m in manifests.items()}
    now = utc_now()
    statements = [fetch_provenance(rec, a, roots[a.role]) for a in rec.artifacts]
    statements.append(scan_result(rec, roots, report, report_sha or "", now))
    statements.append(pair_binding(rec, roots, now))
    envelopes = [sign_statement(st, keys) for st in statements]
    images = bundle_image_bytes(mirror, name)
    with mirror.lock():
        # both logs are checked before anything is committed: a log with damage before its
        # tail is never extended, and a version must not become current without its event
        check_attestation_log(mirror, name)
        read_events(mirror.events_path)
        version, previous = _next_version(mirror, name)
        vrel = versions.version_rel(version)
        paths: dict[str, Path] = {role: mirror.write_bundle_file(
            name, f"{vrel}/{model_sig_rel(role)}", data) for role, data in sigs.items()}
        if report_raw is not None:
            mirror.write_bundle_file(name, f"{vrel}/{SCAN_REPORT}", report_raw)
        for engine, data in images.items():
            mirror.write_bundle_file(name, f"{vrel}/images/{engine}.json", data)
        _faults.point("sign.model-sig-written")
        lines = tuple(append_attestation(mirror, name, env) for env in envelopes)
        _faults.point("sign.attestations-appended")
        manifest = _manifest_envelope(rec, roots, report_sha, images, keys, now, version,
                                      previous)
        versions.write_manifest(mirror, name, version, manifest)
        _faults.point("sign.manifest-written")
        versions.flip_current(mirror, name, version)
        mirror.append_event("sign", name, {
            "roots": roots, "signers": [k.fingerprint for k in keys],
            "model_sig": {r: sha256_bytes(d) for r, d in sigs.items()},
            "attestations": [sha256_bytes(e.to_line()) for e in envelopes],
            "scan_report_sha256": report_sha, "unscanned": report is None,
            "version": version, "manifest_sha256": sha256_bytes(manifest),
        })
    return SignedBundle(name, roots, paths, lines, tuple(k.fingerprint for k in keys),
                        report is not None)
