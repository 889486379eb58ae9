"""Bundle records: what pull resolved and stored, the noun every later stage reads.

A :class:`BundleRecord` is written once per successful pull into ``bundles/<name>/bundle.json``
and is the source of truth for which commit and which bytes make up target and draft. Later
stages keep their own files next to it (scan report, signatures, attestations, manifests) so
that no stage rewrites another stage's output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from specbundle import ids
from specbundle.digest import is_sha256
from specbundle.errors import MirrorError

__all__ = ["RECORD_SCHEMA", "ArtifactRecord", "BundleRecord", "FileEntry", "Publisher", "Role",
           "SkippedFile"]

RECORD_SCHEMA = "https://specbundle.dev/bundle-record/v1"

Role = Literal["target", "draft"]


@dataclass(frozen=True)
class FileEntry:
    """One mirrored file: its path inside the model tree and its verified digest."""

    path: str
    size: int
    sha256: str
    lfs_sha256: str | None = None
    git_blob_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form (keys sorted by the writer)."""
        out: dict[str, Any] = {"path": self.path, "size": self.size, "sha256": self.sha256}
        if self.lfs_sha256:
            out["lfs_sha256"] = self.lfs_sha256
        if self.git_blob_id:
            out["git_blob_id"] = self.git_blob_id
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FileEntry:
        """Inverse of :meth:`to_json`; a path or digest that could escape a tree is refused."""
        return cls(
            path=ids.check_rel_path(d["path"]), size=int(d["size"]),
            sha256=ids.check_digest(d["sha256"]),
            lfs_sha256=d.get("lfs_sha256"), git_blob_id=d.get("git_blob_id"),
        )


@dataclass(frozen=True)
class SkippedFile:
    """A file the source offered that was deliberately not mirrored, and why."""

    path: str
    reason: str
    size: int | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        out: dict[str, Any] = {"path": self.path, "reason": self.reason}
        if self.size is not None:
            out["size"] = self.size
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SkippedFile:
        """Inverse of :meth:`to_json`. The name is only reported, never a path, but must be text."""
        path, reason, size = d["path"], d["reason"], d.get("size")
        if not isinstance(path, str) or not isinstance(reason, str):
            raise ValueError("a skipped file's path and reason must be strings")
        if size is not None and (type(size) is not int or size < 0):
            raise ValueError(f"skipped file {ids.printable(path)[:200]!r}: bad size {size!r}")
        return cls(path, reason, size)


@dataclass(frozen=True)
class Publisher:
    """The publisher whose own signature (OMS ``model.sig``) pull verified for an artifact."""

    method: Literal["certificate", "sigstore"]
    identity: str
    issuer: str

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"method": self.method, "identity": self.identity, "issuer": self.issuer}

    @classmethod
    def from_json(cls, d: object) -> Publisher:
        """Inverse of :meth:`to_json`."""
        if not isinstance(d, dict) or d.get("method") not in ("certificate", "sigstore") or \
                not all(isinstance(d.get(k), str) for k in ("identity", "issuer")):
            raise ValueError(f"malformed publisher {d!r}")
        return cls(d["method"], d["identity"], d["issuer"])


