"""The two things a diff compares: one bundle version each, read from wherever it lies.

A :class:`Side` is a signed version in the mirror (``3``, ``current``), the unsigned working
record the next ``sign`` would seal (``working``), another bundle's version (``other@2``), or
the version a transfer set carries before it is imported (a folder holding ``index.json``),
or the version a registry holds before it is pulled (``oci://REGISTRY/REPO:TAG``).
Every byte read here is untrusted: manifests are parsed by the same strict parser verify
uses (identifiers checked before they reach a path), and a signature is reported as
*verified* only when it checks against a key of the trust policy given; without one, the
signatures are listed as the unauthenticated claims they are. A registry's version is
never compared unverified: it is fetched and verified exactly as ``oci pull`` does, into a
staging copy that lives until the comparison is done, so a policy is required for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from specbundle import ids
from specbundle.attest import KIND_BY_PREDICATE, Envelope, check_statement, parse_statement
from specbundle.attest.manifest import BundleManifest, parse_manifest
from specbundle.digest import sha256_bytes
from specbundle.errors import MirrorError, SpecbundleError, UsageError, VerificationError
from specbundle.mirror import Mirror, versions
from specbundle.mirror.versions import SCAN_REPORT, manifest_rel, version_rel
from specbundle.oci import Backend, look_bundle
from specbundle.record import BundleRecord
from specbundle.scan.findings import ScanReport
from specbundle.strict import MalformedDocument, loads_json, read_bounded, read_mirror_file
from specbundle.transfer import read_index
from specbundle.verify.policy import TrustPolicy

__all__ = ["COVERS", "OCI_PREFIX", "OciAccess", "Side", "SignatureClaim", "StoreOpener",
           "load_side", "read_limited"]

#: Largest object read to compare its content (tokenizer_config.json with a chat template).
MAX_COMPARED_BYTES = 4 * 1024 * 1024
_ATTESTATIONS = "attestations.jsonl"

Reader = Callable[[str], bytes | None]
#: What makes a diff operand a registry reference: ``oci://REGISTRY/REPO[:TAG][@sha256:HEX]``.
OCI_PREFIX = "oci://"
#: REGISTRY/REPO:TAG -> the open store and the reference (tag or digest) to read in it.
StoreOpener = Callable[[str], AbstractContextManager[tuple[Backend, str]]]


@dataclass(frozen=True)
class OciAccess:
    """How ``oci://`` operands are reached, and what keeps their verified copies until the
    comparison is done (closing ``stack`` closes the stores and removes the copies)."""

    open_store: StoreOpener
    stack: ExitStack


@dataclass(frozen=True)
class SignatureClaim:
    """One signature a side carries: on what, by which key, and whether it was checked."""

    what: str          # "manifest" or a statement kind (fetch-provenance, scan-result, ...)
    covers: str        # "whole manifest", "artifacts", "target+draft pair", "bundle version"
    keyid: str         # verified fingerprint, or the envelope's unauthenticated hint
    key: str | None    # the policy's name for the key, when one verified it
    verified: bool | None  # None: no trust policy given, nothing was checked


@dataclass(frozen=True)
class Side:
    """One bundle version, as far as a diff or a review needs it."""

    label: str
    record: BundleRecord
    version: int | None
    manifest_digest: str | None
    created: str
    roots: Mapping[str, str]
    images: Mapping[str, str]
    scan: ScanReport | None
    scan_note: str | None
    signatures: tuple[SignatureClaim, ...]
    read_object: Reader

    @property
    def name(self) -> str:
        """The bundle name."""
        return self.record.name


#: What a signature of each kind vouches for: the manifest binds everything that changes what
#: runs (spec, thresholds, engine settings, artifacts); statements bind artifact digests only.
COVERS = {"manifest": "whole manifest (spec, thresholds, engines, artifacts)",
          "fetch-provenance": "artifacts", "scan-result": "artifacts",
           "pair-binding": "target+draft pair", "tune-schedule": "artifacts (schedule)",
           "bench-evidence": "artifacts", "admission": "artifacts"}


def _claims(env: Envelope, what: str, covers: str, policy: TrustPolicy | None
            ) -> list[SignatureClaim]:
    if policy is None:
        return [SignatureClaim(what, covers, ids.printable(s.keyid or "?")[:64], None, None)
                for s in env.signatures]
    cs = check_statement(env, policy.public_keys)
    out = []
    for fp in sorted(cs.signers):
        key = policy.key(fp)
        out.append(SignatureClaim(what, covers, fp, key.name if key else None, True))
    # a valid signature may carry no (or another) keyid hint: only the surplus is unverified
    unverified = [s for s in env.signatures if (s.keyid or "") not in cs.signers]
    out += [SignatureClaim(what, covers, ids.printable(s.keyid or "?")[:64], None, False)
            for s in unverified[:max(0, len(env.signatures) - len(cs.signers))]]
    return out


def _envelope(data: bytes, what: str) -> Envelope:
    try:
        return Envelope.from_json(loads_json(data, what=what))
    except (MalformedDocument, ValueError) as err:
        raise VerificationError(f"{what}: {err}") from None


def _attestation_claims(raw: bytes | None, roots: Mapping[str, str],
                        policy: TrustPolicy | None) -> list[SignatureClaim]:
    """Claims of the log's statements that name one of this version's artifact roots."""
    out: dict[SignatureClaim, None] = {}  # each sign run repeats them: list each claim once
    for line in (raw or b"").splitlines():
        if not line.strip():
            continue
        try:
            env = _envelope(line, _ATTESTATIONS)
            st = parse_statement(env.payload)
        except (VerificationError, ValueError):
            continue  # verify reports malformed lines; a diff only lists what it can read
        if not set(roots.values()) & st.digests("sha256"):
            continue
        kind = KIND_BY_PREDICATE.get(st.predicate_type, "other")
        named = "+".join(r for r in ("target", "draft") if roots.get(r) in st.digests("sha256"))
        covers = COVERS.get(kind, "artifacts")
        covers = f"{covers} ({named})" if covers.startswith("artifacts") else covers
        out.update(dict.fromkeys(_claims(env, kind, covers, policy)))
    return list(out)


def _scan(raw: bytes | None, signed: str | None) -> tuple[ScanReport | None, str | None]:
    if raw is None:
        return None, "no scan report"
    if signed is not None and sha256_bytes(raw) != signed:
        return None, "scan report differs from the one the manifest signs"
    try:
        return ScanReport.from_bytes(raw), None
    except SpecbundleError as err:
        return None, err.message


def _signed_side(label: str, read: Reader, read_object: Reader, version: int,
                 policy: TrustPolicy | None, images: Mapping[str, bytes]) -> Side:
    data = read(manifest_rel(version))
    if data is None:
        raise UsageError(f"{label}: no manifest for version {version}")
    env = _envelope(data, f"{label} manifest")
    try:
        st = parse_statement(env.payload)
    except ValueError as err:
        raise VerificationError(f"{label} manifest: {err}") from None
    man: BundleManifest = parse_manifest(st, env.payload)
    scan, note = _scan(read(version_rel(version, SCAN_REPORT)), man.scan_report_sha256)
    sigs = _claims(env, "manifest", COVERS["manifest"], policy)
    sigs += _attestation_claims(read(_ATTESTATIONS), man.roots, policy)
    changed = sorted(e for e, b in images.items() if man.images.get(e) != sha256_bytes(b))
    if changed:
        note = "; ".join(filter(None, [note, f"image record(s) {changed} differ from signed"]))
    return Side(label, man.record, man.version, man.digest, man.time, dict(man.roots),
                dict(man.images), scan, note, tuple(sigs), read_object)


def _object_bytes(path: Path) -> bytes | None:
    """An object's bytes for the text diff (None when absent or too large to compare); a
    FIFO, device or link planted in its place is refused, never read."""
    try:
        if os.lstat(path).st_size > MAX_COMPARED_BYTES:
            return None
        return read_mirror_file(path, max_bytes=MAX_COMPARED_BYTES, what=str(path))
    except MalformedDocument as err:
        raise VerificationError(str(err)) from None
    except OSError:
        return None


def _record_bytes(path: Path) -> bytes:
    try:
        return read_mirror_file(path, what=str(path))
    except (MalformedDocument, OSError) as err:
        raise VerificationError(f"cannot read image record {path}: {err}") from None


def _mirror_object(mirror: Mirror) -> Reader:
    def read(sha: str) -> bytes | None:
        path = mirror.object_path(sha)
        return _object_bytes(path)
    return read


def _mirror_side(mirror: Mirror, name: str, ref: str, policy: TrustPolicy | None) -> Side:
    try:
        ids.check_bundle_name(name)
    except ValueError as err:
        raise UsageError(str(err)) from None
    read: Reader = lambda rel: mirror.read_bundle_file(name, rel)  # noqa: E731
    if ref == "working":
        rec = mirror.load_bundle(name)
        scan, note = _scan(read(SCAN_REPORT), None)
        imgs = mirror.bundle_dir(name) / "images"
        images = {p.stem: sha256_bytes(_record_bytes(p)) for p in sorted(imgs.glob("*.json"))
                  if p.is_file() and not p.is_symlink()} if imgs.is_dir() else {}
        return Side(f"{name} working (unsigned)", rec, None, None, rec.created, {}, images,
                    scan, note, (), _mirror_object(mirror))
    cur = versions.current_version(mirror, name)
    if cur is None:
        mirror.load_bundle(name)  # BundleNotFound for an unknown name
        raise UsageError(f"bundle {name!r} has no signed version", hint="compare 'working'")
    version = _version(ref, cur, name)
    return _signed_side(f"{name} v{version}", read, _mirror_object(mirror), version, policy,
                        versions.version_images(mirror, name, version))


def _version(ref: str, current: int, name: str) -> int:
    text = ref.removeprefix("v")
    if ref == "current":
        return current
    if ref == "previous":
        text = str(current - 1)
    if not text.isdigit() or not 1 <= int(text) <= current:
        raise UsageError(f"bundle {name!r}: no version {ref!r} (versions 1..{current}, "
                         "current, previous, working)")
    return int(text)


def _transfer_side(folder: Path, policy: TrustPolicy | None) -> Side:
    """The version a transfer set carries; its index is verified when a policy is given."""
    bundle = folder / "bundle"
    signed: dict[str, str] | None = None
    if policy is not None:  # then every file read must be the one the signed index names
        signed = {p.path: p.sha256 for p in read_index(folder, policy)[0].parts}
    if not bundle.is_dir():
        raise UsageError(f"{folder}: no bundle/ folder (a chunked transfer set?)",
                         hint="diff a transfer set exported without --chunk-size, or import it")

    def read(rel: str) -> bytes | None:
        path = bundle / ids.check_rel_path(rel)
        try:
            data = read_bounded(path, what=rel, max_bytes=256 * 1024 * 1024)
        except FileNotFoundError:
            return None
        except MalformedDocument as err:
            raise VerificationError(f"{folder}: {err}") from None
        want = None if signed is None else signed.get(f"bundle/{rel}")
        if signed is not None and want != sha256_bytes(data):
            raise VerificationError(f"{folder}: bundle/{rel} is not the file its signed index "
                                    "names", hint="the transfer set was changed after export")
        return data

    def read_object(sha: str) -> bytes | None:
        path = folder / "objects" / ids.check_digest(sha)
        return _object_bytes(path)

    raw = read(versions.CURRENT_REF)
    text = (raw or b"").decode("ascii", errors="replace").strip()
    if not text.isdigit():
        raise VerificationError(f"{folder}: bundle/current is missing or corrupt")
    images_dir = bundle / version_rel(int(text), "images")
    images = {p.stem: _record_bytes(p) for p in sorted(images_dir.glob("*.json"))
              if p.is_file() and not p.is_symlink()} if images_dir.is_dir() else {}
    side = _signed_side(f"transfer set {folder.name}", read, read_object, int(text), policy,
                        images)
    return side


def _oci_side(mirror: Mirror, ref: str, policy: TrustPolicy | None,
              oci: OciAccess | None) -> Side:
    """A registry's version, verified as ``oci pull`` verifies it, then read like the mirror's."""
    if oci is None:
        raise UsageError(f"{ref!r}: registry references are not read here")
    if policy is None:
        raise UsageError(f"{ref!r}: a bundle in a registry is compared only once it verifies",
                         hint="give the trust policy: --trust trust.yaml")
    text = ref.removeprefix(OCI_PREFIX)
    store, reference = oci.stack.enter_context(oci.open_store(text))
    verified = oci.stack.enter_context(look_bundle(store, reference, mirror, policy))
    side = _mirror_side(verified.mirror, verified.name, str(verified.version), policy)
    return replace(side, label=f"{side.label} at {text}")


def load_side(mirror: Mirror, bundle: str, ref: str, policy: TrustPolicy | None, *,
              oci: OciAccess | None = None) -> Side:
    """Resolve one diff operand.

    ``ref``: ``N``/``vN``, ``current``, ``previous``, ``working``, ``OTHER`` or ``OTHER@N``
    (another bundle of the mirror), the path of a transfer set folder, or ``oci://`` and a
    registry reference (read through ``oci``, verified under ``policy`` first).

    Raises:
        UsageError: a reference that names nothing; a registry reference without a policy.
        VerificationError: a manifest that is malformed; a registry's bundle that does not
            verify (exit 3).
        BundleNotFound: a bundle name the mirror does not hold.
    """
    if ref.startswith(OCI_PREFIX):
        return _oci_side(mirror, ref, policy, oci)
    path = Path(ref)
    if ("/" in ref or ref.startswith(".")) and (path / "index.json").is_file():
        return _transfer_side(path, policy)
    if "/" in ref:
        raise UsageError(f"{ref!r} is not a transfer set folder (no index.json)",
                         hint=f"a registry reference is written {OCI_PREFIX}REGISTRY/REPO:TAG")
    name, _, version = ref.partition("@")
    if version or (name and not name.lstrip("v").isdigit()
                   and name not in ("current", "previous", "working")):
        return _mirror_side(mirror, name, version or "current", policy)
    return _mirror_side(mirror, bundle, ref, policy)


def read_limited(side: Side, sha: str) -> bytes | None:
    """An object's bytes, only if they still hash to ``sha`` (a diff never trusts a path)."""
    try:
        data = side.read_object(sha)
    except (MirrorError, ValueError):
        return None
    return data if data is not None and sha256_bytes(data) == sha else None
