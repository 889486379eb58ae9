"""Stream a blob body with the standard library's ``http.client``.

Why not httpx here: its h11 body iteration runs at about a quarter of the socket rate on a
loopback registry (measured: 128 MiB in 1.3-1.7 s against 0.3-0.6 s for ``http.client`` and
0.4 s for curl), which would make pull 2-3x slower than ``skopeo copy``. httpx still does
everything else (auth challenges, tokens, manifests, uploads); this module only reads a body
whose URL and ``Authorization`` header httpx already settled. Redirects (a registry on object
storage sends blob GETs to a pre-signed URL) are followed without the header on another host.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urljoin, urlsplit

from specbundle.errors import SourceUnavailable

__all__ = ["BodyCut", "stream_get"]

_BLOCK = 1024 * 1024
_MAX_REDIRECTS = 5


def _connect(url: str, context: ssl.SSLContext | None, timeout: float
             ) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourceUnavailable(f"registry redirected to an unsupported URL scheme "
                                f"{parts.scheme!r}")
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout,
                                           context=context), path
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout), path


@contextmanager
def stream_get(url: str, authorization: str | None, context: ssl.SSLContext | None, *,
               timeout: float = 60.0, offset: int = 0,
               active: set[socket.socket] | None = None,
               ) -> Iterator[tuple[int, Iterator[bytes]]]:
    """GET ``url`` (from byte ``offset``: a Range request); yields (status, body blocks).

    Statuses other than 200 and 206 come with an empty body. ``timeout`` bounds the connect
    and every read; while the body streams its socket is in ``active``, so that an abort
    (Ctrl-C) can shut it and the blocked read fails at once.
    """
    origin = urlsplit(url).netloc
    for _ in range(_MAX_REDIRECTS + 1):
        conn, path = _connect(url, context, timeout)
        headers = {"User-Agent": "specbundle", "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        if authorization and urlsplit(url).netloc == origin:
            headers["Authorization"] = authorization
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            raise SourceUnavailable(f"registry {origin} unreachable: {type(err).__name__}"
                                    ) from None
        if resp.status in (301, 302, 303, 307, 308) and resp.getheader("location"):
            url = urljoin(url, resp.getheader("location") or "")
            conn.close()
            continue
        sock = conn.sock
        if active is not None and sock is not None:
            active.add(sock)
        try:
            yield resp.status, (_blocks(resp, origin) if resp.status in (200, 206)
                                else iter(()))
        finally:
            if active is not None and sock is not None:
                active.discard(sock)
            conn.close()
        return
    raise SourceUnavailable(f"registry {origin}: too many redirects for a blob")


class BodyCut(SourceUnavailable):
    """The connection failed while a body streamed (the caller may resume with a Range)."""


def _blocks(resp: http.client.HTTPResponse, origin: str) -> Iterator[bytes]:
    """Body blocks; a connection that ends early simply ends (the caller counts bytes)."""
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    try:
        while n := resp.readinto(buf):
            yield bytes(view[:n])
    except (OSError, http.client.HTTPException) as err:
        raise BodyCut(f"registry {origin}: blob read failed: {type(err).__name__}") from None
