"""Write a self-contained, signed transfer set for one signed bundle (connected side).

Contents: every object the bundle references (``objects/<sha256>``), the bundle's folder
(record, scan report, ``sign/*/model.sig``, ``attestations.jsonl``, ``render/`` manifests;
``bundle/<path>``), and ``index.json`` last: the signed index with a version one higher than
the previous export of this bundle from this mirror. Objects are re-hashed while copied, so a
corrupt store cannot leak into a transfer. Optionally the parts go out as fixed-size chunks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbundle import _faults
from specbundle._fsutil import atomic_write_bytes, disk_error, json_bytes, tmp_name
from specbundle.attest import Envelope, SigningKey, sign_statement
from specbundle.attest.log import read_attestations
from specbundle.attest.manifest import BundleManifest, parse_manifest_unverified
from specbundle.attest.mirrored import subjects_for
from specbundle.attest.oms import OMS_BUNDLE_MEDIA_TYPE
from specbundle.digest import sha256_bytes
from specbundle.errors import MirrorError, UsageError, VerificationError
from specbundle.mirror import Mirror, utc_now, versions
from specbundle.mirror.eventlog import read_chain, read_log
from specbundle.mirror.versions import SCAN_REPORT, model_sig_rel
from specbundle.strict import loads_json
from specbundle.transfer.chunks import CHUNK_DIR, ChunkWriter, read_blocks
from specbundle.transfer.index import INDEX_FILE, Part, TransferIndex
from specbundle.verify import floors
from specbundle.verify.revocations import REVOCATION_EVENT, read_events_lenient

__all__ = ["EXPORT_STATE", "ExportResult", "export_bundle"]

EXPORT_STATE = "export/state.json"
_faults.register("export.parts-written", "export.version-claimed", "export.index-written")
_LOCAL_DIRS = ("export", "import")  # per-mirror bookkeeping, never carried


@dataclass(frozen=True)
class ExportResult:
    """What was written: the set's folder, index version and digest, sizes."""

    out_dir: Path
    bundle: str
    version: int
    parts: int
    bytes: int
    chunks: int
    index_sha256: str


def _revocations(mirror: Mirror) -> tuple[dict[str, Any], ...]:
    """The signed revocation envelopes of this mirror's log: they travel with every set."""
    return tuple(ev["data"]["envelope"] for ev in read_events_lenient(mirror.events_path)
                 if ev.get("type") == REVOCATION_EVENT and isinstance(ev.get("data"), dict)
                 and isinstance(ev["data"].get("envelope"), dict))


def _log_head(mirror: Mirror) -> dict[str, Any] | None:
    """seq and digest of the newest event-log entry (caller holds the lock)."""
    lines = [ln for ln in read_log(mirror.events_path).splitlines() if ln.strip()]
    if not lines:
        return None
    try:
        seq = loads_json(lines[-1], what="event")["seq"]
    except (ValueError, KeyError, TypeError) as err:
        raise VerificationError(f"{mirror.events_path}: the newest entry is corrupt: {err}",
                                hint="run `specbundle audit log --verify`") from None
    return {"seq": seq, "digest": sha256_bytes(lines[-1])}


def _bundle_files(mirror: Mirror, name: str) -> list[tuple[str, Path]]:
    root = mirror.bundle_dir(name)
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not p.is_symlink() and rel.parts[0] not in _LOCAL_DIRS \
                and not any(x.startswith(".") for x in rel.parts):
            out.append((rel.as_posix(), p))
    return out


def _next_version(mirror: Mirror, name: str, requested: int | None) -> int:
    raw = mirror.read_bundle_file(name, EXPORT_STATE)
    try:
        state = loads_json(raw, what=EXPORT_STATE) if raw else {"version": 0}
        last = state["version"]
        if not isinstance(last, int) or isinstance(last, bool) or last < 0:
            raise ValueError(f"version {last!r} is not a count")
    except (ValueError, KeyError, TypeError) as err:
        raise VerificationError(f"bundles/{name}/{EXPORT_STATE} is corrupt: {err}",
                          hint="restore it (the last exported index version) or remove it "
                               "and pass --version above every version already exported"
                          ) from None
    if requested is not None and requested <= last:
        raise UsageError(f"index version {requested} is not above the last export ({last})",
                         hint="versions only grow, so importers can refuse rollbacks")
    return requested if requested is not None else last + 1


