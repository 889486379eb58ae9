"""A Hugging Face endpoint as a model source (the Hub, Artifactory, olah, ... via ``HF_ENDPOINT``).

Metadata (revision -> commit, file listing with LFS sha256 and git blob ids) comes from
``huggingface_hub.HfApi``. File bytes are streamed with httpx from the URLs huggingface_hub
builds, because the puller must hash every byte while it streams in (``hf_hub_download`` writes
to its own cache first, which would force a second read of every file). The token is sent as a
header and never written anywhere; every error message passes through ``errors.redact``.

Credentials never reach a library as part of a URL: an endpoint given as
``https://user:secret@host`` is split into a clean URL and an ``Authorization: Basic`` header,
so huggingface_hub's retry warnings (which print the URL on HTTP 429/5xx) and httpx's request
logs cannot carry them; a redacting filter on huggingface_hub's log handlers is the second
line. Every hub call has a timeout (huggingface_hub's own client has none), a download whose
throughput stays under a floor is abandoned (its partial file resumes next run), and
:meth:`HubSource.abort` shuts the sockets of running downloads so Ctrl-C stops a stalled pull.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import re
import socket
import threading
from typing import Any

import httpx
import huggingface_hub
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

from specbundle import ids
from specbundle.errors import SourceUnavailable, UsageError, redact
from specbundle.netlimits import NetLimits, RateWatch
from specbundle.pull.interface import ModelSource, OpenSink, RemoteFile, ResolvedRevision

__all__ = ["DEFAULT_ENDPOINT", "HubSource", "HubTimeouts", "endpoint_from_env",
           "split_endpoint"]

DEFAULT_ENDPOINT = "https://huggingface.co"
_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
# What HfApi raises when the endpoint cannot be reached: huggingface_hub re-exports its HTTP
# stack's base error (requests, httpx or httpx2 depending on its version), so name it there.
_UNREACHABLE = (HfHubHTTPError, HubTransportError, httpx.HTTPError, OSError)
# What parsing a well-delivered but malformed answer raises inside the library (a listing
# entry without its fields, a number where a string belongs, a body that is not JSON).
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError)


def endpoint_from_env() -> str:
    """``HF_ENDPOINT`` read now (huggingface_hub reads it once, at import)."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None


class HubTimeouts(NetLimits):
    """Limits for every hub call; ``SPECBUNDLE_HUB_*`` variables override the defaults."""

    def __init__(self) -> None:
        super().__init__("SPECBUNDLE_HUB")


def split_endpoint(raw: str) -> tuple[str, str | None]:
    """(URL without userinfo, ``Authorization`` value or None); :class:`UsageError` if malformed."""
    hint = "pass --endpoint or set HF_ENDPOINT to e.g. https://huggingface.co"
    try:
        url = httpx.URL(raw.strip())
        port = url.port
    except (httpx.InvalidURL, ValueError, TypeError) as err:
        raise UsageError(f"hub endpoint {raw!r} is not a valid URL: {err}", hint=hint) from None
    if url.scheme not in ("http", "https") or not url.host or " " in raw.strip():
        raise UsageError(f"hub endpoint {raw!r} is not an http(s) URL", hint=hint)
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"hub endpoint {raw!r}: port {port} is out of range", hint=hint)
    if url.query or url.fragment:
        raise UsageError(f"hub endpoint {raw!r} must not carry a query or fragment", hint=hint)
    auth = None
    if url.username or url.password:
        pair = f"{url.username}:{url.password}".encode()
        auth = "Basic " + base64.b64encode(pair).decode("ascii")
    clean = str(url.copy_with(username=None, password=None)).rstrip("/")
    return clean, auth


# huggingface_hub's backoff narrates every retry (HTTP 429/5xx, timeouts) as a warning; the
# error that ends the retries is reported once, in our words, so those lines are dropped
_RETRY_CHATTER = re.compile(r"^Retrying in |^Rate limited\. | thrown while requesting ")


def _why(err: BaseException) -> str:
    """One line for a library error (huggingface_hub appends the server's body on new lines)."""
    lines = str(err).splitlines()
    return ids.printable(lines[0] if lines else type(err).__name__)[:300]


class _Redacting(logging.Filter):
    """Rewrites a library's log record through ``errors.redact`` before any handler emits it,
    and drops the library's retry narration."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except (TypeError, ValueError):
            text = str(record.msg)
        if record.name.startswith("huggingface_hub") and _RETRY_CHATTER.search(text):
            return False
        record.msg, record.args = redact(text), None
        return True


_REDACT = _Redacting()
_setup_lock = threading.Lock()
_configured: list[float] = []


def _configure_library(t: HubTimeouts) -> None:
    """Give huggingface_hub's shared client our timeouts and its log handlers the filter."""
    with _setup_lock:
        for name in ("huggingface_hub", "httpx", "httpx2", "httpcore"):
            lg = logging.getLogger(name)
            if _REDACT not in lg.filters:
                lg.addFilter(_REDACT)
            for h in lg.handlers:
                if _REDACT not in h.filters:
                    h.addFilter(_REDACT)
        for h in logging.getLogger().handlers:  # records propagate to the root's handlers
            if _REDACT not in h.filters:
                h.addFilter(_REDACT)
        factory = getattr(huggingface_hub, "set_client_factory", None)
        key = t.connect * 1e6 + t.read
        if factory is None or key in _configured:
            return
        from huggingface_hub.utils._http import default_client_factory

        def make() -> Any:
            client = default_client_factory()
            limits = type(client.timeout)(t.read, connect=t.connect).as_dict()

            def bounded(request: Any) -> None:
                # huggingface_hub passes timeout=None per call (no timeout at all): bound it
                if any(v is None for v in request.extensions.get("timeout", {}).values()):
                    request.extensions["timeout"] = limits

            hooks = client.event_hooks
            client.event_hooks = {"request": [*hooks.get("request", []), bounded],
                                  "response": list(hooks.get("response", []))}
            return client

        factory(make)
        _configured[:] = [key]