@dataclass(frozen=True)
class ArtifactRecord:
    """Target or draft as pulled: source, pinned commit and the exact file set."""

    role: Role
    repo: str
    source: str
    endpoint: str | None
    requested_revision: str
    commit: str
    commit_kind: Literal["git", "content"]
    files: tuple[FileEntry, ...]
    skipped: tuple[SkippedFile, ...] = ()
    pulled_at: str = ""
    publisher: Publisher | None = None  # set when pull verified the publisher's model.sig

    @property
    def total_size(self) -> int:
        """Bytes of all mirrored files."""
        return sum(f.size for f in self.files)

    def file(self, path: str) -> FileEntry | None:
        """The entry for a path, if mirrored."""
        return next((f for f in self.files if f.path == path), None)

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "role": self.role, "repo": self.repo, "source": self.source,
            "endpoint": self.endpoint, "requested_revision": self.requested_revision,
            "commit": self.commit, "commit_kind": self.commit_kind,
            "files": [f.to_json() for f in self.files],
            "skipped": [s.to_json() for s in self.skipped],
            "pulled_at": self.pulled_at,
            # only when present: records of unsigned repos keep their exact bytes
            **({"publisher": self.publisher.to_json()} if self.publisher else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArtifactRecord:
        """Inverse of :meth:`to_json`; identifiers that could become paths are validated."""
        if d["role"] not in ("target", "draft"):
            raise ValueError(f"unknown artifact role {d['role']!r}")
        return cls(
            role=d["role"], repo=ids.check_repo(d["repo"]), source=d["source"],
            endpoint=d.get("endpoint"), requested_revision=d["requested_revision"],
            commit=ids.check_commit(d["commit"]),
            commit_kind=d["commit_kind"],
            files=tuple(FileEntry.from_json(f) for f in d["files"]),
            skipped=tuple(SkippedFile.from_json(s) for s in d.get("skipped", ())),
            pulled_at=d.get("pulled_at", ""),
            publisher=Publisher.from_json(d["publisher"]) if "publisher" in d else None,
        )


@dataclass(frozen=True)
class BundleRecord:
    """A named bundle in the mirror: the spec it was pulled from and both artifacts."""

    name: str
    spec: dict[str, Any]
    target: ArtifactRecord
    draft: ArtifactRecord | None
    created: str
    tool_version: str
    extra_blobs: tuple[str, ...] = field(default=())
    #: sha256 of the benchmark prompts file shipped in the bundle folder (``bench.prompts_file``):
    #: signed with the record, so the isolated side benchmarks only the prompts approved
    prompts_sha256: str | None = None

    @property
    def artifacts(self) -> tuple[ArtifactRecord, ...]:
        """Target first, then the draft if the method has one."""
        return (self.target,) if self.draft is None else (self.target, self.draft)

    def artifact(self, role: Role) -> ArtifactRecord:
        """The artifact for a role; raises if the bundle has no draft."""
        if role == "target":
            return self.target
        if self.draft is None:
            raise MirrorError(f"bundle {self.name!r} has no draft artifact")
        return self.draft

    def referenced_blobs(self) -> set[str]:
        """Every object digest this bundle keeps alive (for gc)."""
        out = {f.sha256 for a in self.artifacts for f in a.files}
        out.update(self.extra_blobs)
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON form, as stored in ``bundle.json``."""
        return {
            "schema": RECORD_SCHEMA, "name": self.name, "spec": self.spec,
            "created": self.created, "tool_version": self.tool_version,
            "artifacts": {a.role: a.to_json() for a in self.artifacts},
            "extra_blobs": sorted(self.extra_blobs),
            # only when set: records written before the field existed keep their exact bytes
            **({"prompts_sha256": self.prompts_sha256} if self.prompts_sha256 else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BundleRecord:
        """Inverse of :meth:`to_json`; refuses an unknown schema."""
        if d.get("schema") != RECORD_SCHEMA:
            raise MirrorError(f"unknown bundle record schema {d.get('schema')!r}")
        arts = d["artifacts"]
        if not isinstance(d["spec"], dict) or not isinstance(arts, dict):
            raise ValueError("spec and artifacts must be JSON objects")
        return cls(
            name=ids.check_bundle_name(d["name"]), spec=d["spec"], created=d["created"],
            tool_version=d["tool_version"],
            target=ArtifactRecord.from_json(arts["target"]),
            draft=ArtifactRecord.from_json(arts["draft"]) if "draft" in arts else None,
            extra_blobs=tuple(d.get("extra_blobs", ())),
            prompts_sha256=_sha256_or_none(d.get("prompts_sha256")),
        )


def _sha256_or_none(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not is_sha256(value):
        raise MirrorError("prompts_sha256 is not a sha256 hex digest")
    return value
