"""An OCI distribution registry as a :class:`~specbundle.oci.backend.Backend`, over httpx.

Hand-written on httpx rather than on ``oras`` (oras-py 0.2.x): oras-py is requests-based, its
chunked upload cannot resume an interrupted session (it never asks the registry for the
upload's ``Range``), it has no referrers API nor the OCI 1.1 fallback tag, and it hashes a file
in a separate pass before uploading. Here each blob is hashed while it streams, uploads are
chunked (``PATCH`` with ``Content-Range``), resumable across processes (the session URL is
kept in a state file and the registry is asked how far it got), and the caller runs several
in parallel; auth is the docker token flow (Bearer challenge -> token) or Basic.

No secret reaches a message: errors name the method, the path and the status only.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import threading
from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urljoin, urlsplit

import httpx

from specbundle import _faults
from specbundle._fsutil import open_dir, write_at
from specbundle.errors import (
    CorruptMirror,
    MirrorError,
    SourceUnavailable,
    UsageError,
    VerificationError,
)
from specbundle.netlimits import NetLimits, RateWatch
from specbundle.oci.auth import Credentials
from specbundle.oci.backend import BlobPush, Progress, bounded, fallback_tag, with_referrer
from specbundle.oci.blobget import BodyCut, stream_get
from specbundle.oci.media import IMAGE_INDEX, IMAGE_MANIFEST, MAX_MANIFEST_BYTES, Descriptor, dumps
from specbundle.oci.ref import Reference, is_loopback
from specbundle.oci.tokenauth import MAX_REPLY, TokenAuth, read_capped
from specbundle.strict import MalformedDocument, loads_json, open_regular, read_bounded

__all__ = ["DEFAULT_CHUNK", "MAX_CHUNK", "MIN_CHUNK", "RegistryBackend", "RegistryOptions"]

DEFAULT_CHUNK = 64 * 1024 * 1024
#: a chunk is one request: tiny ones never finish a large blob, huge ones defeat resuming
MIN_CHUNK, MAX_CHUNK = 64 * 1024, 4 << 30
_BLOCK = 1024 * 1024
_MANIFEST_ACCEPT = f"{IMAGE_INDEX}, {IMAGE_MANIFEST}"
_RESUMES = 3  # a blob read resumed this many times in a row without a byte gives up

_faults.register("oci.chunk-uploaded")


class RegistryOptions:
    """Connection settings: TLS CA bundle, plain HTTP (loopback only), credentials, chunks."""

    def __init__(self, *, ca_bundle: Path | None = None, plain_http: bool = False,
                 credentials: Credentials | None = None, chunk_size: int = DEFAULT_CHUNK,
                 state_dir: Path | None = None, mount_from: tuple[str, ...] = (),
                 limits: NetLimits | None = None) -> None:
        if not MIN_CHUNK <= chunk_size <= MAX_CHUNK:
            raise UsageError(f"chunk size {chunk_size} B is outside {MIN_CHUNK} B-"
                             f"{MAX_CHUNK >> 30} GiB", hint="--chunk-size 64M (the default)")
        self.limits = limits or NetLimits("SPECBUNDLE_OCI")
        self.ca_bundle = ca_bundle
        self.plain_http = plain_http
        self.credentials = credentials
        self.chunk_size = chunk_size
        self.state_dir = state_dir
        self.mount_from = mount_from

    def __repr__(self) -> str:
        return f"RegistryOptions(plain_http={self.plain_http}, chunk_size={self.chunk_size})"


class RegistryBackend:
    """One repository in one registry."""

    def __init__(self, ref: Reference, options: RegistryOptions | None = None) -> None:
        opts = options or RegistryOptions()
        if opts.plain_http and not is_loopback(ref.host):
            raise UsageError(f"--plain-http is only allowed for loopback registries, not "
                             f"{ref.registry}", hint="use TLS (and --ca-bundle for a private CA)")
        verify: ssl.SSLContext | bool = True
        if opts.ca_bundle is not None:
            try:
                verify = ssl.create_default_context(cafile=str(opts.ca_bundle))
            except (OSError, ssl.SSLError) as err:
                raise UsageError(f"CA bundle {opts.ca_bundle} is unreadable: {err}") from None
        scheme = "http" if opts.plain_http else "https"
        self.ref = ref
        self.repo = ref.repository
        self.name = f"{ref.registry}/{ref.repository}"
        self.opts = opts
        self.referrers_api: bool | None = None
        self._settled = False  # a blob request went through httpx's auth flow once
        self._limits = opts.limits
        self._auth = TokenAuth(opts.credentials, opts.limits)
        self._active: set[socket.socket] = set()  # blob bodies streaming now (for abort)
        self._aborted = threading.Event()
        self._ssl: ssl.SSLContext | None = verify if isinstance(verify, ssl.SSLContext) else (
            ssl.create_default_context() if scheme == "https" else None)
        self._client = httpx.Client(
            base_url=f"{scheme}://{ref.registry}", verify=verify, auth=self._auth,
            timeout=httpx.Timeout(opts.limits.read, connect=opts.limits.connect),
            follow_redirects=True,
            headers={"User-Agent": "specbundle"})

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def abort(self) -> None:
        """Shut the sockets of blob bodies streaming now: their blocked reads fail at once
        (Ctrl-C), and no new blob read starts."""
        self._aborted.set()
        for sock in list(self._active):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # -- plumbing -----------------------------------------------------------------------------
    def _req(self, method: str, url: str, *, ok: tuple[int, ...], cap: int = MAX_REPLY,
             **kw: Any) -> httpx.Response:
        """One request; the reply is streamed, at most ``cap`` bytes within the deadline."""
        what = f"registry {self.ref.registry}: {method} {urlsplit(url).path}"
        try:
            with self._client.stream(method, url, **kw) as resp:
                body = b"" if method == "HEAD" else read_capped(resp, cap, what, self._limits)
        except httpx.HTTPError as err:
            raise SourceUnavailable(f"registry {self.ref.registry} unreachable "
                                    f"({method} {urlsplit(url).path}): {type(err).__name__}"
                                    ) from None
        headers = [(k, v) for k, v in resp.headers.multi_items()  # the body is decoded
                   if k.lower() not in ("content-encoding", "transfer-encoding")]
        out = httpx.Response(resp.status_code, headers=headers, content=body,
                             request=resp.request)
        if out.status_code not in ok:
            raise self._error(method, url, out)
        return out

    def _error(self, method: str, url: str, resp: httpx.Response) -> SourceUnavailable:
        path = urlsplit(url).path
        if resp.status_code in (401, 403):
            return SourceUnavailable(f"registry {self.ref.registry} refused {method} {path} "
                                     f"({resp.status_code}): check the credentials",
                                     hint="docker login / a credential helper for this registry")
        code = ""
        try:
            doc = loads_json(resp.content[:65536], what="registry error")
            code = str(doc["errors"][0]["code"])[:64]
        except (ValueError, KeyError, IndexError, TypeError):
            pass
        return SourceUnavailable(f"registry {self.ref.registry}: {method} {path} -> "
                                 f"{resp.status_code} {code}".rstrip())

    def _blob_url(self, digest: str) -> str:
        return f"/v2/{self.repo}/blobs/{digest}"

    # -- blobs --------------------------------------------------------------------------------
    def has_blob(self, digest: str, size: int) -> bool:
        """HEAD the blob: present with the expected size."""
        resp = self._req("HEAD", self._blob_url(digest), ok=(200, 404))
        return resp.status_code == 200 and resp.headers.get("content-length") == str(size)

    def _mount(self, digest: str) -> bool:
        for src in self.opts.mount_from:
            if src == self.repo:
                continue
            resp = self._req("POST", f"/v2/{self.repo}/blobs/uploads/",
                             params={"mount": digest, "from": src}, ok=(201, 202))
            if resp.status_code == 201:
                return True
            self._cancel(resp.headers.get("location"))
        return False

    def _cancel(self, location: str | None) -> None:
        if location:
            with suppress(httpx.HTTPError):
                self._client.delete(self._abs(location))

    def _abs(self, location: str) -> str:
        return urljoin(str(self._client.base_url) + "/", location)

    def _final(self, location: str, digest: str) -> str:
        """The upload URL plus ``digest=`` (httpx's ``params=`` would drop ``_state``)."""
        return str(httpx.URL(self._abs(location)).copy_merge_params({"digest": digest}))

    def _state_path(self, digest: str) -> Path | None:
        if self.opts.state_dir is None:
            return None
        key = hashlib.sha256(self.name.encode()).hexdigest()[:16]
        return self.opts.state_dir / key / f"{digest.removeprefix('sha256:')}.json"

    def _resume(self, digest: str) -> tuple[str, int] | None:
        """An upload session an earlier (killed) run left, and the offset the registry has."""
        sp = self._state_path(digest)
        if sp is None or not sp.is_file():
            return None
        try:
            raw = read_bounded(sp, max_bytes=65536, follow=False)  # never blocks on a FIFO
            location = str(loads_json(raw, max_bytes=65536)["location"])
            resp = self._client.get(self._abs(location))
        except (MalformedDocument, KeyError, TypeError, OSError, httpx.HTTPError):
            return None
        if resp.status_code != 204:
            return None
        rng = resp.headers.get("range", "0-0")
        end = int(rng.rsplit("-", 1)[-1]) if rng.rsplit("-", 1)[-1].isdigit() else -1
        return resp.headers.get("location", location), end + 1 if end > 0 else 0

    def _save_state(self, digest: str, location: str) -> None:
        sp = self._state_path(digest)
        if sp is not None and self.opts.state_dir is not None:
            sd = self.opts.state_dir  # its folder is the caller's; below it, no planted link
            with open_dir(sd.parent, f"{sd.name}/{sp.parent.name}") as dfd:
                write_at(dfd, sp.name, dumps({"location": location}), sp.parent)

    def push_blob(self, digest: str, size: int, path: Path,
                  progress: Progress | None = None) -> BlobPush:
        """Upload ``path`` unless present; chunked, resumable, hashed while it streams."""
        if self.has_blob(digest, size):
            return BlobPush(digest, size, 0, skipped=True)
        if self._mount(digest):
            return BlobPush(digest, size, 0, mounted=True)
        h = hashlib.sha256()
        resumed = self._resume(digest)
        if resumed is not None:
            location, offset = resumed
            with _open_blob(path) as fh:  # re-hash only what the killed run already sent
                left = offset
                while left and (block := fh.read(min(_BLOCK, left))):
                    h.update(block)
                    left -= len(block)
        else:
            resp = self._req("POST", f"/v2/{self.repo}/blobs/uploads/", ok=(202,))
            location, offset = resp.headers["location"], 0
        with _open_blob(path) as fh:
            fh.seek(offset)
            pos = offset
            if offset == 0 and size <= self.opts.chunk_size:  # one request: PUT with the body
                self._send("PUT", self._final(location, digest), fh, size, h, path, progress,
                           digest, ok=(201,))
                return BlobPush(digest, size, size)
            while pos < size:
                n = min(self.opts.chunk_size, size - pos)
                resp = self._send("PATCH", self._abs(location), fh, n, h, path, progress, digest,
                                  ok=(202,), extra={"Content-Range": f"{pos}-{pos + n - 1}"})
                location = resp.headers.get("location", location)
                pos += n
                self._save_state(digest, location)
                _faults.point("oci.chunk-uploaded")
        self._check(h, digest, path)
        self._req("PUT", self._final(location, digest), ok=(201,))
        sp = self._state_path(digest)
        if sp is not None:
            sp.unlink(missing_ok=True)
        return BlobPush(digest, size, size - offset, resumed_at=offset)

    def _send(self, method: str, url: str, fh: BinaryIO, n: int, h: Any, path: Path,
              progress: Progress | None, digest: str, *, ok: tuple[int, ...],
              extra: dict[str, str] | None = None) -> httpx.Response:
        """Stream ``n`` bytes of ``fh`` as the body, hashing each block as it goes out.

        A generator body in 1 MiB blocks: httpx sends one huge ``bytes`` body ~7x slower.
        """
        def body() -> Iterator[bytes]:
            left = n
            while left:
                block = fh.read(min(_BLOCK, left))
                if not block:
                    raise MirrorError(f"{path} is shorter than its recorded size")
                h.update(block)
                left -= len(block)
                if progress:
                    progress(len(block))
                yield block

        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(n),
                   **(extra or {})}
        try:
            return self._req(method, url, content=body(), headers=headers, ok=ok)
        except SourceUnavailable:
            if method == "PUT":
                self._check(h, digest, path)  # name a corrupt mirror rather than the registry
            raise

    @staticmethod
    def _check(h: Any, digest: str, path: Path) -> None:
        if f"sha256:{h.hexdigest()}" != digest:
            raise MirrorError(f"{path} no longer hashes to {digest}: the mirror is corrupt")

    def push_bytes(self, digest: str, data: bytes) -> BlobPush:
        """Upload a small blob in one request (POST then PUT) unless present."""
        if self.has_blob(digest, len(data)):
            return BlobPush(digest, len(data), 0, skipped=True)
        resp = self._req("POST", f"/v2/{self.repo}/blobs/uploads/", ok=(202,))
        self._req("PUT", self._final(resp.headers["location"], digest), content=data,
                  headers={"Content-Type": "application/octet-stream"}, ok=(201,))
        return BlobPush(digest, len(data), len(data))

    def _stream(self, url: str, offset: int) -> Iterator[bytes]:
        """The blob body from ``offset`` on (a registry that ignores Range is skipped ahead)."""
        # httpx settles auth (a HEAD answers the challenge, the token is cached), then the body
        # streams through http.client (see specbundle.oci.blobget for why)
        for attempt in (1, 2):
            if not self._settled or attempt == 2:  # a 401 means the token expired: renew it
                self._req("HEAD", url, ok=(200, 307, 302))
                self._settled = True
            with stream_get(self._abs(url), self._auth.header(self.repo), self._ssl,
                            timeout=self._limits.read, offset=offset, active=self._active) as (
                    status, blocks):
                if status == 401 and attempt == 1:
                    continue
                if status not in (200, 206):
                    raise SourceUnavailable(f"registry {self.ref.registry}: GET {url} -> "
                                            f"{status}")
                skip = offset if status == 200 else 0
                for b in blocks:
                    if skip:
                        n = min(skip, len(b))
                        b, skip = b[n:], skip - n
                    if b:
                        yield b
                return

    def _resuming(self, digest: str, size: int) -> Generator[bytes, None, None]:
        """Blob bytes; a connection cut or closed early is resumed where it stopped (a
        network failure, exit 6, never taken for tampering), under the rate floor."""
        url, got, idle = self._blob_url(digest), 0, 0
        watch = RateWatch(self._limits, f"blob {digest} from {self.ref.registry}")
        while True:
            if self._aborted.is_set():
                raise SourceUnavailable(f"blob {digest} from {self.ref.registry}: interrupted")
            before = got
            try:
                for b in self._stream(url, got):
                    got += len(b)
                    watch.add(len(b))
                    yield b
            except BodyCut as err:
                cut: SourceUnavailable | None = err
            else:
                cut = None
            if got >= size:
                return
            idle = 0 if got > before else idle + 1
            if idle >= _RESUMES or self._aborted.is_set():
                raise cut or SourceUnavailable(
                    f"registry {self.ref.registry}: blob {digest} ended at {got} of {size} B",
                    hint="the connection keeps closing early; rerun to resume")

    @contextmanager
    def _open(self, digest: str, size: int) -> Iterator[Iterator[bytes]]:
        blocks = self._resuming(digest, size)
        try:
            yield bounded(blocks, size, digest)
        finally:
            blocks.close()

    def open_blob(self, digest: str, size: int) -> AbstractContextManager[Iterator[bytes]]:
        """Stream a blob; at most ``size`` bytes are accepted."""
        return self._open(digest, size)

    # -- manifests ----------------------------------------------------------------------------
    def put_manifest(self, data: bytes, media_type: str, digest: str, *,
                     tag: str | None = None, subject: Descriptor | None = None) -> None:
        """PUT by digest (and tag); without the referrers API, update the fallback tag."""
        resp = self._req("PUT", f"/v2/{self.repo}/manifests/{digest}", content=data,
                         headers={"Content-Type": media_type}, ok=(201,))
        if subject is not None:
            self.referrers_api = "oci-subject" in resp.headers
            if not self.referrers_api:
                self._add_fallback(subject, data, media_type, digest)
        if tag:
            self._req("PUT", f"/v2/{self.repo}/manifests/{tag}", content=data,
                      headers={"Content-Type": media_type}, ok=(201,))

    def _add_fallback(self, subject: Descriptor, data: bytes, media_type: str,
                      digest: str) -> None:
        """OCI 1.1 referrers tag schema: an index at tag ``sha256-<hex>`` listing referrers.

        Read-modify-write without a lock: two pushers racing on one subject can lose an
        entry (the spec's known limit); a rerun of push adds it back.
        """
        tag = fallback_tag(subject)
        index = with_referrer(self._fallback_list(tag, MAX_MANIFEST_BYTES), data, media_type,
                              digest)
        if index is not None:
            self._req("PUT", f"/v2/{self.repo}/manifests/{tag}", content=index,
                      headers={"Content-Type": IMAGE_INDEX}, ok=(201,))

    def _fallback_list(self, tag: str, max_bytes: int) -> list[dict[str, Any]]:
        try:
            data, _ = self.get_manifest(tag, max_bytes)
        except _NotFound:
            return []
        try:
            doc = loads_json(data, max_bytes=max_bytes, what="referrers index")
            manifests = doc["manifests"]
        except (MalformedDocument, KeyError, TypeError) as err:
            raise VerificationError(f"referrers fallback tag {tag} is malformed: {err}"
                                    ) from None
        if not isinstance(manifests, list):
            raise VerificationError(f"referrers fallback tag {tag} is malformed")
        return [m for m in manifests if isinstance(m, dict)]

    def get_manifest(self, reference: str, max_bytes: int) -> tuple[bytes, str]:
        """GET a manifest, refusing more than ``max_bytes``; :class:`_NotFound` on 404."""
        url = f"/v2/{self.repo}/manifests/{reference}"
        try:
            with self._client.stream("GET", url, headers={"Accept": _MANIFEST_ACCEPT}) as resp:
                if resp.status_code == 404:
                    raise _NotFound(f"{self.name}: no manifest {reference}")
                if resp.status_code != 200:
                    raise self._error("GET", url, httpx.Response(
                        resp.status_code, content=read_capped(resp, MAX_REPLY, url,
                                                              self._limits)))
                buf = read_capped(resp, max_bytes, f"{self.name}: manifest {reference}",
                                  self._limits)
                mt = resp.headers.get("content-type", "").split(";")[0].strip()
        except httpx.HTTPError as err:
            raise SourceUnavailable(f"registry {self.ref.registry} unreachable: "
                                    f"{type(err).__name__}") from None
        return buf, mt

    def referrers(self, subject: Descriptor, max_bytes: int) -> list[Descriptor]:
        """The referrers API if the registry has it, else the fallback tag."""
        resp = self._req("GET", f"/v2/{self.repo}/referrers/{subject.digest}", ok=(200, 404),
                         cap=max_bytes, headers={"Accept": IMAGE_INDEX})
        if resp.status_code == 200 and \
                resp.headers.get("content-type", "").startswith(IMAGE_INDEX):
            try:
                raw = loads_json(resp.content, max_bytes=max_bytes)["manifests"]
            except (MalformedDocument, KeyError, TypeError) as err:
                raise VerificationError(f"{self.name}: referrers list malformed: {err}"
                                        ) from None
        else:
            raw = self._fallback_list(fallback_tag(subject), max_bytes)
        if not isinstance(raw, list):
            raise VerificationError(f"{self.name}: referrers list malformed")
        return [Descriptor.from_json(d, f"referrer of {subject.digest}") for d in raw]


def _open_blob(path: Path) -> BinaryIO:
    """A mirror object to push: a regular file, never a link, FIFO or device."""
    try:
        return open_regular(path, what=str(path))
    except MalformedDocument as err:
        raise CorruptMirror(str(err), hint="restore the bundle from a transfer set") from None


class _NotFound(SourceUnavailable):
    """A manifest or tag the registry does not have."""
