"""A faulty HTTP proxy in front of the real test registry (loopback only).

Modes: ``pass``; ``cut`` (a blob body is cut at half, ``cuts`` times, then served whole);
``cut-all`` (every blob body is cut before its first byte); ``stall`` (half a blob body, then
silence until the proxy stops); ``drip`` (manifests one byte every ``drip_s`` seconds);
``huge-referrers`` (the referrers API answers a 1.5 GB body of zeros).
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FaultProxy", "fault_proxy"]

_HOP = ("connection", "transfer-encoding", "content-length", "keep-alive", "server", "date")


@dataclass
class FaultProxy:
    """A running proxy: ``host`` (127.0.0.1:PORT) and what it did."""

    upstream: str
    mode: str
    cuts: int = 2
    drip_s: float = 2.0
    host: str = ""
    stop: threading.Event = field(default_factory=threading.Event)
    stalled: threading.Event = field(default_factory=threading.Event)
    faults: int = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_HEAD(self) -> None:
        self._proxy()

    def do_GET(self) -> None:
        self._proxy()

    def _proxy(self) -> None:
        p = self.server.proxy
        if p.mode == "huge-referrers" and "/referrers/" in self.path:
            self._huge()
            return
        host, _, port = p.upstream.partition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host",
                                                                              "connection")}
        conn.request(self.command, self.path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP:
                self.send_header(k, v)
        length = resp.getheader("content-length", "0") if self.command == "HEAD" \
            else str(len(body))
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command == "HEAD":
            return
        blob = "/blobs/sha256:" in self.path and resp.status in (200, 206)
        if blob and (p.mode == "cut-all" or (p.mode == "cut" and p.cuts > 0)):
            p.cuts -= 1
            p.faults += 1
            self.wfile.write(body[:0 if p.mode == "cut-all" else len(body) // 2])
            self._hang_up()
        elif blob and p.mode == "stall":
            p.faults += 1
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            p.stalled.set()
            p.stop.wait()
            self._hang_up()
        elif "/manifests/" in self.path and p.mode == "drip":
            p.faults += 1
            for i in range(len(body)):
                if p.stop.is_set():
                    break
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                time.sleep(p.drip_s)
            self._hang_up()
        else:
            self.wfile.write(body)

    def _huge(self) -> None:
        p = self.server.proxy
        p.faults += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
        self.send_header("Content-Length", str(1500 * 1024 * 1024))
        self.end_headers()
        zeros = b" " * (1 << 20)
        with suppress(OSError):
            for _ in range(1500):
                if p.stop.is_set():
                    break
                self.wfile.write(zeros)
        self._hang_up()

    def _hang_up(self) -> None:
        self.close_connection = True
        with suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy


@contextmanager
def fault_proxy(upstream: str, mode: str, **kw: float) -> Iterator[FaultProxy]:
    """Run a :class:`FaultProxy` in front of ``upstream`` (host:port) until the block ends."""
    proxy = FaultProxy(upstream, mode, **kw)  # type: ignore[arg-type]
    server = _Server(("127.0.0.1", 0), _Handler)
    server.proxy = proxy
    proxy.host = f"127.0.0.1:{server.server_address[1]}"
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield proxy
    finally:
        proxy.stop.set()
        server.shutdown()
        server.server_close()
