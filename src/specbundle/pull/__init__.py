"""Stage 1: pull target and draft, pinned to commits, into the mirror.

:func:`pull_bundle` resolves each artifact's revision to a commit, selects the files engines
need, fetches them in parallel (hash while streaming, verify against the hub's LFS sha256 or git
blob id, rename into the store), then, under the mirror lock, links the Hugging Face cache
trees and writes the bundle record last. Until that record exists nothing of the bundle is
visible; an interrupted pull resumes from what it verified.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from specbundle import __version__, _faults
from specbundle.digest import sha256_bytes
from specbundle.errors import SourceUnavailable, SpecbundleError, SpecError, redact
from specbundle.mirror import Mirror, utc_now
from specbundle.mirror.lease import Lease
from specbundle.pull.fetch import FetchOutcome, Journal, fetch_file
from specbundle.pull.huggingface import HubSource, endpoint_from_env
from specbundle.pull.interface import ModelSource, ProgressSink, ResolvedRevision
from specbundle.pull.listing import ListingRejected, screen_listing
from specbundle.pull.local import DirSource, content_commit
from specbundle.pull.publisher import (
    PublisherCheck,
    check_fetched,
    check_listing,
    read_signature,
)
from specbundle.pull.selection import select_files
from specbundle.record import ArtifactRecord, BundleRecord, Role
from specbundle.spec import ArtifactSpec, BundleSpec, dump_spec
from specbundle.strict import MalformedDocument, read_bounded

__all__ = ["ArtifactPull", "ListingRejected", "PullResult", "pull_bundle", "source_for"]

_faults.register("pull.trees-built", "pull.record-saved", "pull.event-appended",
                 "pull.published")


@dataclass(frozen=True)
class ArtifactPull:
    """Per-artifact counts of what moved."""

    role: Role
    downloaded: tuple[str, ...]
    resumed: tuple[str, ...]
    reused: tuple[str, ...]


@dataclass(frozen=True)
class PullResult:
    """The committed record plus what this run transferred."""

    record: BundleRecord
    artifacts: tuple[ArtifactPull, ...]
    unchanged: bool
    #: Problems after the commit (the bundle is committed; e.g. a ref could not be moved).
    notes: tuple[str, ...] = ()

    @property
    def bytes_total(self) -> int:
        """Bytes of all files in the bundle."""
        return sum(a.total_size for a in self.record.artifacts)


def source_for(art: ArtifactSpec, endpoint: str | None = None) -> ModelSource:
    """The source implementation an artifact spec asks for."""
    if art.dir_path is not None:
        return DirSource(art.dir_path)
    return HubSource(endpoint or endpoint_from_env())


def _pull_artifact(
    role: Role, art: ArtifactSpec, mirror: Mirror, source: ModelSource, pool: ThreadPoolExecutor,
    progress: ProgressSink | None, cancel: threading.Event, lease: Lease,
    publishers: PublisherCheck | None = None,
) -> tuple[ArtifactRecord, ArtifactPull]:
    resolved: ResolvedRevision = source.resolve(art.repo, art.revision)
    # hostile names never reach a URL, the store, the record or a terminal unescaped
    listed, unsafe = screen_listing(f"{role} {art.repo}@{resolved.commit or resolved.requested}",
                                    resolved.files)
    wanted, skipped = select_files(art, listed)
    skipped = tuple(sorted((*skipped, *unsafe), key=lambda s: s.path))
    if not wanted:
        raise SourceUnavailable(f"{role} {art.repo}@{resolved.commit}: no servable files "
                                "(safetensors, GGUF, configs) after selection")
    if art.gguf_file and art.gguf_file not in {f.path for f in wanted}:
        raise SpecError(f"{art.gguf_file!r} is not in {art.repo}@{resolved.commit}",
                        field=f"{role}.gguf_file")
    verdict = None
    if publishers is not None:  # the publisher's signature decides before any byte is stored
        verdict = publishers.check(art.repo, read_signature(source, resolved, listed))
        if verdict is not None:
            check_listing(art.repo, verdict, wanted)
    journal = Journal(mirror, art.repo, resolved.commit)
    total = sum(f.size or 0 for f in wanted)
    task = progress.add_task(f"{role} {art.repo}", total=total) if progress else None
    futures = [pool.submit(fetch_file, mirror, source, resolved, f, journal, progress, task,
                           cancel, lease) for f in wanted]
    try:
        outcomes: list[FetchOutcome] = [fu.result() for fu in futures]
    finally:
        # verified files are found again by the next run; the journal is a cache, so one
        # that cannot be written costs re-downloads only
        with contextlib.suppress(SpecbundleError, OSError):
            journal.flush()
    entries = tuple(sorted((o.entry for o in outcomes), key=lambda e: e.path))
    if verdict is not None:
        check_fetched(art.repo, verdict, entries)
    commit = resolved.commit or content_commit(entries)
    # An endpoint given as https://user:token@host must not reach the record, the event log
    # or the signed provenance built from it.
    endpoint = redact(source.endpoint) if source.endpoint else None
    record = ArtifactRecord(
        role=role, repo=art.repo, source=art.source, endpoint=endpoint,
        requested_revision=art.revision, commit=commit, commit_kind=resolved.commit_kind,
        files=entries, skipped=skipped, pulled_at=utc_now(),
        publisher=verdict.publisher if verdict else None,
    )
    counts = ArtifactPull(
        role,
        tuple(o.entry.path for o in outcomes if o.status == "downloaded"),
        tuple(o.entry.path for o in outcomes if o.status == "resumed"),
        tuple(o.entry.path for o in outcomes if o.status == "reused"),
    )
    return record, counts


def _same(a: ArtifactRecord | None, b: ArtifactRecord | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.repo, a.commit, a.files, a.skipped) == (b.repo, b.commit, b.files, b.skipped)


def _prompts(spec: BundleSpec, spec_dir: Path | None) -> bytes | None:
    """The benchmark prompts file the spec names, read from beside the spec file."""
    rel = spec.bench.prompts_file
    if rel is None or spec_dir is None:
        return None
    path = spec_dir / rel
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise SpecError("must be a relative path next to the spec", field="bench.prompts_file")
    try:
        return read_bounded(path, what=str(path.absolute()))  # never blocks on a FIFO
    except MalformedDocument as err:
        raise SpecError(str(err), field="bench.prompts_file") from None
    except OSError as err:
        raise SpecError(f"cannot read {path.absolute()}: {err.strerror}",
                        field="bench.prompts_file",
                        hint="the prompts file is read relative to the spec's folder") from None


def pull_bundle(
    spec: BundleSpec, mirror: Mirror, *, endpoint: str | None = None, workers: int = 8,
    progress: ProgressSink | None = None, spec_dir: Path | None = None,
    publishers: PublisherCheck | None = None,
) -> PullResult:
    """Pull target and draft of ``spec`` into ``mirror`` and commit the bundle record.

    ``spec_dir`` is the folder of the spec file: a ``bench.prompts_file`` named there ships
    inside the bundle folder, so the isolated side benchmarks with exactly those prompts.
    ``publishers`` checks each repo's own OMS signature (:mod:`specbundle.pull.publisher`).

    Raises:
        SourceUnavailable: the endpoint, repo, revision or a file could not be reached.
        DigestMismatch: downloaded bytes differ from the hub's declared digest.
        SpecError: the spec names a file the repo does not have.
        VerificationError: a publisher signature the policy requires is missing or fails.
    """
    mirror = Mirror.open(mirror.root, create=True)
    prompts = _prompts(spec, spec_dir)
    arts: list[tuple[Role, ArtifactSpec]] = [("target", spec.target)]
    if spec.draft is not None:
        arts.append(("draft", spec.draft))
    records: dict[str, ArtifactRecord] = {}
    counts: list[ArtifactPull] = []
    sources = [source_for(a, endpoint) for _, a in arts]
    cancel = threading.Event()
    with mirror.lease("pull") as lease:
        pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="pull")
        try:
            for (role, art), src in zip(arts, sources, strict=True):
                rec, cnt = _pull_artifact(role, art, mirror, src, pool, progress, cancel, lease,
                                          publishers)
                records[role] = rec
                counts.append(cnt)
        except BaseException:
            # Ctrl-C or a failed file: stop every transfer now (a stalled read included);
            # verified objects and partial files stay for the next run, no record is written.
            cancel.set()
            for src in sources:
                src.abort()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
            for src in sources:
                if isinstance(src, HubSource):
                    src.close()
        result = _commit(spec, mirror, records, tuple(counts), prompts)
    try:
        with mirror.lock():
            mirror.reclaim_tmp()  # the last writer out clears tmp/partial
    except (SpecbundleError, OSError):
        pass  # tidying only: gc reclaims it later
    return result


def _logged(mirror: Mirror, record: BundleRecord) -> bool:
    """Whether the log already holds the pull event of this exact record.

    The record is matched by its creation time and both artifacts' commits: ``created`` has
    one-second resolution, and a re-pull within that second (a crash between record and
    event, then a resume) must not pass for the earlier pull's event.
    """
    want = _event_data(record, None)
    for ev in reversed(mirror.read_events()):
        if ev.get("type") == "pull" and ev.get("bundle") == record.name:
            data = ev.get("data") or {}
            return not isinstance(data, dict) or all(
                data.get(k, want[k]) == want[k] for k in ("created", "target", "draft"))
    return False


def _event_data(record: BundleRecord, previous: BundleRecord | None) -> dict[str, object]:
    target, draft = record.target, record.draft
    return {
        "target": {"repo": target.repo, "commit": target.commit,
                   "endpoint": target.endpoint, "files": len(target.files)},
        "draft": None if draft is None else {
            "repo": draft.repo, "commit": draft.commit, "endpoint": draft.endpoint,
            "files": len(draft.files)},
        "replaced": previous.created if previous else None,
        "created": record.created,
    }


def _publish(mirror: Mirror, record: BundleRecord) -> tuple[str, ...]:
    """Move the HF view and refs; after the commit a failure is a note, not an error."""
    try:
        mirror.publish(record)
    except (SpecbundleError, OSError) as err:
        msg = err.message if isinstance(err, SpecbundleError) else str(err)
        return (f"bundle committed, but the Hugging Face view/refs were not moved: {msg}; "
                "rerun pull to move them",)
    _faults.point("pull.published")
    return ()


def _pending(mirror: Mirror, name: str, previous: BundleRecord | None,
             target: ArtifactRecord, draft: ArtifactRecord | None) -> str | None:
    """``created`` of a logged pull of these commits whose record never became visible (a
    crash between the event and the record): the rerun saves the record under that event."""
    def commits_of(rec: BundleRecord, data: dict[str, object]) -> bool:
        want = _event_data(rec, None)
        return all(data.get(k) == want[k] for k in ("target", "draft"))

    for ev in reversed(mirror.read_events()):
        if ev.get("type") != "pull" or ev.get("bundle") != name:
            continue
        data = ev.get("data")
        if not isinstance(data, dict) or not isinstance(data.get("created"), str):
            return None
        if previous is not None and data["created"] == previous.created \
                and commits_of(previous, data):
            return None  # the visible record's own event (``created`` alone is one second)
        pending = BundleRecord(name, {}, target, draft, "", "")
        return data["created"] if commits_of(pending, data) else None
    return None


def _log_then_save(mirror: Mirror, record: BundleRecord, previous: BundleRecord | None,
                   logged: bool) -> None:
    """Log the pull, then save the record: nothing is visible that the log does not hold
    (a failed append leaves the previous record as it was, exit 6 means nothing changed)."""
    if not logged:
        mirror.append_event("pull", record.name, _event_data(record, previous))
    _faults.point("pull.event-appended")
    mirror.save_bundle(record, publish=False)
    _faults.point("pull.record-saved")


def _commit(spec: BundleSpec, mirror: Mirror, records: dict[str, ArtifactRecord],
            counts: tuple[ArtifactPull, ...], prompts: bytes | None) -> PullResult:
    with mirror.lock():
        for rec in records.values():
            mirror.link_snapshot(rec)
        _faults.point("pull.trees-built")
        if prompts is not None and spec.bench.prompts_file is not None:
            mirror.write_bundle_file(spec.name, spec.bench.prompts_file, prompts)
        previous = None
        if spec.name in mirror.bundle_names():
            previous = mirror.load_bundle(spec.name)
        target, draft = records["target"], records.get("draft")
        prompts_sha = sha256_bytes(prompts) if prompts is not None else None
        if (previous is not None and _same(previous.target, target)
                and _same(previous.draft, draft) and previous.spec == dump_spec(spec)
                and previous.prompts_sha256 == prompts_sha):
            if not _logged(mirror, previous):  # a crash between record and event
                mirror.append_event("pull", previous.name, _event_data(previous, None))
            return PullResult(previous, counts, unchanged=True,
                              notes=_publish(mirror, previous))
        if previous is not None:
            mirror.write_bundle_file(
                spec.name,  # created is one second: the commit keeps two in one apart
                f"history/bundle-{previous.created.replace(':', '')}-"
                f"{previous.target.commit[:12]}.json",
                mirror.read_bundle_file(spec.name, "bundle.json") or b"")
        pending = _pending(mirror, spec.name, previous, target, draft)
        record = BundleRecord(
            name=spec.name, spec=dump_spec(spec), target=target, draft=draft,
            created=pending or utc_now(), tool_version=__version__,
            # blobs other stages attached (engine image archives) stay with the bundle
            extra_blobs=previous.extra_blobs if previous is not None else (),
            prompts_sha256=prompts_sha,
        )
        _log_then_save(mirror, record, previous, logged=pending is not None)
        return PullResult(record, counts, unchanged=False, notes=_publish(mirror, record))