def export_bundle(
    mirror: Mirror, name: str, out_dir: Path, keys: Sequence[SigningKey], *,
    chunk_size: int | None = None, version: int | None = None,
    progress: Callable[[int], None] | None = None, state: Path | None = None,
) -> ExportResult:
    """Write bundle ``name`` as a transfer set into ``out_dir`` and sign its index.

    ``state``: the exporter's floor file (outside the mirror; the CLI's default is
    :func:`~specbundle.verify.floors.export_state_path`): a log cut or rewritten below the
    head an earlier export saw, or a version below one already shipped, is refused, and the
    floors rise after the set is written.

    Raises:
        VerificationError: the mirror was rolled back below the recorded floors.
        UsageError: no key, the bundle is not signed, or a version that does not grow.
        MirrorError: an object is missing or its bytes no longer match its digest.
    """
    if not keys:
        raise UsageError("exporting needs a key to sign the transfer index", hint="--key KEY")
    cur = versions.read_current_manifest(mirror, name)
    if cur is None:
        mirror.load_bundle(name)  # BundleNotFound first
        raise UsageError(f"bundle {name!r} is not signed (no signed bundle manifest)",
                         hint="run `specbundle sign` first")
    # What travels is the signed version, never the unsigned working record.
    man = parse_manifest_unverified(cur[1])
    rec = man.record
    for art in rec.artifacts:
        if versions.read_version_file(mirror, name, man.version,
                                      model_sig_rel(art.role)) is None:
            raise UsageError(f"bundle {name!r} is not signed ({art.role} has no model.sig)",
                             hint="run `specbundle sign` first")
    _check_signed_files(mirror, name, man)
    _check_floors(mirror, name, man, state)  # before anything reaches the medium
    with mirror.lease("export") as lease:  # gc keeps what is being copied out
        lease.pin(*rec.referenced_blobs())
        return _export(mirror, name, out_dir, keys, man, chunk_size, version, progress,
                       floor_file=state)


def _check_floors(mirror: Mirror, name: str, man: BundleManifest, state: Path | None) -> None:
    """Refuse a log or a version below what this exporter recorded (its own state file)."""
    if state is None:
        return
    events, head = read_chain(mirror.events_path)  # a line dropped anywhere breaks the chain
    floors.check_log(state, mirror, events, head)
    rolled = floors.bundle_problem(state, mirror, name, man.version, man.digest)
    if rolled is not None:
        raise VerificationError(f"bundle {name!r}: {rolled.message}; refusing to export it",
                                hint="restore the mirror's `current` and version folders")


def _check_signed_files(mirror: Mirror, name: str, man: BundleManifest) -> None:
    """Refuse at export what every importer would refuse: a ``model.sig`` that is not a
    signed bundle, a scan report or image record other than the signed one, a malformed
    attestation line (so a bad set never reaches the medium)."""
    where = f"bundle {name!r} version {man.version}"
    for art in man.record.artifacts:
        raw = versions.read_version_file(mirror, name, man.version, model_sig_rel(art.role))
        try:
            doc = loads_json(raw or b"", what=f"{art.role} model.sig")
            if not isinstance(doc, dict) or doc.get("mediaType") != OMS_BUNDLE_MEDIA_TYPE:
                raise ValueError("not a Sigstore bundle")
            Envelope.from_json(doc.get("dsseEnvelope"))
        except (ValueError, VerificationError) as err:
            why = (str(err).splitlines() or ["malformed"])[0][:200]
            raise VerificationError(f"{where}: {art.role} model.sig is malformed: {why}",
                                    hint="sign the bundle again") from None
    signed = {SCAN_REPORT: man.scan_report_sha256} if man.scan_report_sha256 else {}
    signed |= {f"images/{e}.json": sha for e, sha in man.images.items()}
    for rel, sha in signed.items():
        versions.read_signed_file(mirror, name, man.version, rel, sha)
    try:
        read_attestations(mirror, name)
    except VerificationError as err:
        raise VerificationError(f"{where}: {err.message}",
                                hint="restore attestations.jsonl; importers refuse the set"
                                ) from None