class HubSource(ModelSource):
    """Files from a Hugging Face-compatible endpoint."""

    def __init__(self, endpoint: str | None = None, *, timeouts: HubTimeouts | None = None) \
            -> None:
        self.endpoint, basic = split_endpoint(endpoint or endpoint_from_env())
        self._t = timeouts or HubTimeouts()
        _configure_library(self._t)
        token = _token()
        # HF_TOKEN wins over credentials in the URL; either way they travel only as a header
        self._auth = {"authorization": basic} if basic and not token else {}
        self._api = HfApi(endpoint=self.endpoint, token=token or False,
                          headers=self._auth or None)
        self._http = httpx.Client(
            follow_redirects=True, timeout=httpx.Timeout(self._t.read, connect=self._t.connect),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=32),
        )
        self._active: set[httpx.Response] = set()
        self._mu = threading.Lock()
        self._aborted = threading.Event()

    def close(self) -> None:
        """Release pooled connections."""
        self._http.close()

    def abort(self) -> None:
        """Shut the sockets of running downloads: their blocked reads fail at once."""
        self._aborted.set()
        with self._mu:
            active = list(self._active)
        for resp in active:
            stream = resp.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

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
            raise SourceUnavailable(f"{self.endpoint} unavailable resolving {repo}: "
                                    f"{_why(err)}") from err
        except _MALFORMED as err:
            raise self._malformed(f"model info of {repo}@{revision}", err) from err
        commit: object = info.sha
        if not isinstance(commit, str) or not _SHA1_RE.match(commit):
            raise SourceUnavailable(f"{repo}@{revision}: endpoint returned no commit sha")
        if _SHA1_RE.match(revision) and revision != commit:
            raise SourceUnavailable(f"{repo}: asked for commit {revision}, endpoint gave {commit}")
        try:
            tree = list(self._api.list_repo_tree(repo, revision=commit, recursive=True))
            files = tuple(
                RemoteFile(
                    path=e.path, size=e.size,
                    lfs_sha256=e.lfs.sha256 if e.lfs is not None else None,
                    git_blob_id=e.blob_id if e.lfs is None else None,
                )
                for e in tree if isinstance(e, RepoFile)
            )
        except _UNREACHABLE as err:
            raise SourceUnavailable(f"cannot list {repo}@{commit}: {_why(err)}") from err
        except _MALFORMED as err:
            raise self._malformed(f"file listing of {repo}@{commit}", err) from err
        return ResolvedRevision(repo, revision, commit, "git", files)

    def _malformed(self, what: str, err: Exception) -> SourceUnavailable:
        """An answer the client library could not parse: the endpoint is not a working hub API."""
        why = ids.printable(f"{type(err).__name__}: {err}")[:200]
        return SourceUnavailable(f"{self.endpoint} answered a malformed {what} ({why})",
                                 hint="check that HF_ENDPOINT / --endpoint is a Hugging Face "
                                      "compatible API")

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
        headers = build_hf_headers(token=_token() or False, headers=self._auth or None)
        headers["Accept-Encoding"] = "identity"
        if offset:
            headers["Range"] = f"bytes={offset}-"
        if self._aborted.is_set():
            raise SourceUnavailable(f"download of {resolved.repo}/{file.path} interrupted")
        try:
            with self._http.stream("GET", url, headers=headers) as resp:
                with self._mu:
                    self._active.add(resp)
                try:
                    self._receive(resolved, file, resp, sink)
                finally:
                    with self._mu:
                        self._active.discard(resp)
        except httpx.HTTPError as err:
            why = "interrupted" if self._aborted.is_set() else f"failed: {err}"
            raise SourceUnavailable(f"download of {resolved.repo}/{file.path} {why}") from err

    def _receive(self, resolved: ResolvedRevision, file: RemoteFile, resp: httpx.Response,
                 sink: OpenSink) -> None:
        """Check the status, then stream the body while watching its throughput."""
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
        watch = RateWatch(self._t, f"download of {resolved.repo}/{file.path}",
                          hint="the partial file is kept; rerun to resume")
        for chunk in resp.iter_raw():  # network-sized chunks: the rate check runs often
            write(chunk)
            watch.add(len(chunk))
