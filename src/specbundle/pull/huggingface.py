"""A Hugging Face endpoint as a model source (the Hub, Artifactory, olah, ... via ``HF_ENDPOINT``).

Metadata (revision -> commit, file listing with LFS sha256 and git blob ids) comes from
``huggingface_hub.HfApi``. File bytes are streamed with httpx from the URLs huggingface_hub
builds, because the puller must hash every byte while it streams in (``hf_hub_download`` writes
to its own cache first, which would force a second read of every file). The token is sent as a
header and never written anywhere; every error message passes through ``errors.redact``.
"""

from __future__ import annotations

import os
import re

import httpx
from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.errors import HTTPError as HubTransportError  # type: ignore[attr-defined]
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils._headers import build_hf_headers

from specbundle.errors import SourceUnavailable, UsageError
from specbundle.pull.interface import ModelSource, OpenSink, RemoteFile, ResolvedRevision

__all__ = ["DEFAULT_ENDPOINT", "HubSource", "endpoint_from_env"]

DEFAULT_ENDPOINT = "https://huggingface.co"
_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
_CHUNK = 1 << 20
# What HfApi raises when the endpoint cannot be reached: huggingface_hub re-exports its HTTP
# stack's base error (requests, httpx or httpx2 depending on its version), so name it there.
_UNREACHABLE = (HfHubHTTPError, HubTransportError, httpx.HTTPError, OSError)


def endpoint_from_env() -> str:
    """``HF_ENDPOINT`` read now (huggingface_hub reads it once, at import)."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None


class HubSource(ModelSource):
    """Files from a Hugging Face-compatible endpoint."""

    def __init__(self, endpoint: str | None = None, *, timeout: float = 300.0) -> None:
        self.endpoint = (endpoint or endpoint_from_env()).rstrip("/")
        if not re.match(r"^https?://[^/\s]+", self.endpoint):
            raise UsageError(f"hub endpoint {self.endpoint!r} is not an http(s) URL",
                             hint="pass --endpoint or set HF_ENDPOINT to e.g. "
                                  "https://huggingface.co")
        self._api = HfApi(endpoint=self.endpoint, token=_token() or False)
        self._http = httpx.Client(
            follow_redirects=True, timeout=httpx.Timeout(timeout, connect=30.0),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=32),
        )

    def close(self) -> None:
        """Release pooled connections."""
        self._http.close()

    def resolve(self, repo: str, revision: str) -> ResolvedRevision:
        """Pin a branch, tag or sha to its commit and list the files there."""
        try:
            info = self._api.model_info(repo, revision=revision)
        except GatedRepoError as err:
            raise SourceUnavailable(
                f"{repo} is gated on {self.endpoint}: access not granted",
                hint="request access on the hub and set HF_TOKEN",
            ) from err
        except RevisionNotFoundError as err:
            raise SourceUnavailable(f"{repo}: revision {revision!r} not found") from err
        except RepositoryNotFoundError as err:
            raise self._missing(repo, revision) from err
        except _UNREACHABLE as err:
            raise SourceUnavailable(f"{self.endpoint} unavailable resolving {repo}: {err}") from err
        commit = info.sha
        if not commit or not _SHA1_RE.match(commit):
            raise SourceUnavailable(f"{repo}@{revision}: endpoint returned no commit sha")
        if _SHA1_RE.match(revision) and revision != commit:
            raise SourceUnavailable(f"{repo}: asked for commit {revision}, endpoint gave {commit}")
        try:
            tree = list(self._api.list_repo_tree(repo, revision=commit, recursive=True))
        except _UNREACHABLE as err:
            raise SourceUnavailable(f"cannot list {repo}@{commit}: {err}") from err
        files = tuple(
            RemoteFile(
                path=e.path, size=e.size,
                lfs_sha256=e.lfs.sha256 if e.lfs is not None else None,
                git_blob_id=e.blob_id if e.lfs is None else None,
            )
            for e in tree if isinstance(e, RepoFile)
        )
        return ResolvedRevision(repo, revision, commit, "git", files)

    def _missing(self, repo: str, revision: str) -> SourceUnavailable:
        # Some endpoints (olah among them) answer an unknown revision as "repo not found";
        # list the repo's refs to tell the two apart, and name the refs that do exist.
        try:
            refs = self._api.list_repo_refs(repo)
        except _UNREACHABLE:
            return SourceUnavailable(
                f"repository {repo} not found on {self.endpoint} (or not accessible)",
                hint="check the repo id; private repos need HF_TOKEN",
            )
        names = sorted(r.name for r in (*refs.branches, *refs.tags))
        return SourceUnavailable(
            f"{repo}: revision {revision!r} not found on {self.endpoint}",
            hint=f"branches and tags there: {', '.join(names) or 'none'}",
        )

    def fetch(self, resolved: ResolvedRevision, file: RemoteFile, offset: int,
              sink: OpenSink) -> None:
        """Stream one file at the pinned commit, asking for a byte range when resuming."""
        assert resolved.commit is not None  # noqa: S101 - HubSource always pins a commit
        url = hf_hub_url(resolved.repo, file.path, revision=resolved.commit,
                         endpoint=self.endpoint)
        headers = build_hf_headers(token=_token() or False)
        headers["Accept-Encoding"] = "identity"
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            with self._http.stream("GET", url, headers=headers) as resp:
                if resp.status_code in (401, 403):
                    raise SourceUnavailable(
                        f"{resolved.repo}/{file.path}: access denied ({resp.status_code})",
                        hint="set HF_TOKEN with read access")
                if resp.status_code == 404:
                    raise SourceUnavailable(
                        f"{resolved.repo}@{resolved.commit}: {file.path} not found")
                if resp.status_code not in (200, 206):
                    raise SourceUnavailable(
                        f"{resolved.repo}/{file.path}: HTTP {resp.status_code}")
                write = sink(resp.status_code == 206)
                for chunk in resp.iter_raw(_CHUNK):
                    write(chunk)
        except httpx.HTTPError as err:
            raise SourceUnavailable(f"download of {resolved.repo}/{file.path} failed: {err}") \
                from err