def _export(mirror: Mirror, name: str, out_dir: Path, keys: Sequence[SigningKey],
            man: BundleManifest, chunk_size: int | None, version: int | None,
            progress: Callable[[int], None] | None, *, floor_file: Path | None) -> ExportResult:
    rec = man.record
    roots = dict(man.roots)
    sources: list[tuple[str, Path, str | None]] = [
        (f"objects/{sha}", mirror.object_path(sha), sha) for sha in sorted(rec.referenced_blobs())]
    sources += [(f"bundle/{rel}", p, None) for rel, p in _bundle_files(mirror, name)]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / INDEX_FILE).unlink(missing_ok=True)  # a half-written set has no valid index
    shutil.rmtree(out_dir / CHUNK_DIR, ignore_errors=True)
    for stale in out_dir.rglob(".*.part"):  # an interrupted export's leftovers
        stale.unlink(missing_ok=True)
    total = sum(src.stat().st_size for _, src, _ in sources if src.is_file())
    written = 0
    writer = ChunkWriter(out_dir, chunk_size) if chunk_size else None
    parts: list[Part] = []
    try:
        for rel, src, want in sources:
            part = _copy_part(out_dir, rel, src, want, writer, progress, name)
            parts.append(part)
            written += part.size
        chunks = writer.close() if writer else []
    except OSError as err:
        # the medium is full or failing: nothing half-written stays on it
        for stale in out_dir.rglob(".*.part"):
            stale.unlink(missing_ok=True)
        shutil.rmtree(out_dir / CHUNK_DIR, ignore_errors=True)
        where = Path(err.filename) if isinstance(err.filename, str) else out_dir
        raise disk_error(err, where, need=total - written,
                         what="writing the transfer set to") from err
    _faults.point("export.parts-written")
    subjects = [s for a in rec.artifacts for s in subjects_for(a, roots[a.role])]
    with mirror.lock():  # the version is claimed under the lock: no two sets share one
        _check_floors(mirror, name, man, floor_file)  # again: the log may have moved since
        ver = _next_version(mirror, name, version)
        mirror.write_bundle_file(name, EXPORT_STATE, json_bytes(
            {"version": ver, "index_sha256": None, "to": str(out_dir)}))
        _faults.point("export.version-claimed")
        # The export event comes first so that the index can carry the log head *including*
        # it: the set takes this log's floor out of reach of whoever truncates the log later.
        mirror.append_event("export", name, {"version": ver, "parts": len(parts),
                                             "chunks": len(chunks)})
        head = _log_head(mirror)
        index = TransferIndex(name, ver, utc_now(), tuple(parts), chunk_size, tuple(chunks),
                              revocations=_revocations(mirror), log_head=head)
        env = sign_statement(index.statement(subjects), keys)
        # the floors rise before the set is valid: a floor not recorded protects nothing
        if head is not None:
            floors.raise_floors(floor_file, mirror, bundle=(name, man.version, man.digest),
                                head=(int(head["seq"]), str(head["digest"])))
        data = json.dumps(env.to_json(), indent=2, sort_keys=True).encode() + b"\n"
        mirror.write_bundle_file(name, "export/index.json", data)
        mirror.write_bundle_file(name, EXPORT_STATE, json_bytes(
            {"version": ver, "index_sha256": sha256_bytes(data), "exported_at": index.created,
             "to": str(out_dir)}))
        atomic_write_bytes(out_dir / INDEX_FILE, data)
        _faults.point("export.index-written")
    return ExportResult(out_dir, name, ver, len(parts), sum(p.size for p in parts), len(chunks),
                        sha256_bytes(data))


def _copy_part(out_dir: Path, rel: str, src: Path, want: str | None,
               writer: ChunkWriter | None, progress: Callable[[int], None] | None,
               name: str) -> Part:
    """Copy one part into the set (re-hashed on the way); a failure removes its ``.part``."""
    if not src.is_file():
        raise MirrorError(f"{name}: {rel} is missing from the mirror")
    h, size, offset = hashlib.sha256(), 0, writer.offset if writer else None
    dest = out_dir / rel
    reuse = writer is None and want is not None and dest.is_file() \
        and dest.stat().st_size == src.stat().st_size
    fh = None if writer or reuse else _TmpFile(dest)
    try:
        for block in read_blocks(src, progress):
            h.update(block)
            size += len(block)
            if writer:
                writer.write(block)
            elif fh is not None:
                fh.write(block)
        digest = h.hexdigest()
        if want is not None and digest != want:
            raise MirrorError(f"mirror object {want} hashes to {digest}: the store is corrupt")
        if fh is not None:
            fh.commit()
    except BaseException:
        if fh is not None:
            fh.discard()
        raise
    return Part(rel, size, digest, offset)


class _TmpFile:
    """A part being written beside its final name; renamed into place once complete."""

    def __init__(self, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.dest = dest
        self.tmp = dest.with_name(tmp_name(dest.name, "part"))
        self.fh = self.tmp.open("wb")

    def write(self, data: bytes) -> None:
        self.fh.write(data)

    def discard(self) -> None:
        """Close and remove the ``.part`` (a failed or interrupted copy)."""
        with contextlib.suppress(OSError):
            self.fh.close()
        self.tmp.unlink(missing_ok=True)

    def commit(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        self.tmp.replace(self.dest)
