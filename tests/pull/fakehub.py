"""A loopback hub that misbehaves on purpose: stalls, trickles, answers 429.

olah serves real repos but cannot be made to stall or rate-limit, so the hub-fault tests talk to
this small HTTP server instead. It speaks the three endpoints the puller uses, on a real socket
(``http.server``), to the real huggingface_hub and httpx clients: model info
(``/api/models/<repo>/revision/<rev>``), the recursive tree listing and file downloads
(``/<repo>/resolve/<commit>/<path>``, with ``Range``). Files are non-LFS, so the client checks
their git blob ids exactly as with a real hub.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

SHA = "c0ffee" + "0" * 34


def entry(path: str, data: bytes, **over: object) -> dict[str, object]:
    """One honest tree-listing entry for ``data`` (``over`` replaces fields: lies)."""
    return {"type": "file", "path": path, "size": len(data), "oid": blob_id(data), **over}


def lfs_entry(path: str, data: bytes, **over: object) -> dict[str, object]:
    """An LFS entry as the Hub lists it (sha256 and size of the real bytes)."""
    return {"type": "file", "path": path, "size": len(data), "oid": "0" * 40,
            "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                    "pointerSize": 134}, **over}


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class Behaviour:
    """What the hub does; tests flip these while it runs."""

    files: dict[str, bytes] = field(default_factory=dict)
    stall_info: bool = False          # model info never answers
    rate_limit_info: bool = False     # model info always answers 429
    rate_limit_tree: bool = False     # the tree listing always answers 429 (a retried call)
    trickle: bool = False             # file bodies arrive a few bytes per second
    stall_body_after: int | None = None  # file bodies stop after this many bytes
    requests: list[str] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)
    #: the tree listing as the hub sends it (hostile entries, lies about sizes and digests);
    #: None: one honest entry per file of ``files``
    tree: list[dict[str, object]] | None = None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        return

    def _json(self, code: int, value: object, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(value).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _hold(self) -> None:
        while not self.server.stopping.is_set():
            time.sleep(0.05)

    def do_GET(self) -> None:
        b = self.server.behaviour
        b.requests.append(self.path)
        b.auth.append(self.headers.get("authorization", ""))
        repo = "org/faulty"
        if m := re.match(rf"^/api/models/{repo}/revision/[^/?]+", self.path):
            if b.stall_info:
                self._hold()
                return
            if b.rate_limit_info:
                self._json(429, {"error": "slow down"}, {"Retry-After": "1"})
                return
            self._json(200, {"id": repo, "sha": SHA,
                             "siblings": [{"rfilename": p} for p in b.files]})
        elif self.path.startswith(f"/api/models/{repo}/tree/{SHA}"):
            if b.rate_limit_tree:
                self._json(429, {"error": "slow down"}, {"Retry-After": "1"})
                return
            self._json(200, b.tree if b.tree is not None else [
                {"type": "file", "path": p, "size": len(d), "oid": blob_id(d)}
                for p, d in b.files.items()])
        elif m := re.match(rf"^/{repo}/resolve/{SHA}/(.+)$", self.path):
            self._file(unquote(m.group(1), errors="surrogateescape"))
        else:
            self._json(404, {"error": "not found"})

    def _file(self, path: str) -> None:
        b = self.server.behaviour
        data = b.files.get(path)
        if data is None:
            self._json(404, {"error": "no such file"})
            return
        start = 0
        if rng := re.match(r"bytes=(\d+)-", self.headers.get("Range", "")):
            start = int(rng.group(1))
        body = data[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            if b.trickle:
                for i in range(0, len(body), 4):
                    if self.server.stopping.is_set():
                        return
                    self.wfile.write(body[i:i + 4])
                    self.wfile.flush()
                    time.sleep(0.2)
            elif b.stall_body_after is not None:
                self.wfile.write(body[:b.stall_body_after])
                self.wfile.flush()
                self._hold()
            else:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    behaviour: Behaviour
    stopping: threading.Event


@contextmanager
def fault_hub(behaviour: Behaviour) -> Iterator[str]:
    """Serve ``behaviour`` on 127.0.0.1; yields the endpoint URL."""
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.behaviour = behaviour
    srv.stopping = threading.Event()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.stopping.set()
        srv.shutdown()
        srv.server_close()
