"""Registry auth over httpx (the docker token flow: Bearer challenge -> token, or Basic) and
the bounded reply reader every registry request goes through.

A hostile registry (or its token service) may answer with an endless or dripping body: every
reply is streamed, refused past a byte cap, and abandoned past the deadline or under the rate
floor of :mod:`specbundle.netlimits`. No secret reaches a message.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Generator, Iterator
from urllib.parse import urlsplit

import httpx

from specbundle.errors import VerificationError
from specbundle.netlimits import NetLimits, RateWatch
from specbundle.oci.auth import Credentials
from specbundle.strict import MalformedDocument, loads_json

__all__ = ["MAX_REPLY", "TokenAuth", "read_capped"]

#: the largest reply to a non-manifest request (errors, upload sessions, tokens)
MAX_REPLY = 1024 * 1024


def read_capped(resp: httpx.Response, cap: int, what: str, limits: NetLimits) -> bytes:
    """A streamed reply body: at most ``cap`` bytes (a declared larger length is refused
    before reading), complete within the deadline and above the rate floor."""
    declared = resp.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise VerificationError(f"{what}: reply is {declared} bytes, over the {cap}-byte limit")
    watch = RateWatch(limits, what, deadline=limits.deadline, hint="retry later")
    buf = bytearray()
    for b in resp.iter_bytes():  # network-sized pieces: the deadline is checked often
        buf += b
        if len(buf) > cap:
            raise VerificationError(f"{what}: reply is over the {cap}-byte limit")
        watch.add(len(b))
    return bytes(buf)



def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    for part in _split_params(rest):
        k, _, v = part.partition("=")
        params[k.strip().lower()] = v.strip().strip('"')
    return scheme.lower(), params


def _split_params(text: str) -> Iterator[str]:
    buf, quoted = "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            yield buf
            buf = ""
        else:
            buf += ch
    if buf.strip():
        yield buf


class TokenAuth(httpx.Auth):
    """Docker registry auth: answer Bearer challenges with a token, Basic with the password.

    Tokens are cached per challenge scope and sent proactively on later requests to the same
    repository, so a streamed upload body is never sent into a 401 (it could not be replayed).
    """

    # False: a blob GET must stream, not be read whole first; the token reply is read below
    requires_response_body = False

    def __init__(self, creds: Credentials | None, limits: NetLimits) -> None:
        self._creds = creds
        self._limits = limits
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}  # repository -> "Bearer x" / "Basic y"

    @staticmethod
    def _repo(url: httpx.URL) -> str:
        path = url.path.removeprefix("/v2/")
        for marker in ("/blobs/", "/manifests/", "/referrers/", "/tags/"):
            if marker in path:
                return path.split(marker, 1)[0]
        return ""

    def header(self, repo: str) -> str | None:
        """The Authorization value cached for ``repo`` (None: anonymous so far)."""
        with self._lock:
            return self._tokens.get(repo) or self._tokens.get("")

    def _basic(self) -> str | None:
        if self._creds is None or self._creds.identity:
            return None
        raw = f"{self._creds.username}:{self._creds.secret}".encode()
        return "Basic " + base64.b64encode(raw).decode()

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        repo = self._repo(request.url)
        with self._lock:
            cached = self._tokens.get(repo) or self._tokens.get("")
        if cached:
            request.headers["Authorization"] = cached
        response = yield request
        if response.status_code != 401:
            return
        scheme, params = _challenge(response.headers.get("www-authenticate", ""))
        if scheme == "basic":
            value = self._basic()
        elif scheme == "bearer" and params.get("realm"):
            value = yield from self._token(params, repo, request)
        else:
            return
        if value is None:
            return
        with self._lock:
            self._tokens[repo] = value
        request.headers["Authorization"] = value
        yield request

    def _token(self, params: dict[str, str], repo: str, request: httpx.Request
               ) -> Generator[httpx.Request, httpx.Response, str | None]:
        scope = params.get("scope") or (f"repository:{repo}:pull,push" if repo else "")
        query = {"service": params.get("service", ""), "scope": scope}
        realm = params["realm"]
        if urlsplit(realm).scheme not in ("https", "http"):
            return None
        if self._creds is not None and self._creds.identity:
            req = httpx.Request("POST", realm, data={
                "grant_type": "refresh_token", "refresh_token": self._creds.secret,
                "service": query["service"], "scope": scope, "client_id": "specbundle"})
        else:
            req = httpx.Request("GET", realm, params={k: v for k, v in query.items() if v})
            basic = self._basic()
            if basic:
                req.headers["Authorization"] = basic
        resp = yield req
        if resp.status_code != 200:
            return None
        try:
            doc = loads_json(read_capped(resp, MAX_REPLY, "token reply", self._limits),
                             max_bytes=MAX_REPLY, what="token reply")
        except (MalformedDocument, VerificationError):
            return None
        tok = doc.get("token") or doc.get("access_token") if isinstance(doc, dict) else None
        return f"Bearer {tok}" if isinstance(tok, str) and tok else None
