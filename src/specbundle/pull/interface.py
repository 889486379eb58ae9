"""What a model source must provide: resolve a revision to a commit, then stream files.

Two sibling implementations: :class:`~specbundle.pull.huggingface.HubSource` (any Hugging Face
endpoint, honouring ``HF_ENDPOINT``/``HF_TOKEN``) and :class:`~specbundle.pull.local.DirSource`
(weights already on disk). Sources translate their library's errors into
:class:`~specbundle.errors.PullError` subclasses at this edge.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = ["ModelSource", "OpenSink", "ProgressSink", "RemoteFile", "ResolvedRevision",
           "WriteChunk"]

WriteChunk = Callable[[bytes], None]
#: Called once the source knows whether it honoured the requested offset; returns the writer.
OpenSink = Callable[[bool], WriteChunk]


@dataclass(frozen=True)
class RemoteFile:
    """A file as the source lists it, with whatever digests the source declares."""

    path: str
    size: int | None
    lfs_sha256: str | None = None
    git_blob_id: str | None = None


@dataclass(frozen=True)
class ResolvedRevision:
    """A revision pinned to a commit, with the file listing at that commit.

    ``commit`` is None for sources without history (a plain folder); the puller then derives a
    content commit from the verified digests.
    """

    repo: str
    requested: str
    commit: str | None
    commit_kind: Literal["git", "content"]
    files: tuple[RemoteFile, ...]


class ProgressSink(Protocol):
    """The part of ``rich.progress.Progress`` the puller uses (the library never prints)."""

    def add_task(self, description: str, *, total: float | None = ...) -> Any:
        """Start a task and return its id."""

    def advance(self, task_id: Any, advance: float = ...) -> None:
        """Record bytes done."""


class ModelSource(ABC):
    """A place model files come from."""

    #: URL of the endpoint files came from (recorded as provenance), or None for local dirs.
    endpoint: str | None

    @abstractmethod
    def resolve(self, repo: str, revision: str) -> ResolvedRevision:
        """Pin ``revision`` (branch, tag or sha) and list files; raise ``SourceUnavailable``."""

    @abstractmethod
    def fetch(self, resolved: ResolvedRevision, file: RemoteFile, offset: int,
              sink: OpenSink) -> None:
        """Stream the file's bytes from ``offset``.

        Before the first byte the source calls ``sink(ranged)``: True if it honours ``offset``
        (a resumed range), False if it will send the whole file from byte 0 (the caller then
        restarts its hash and temp file). It writes every chunk to the returned writer.
        """

    def abort(self) -> None:  # noqa: B027 - optional hook, a no-op for sources that never block
        """Called from another thread on Ctrl-C: make blocked :meth:`fetch` calls fail now."""
