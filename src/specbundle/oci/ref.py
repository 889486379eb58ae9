"""Parse and validate ``REGISTRY/REPO[:TAG][@sha256:HEX]`` before any byte goes on the wire.

The grammar is the OCI distribution spec's (repository path components, tag, digest); the
registry part must be a host name or address with an optional port. Anything else is a
:class:`~specbundle.errors.UsageError`, so a hostile or mistyped reference never reaches a URL
or a file name.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from specbundle.errors import UsageError

__all__ = ["Reference", "is_loopback", "parse_reference", "valid_tag"]

_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                   r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
                   r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$")
_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
_MAX_REPO = 255


def valid_tag(tag: str) -> bool:
    """True for an OCI tag (``[A-Za-z0-9_][A-Za-z0-9._-]{0,127}``)."""
    return bool(_TAG.match(tag))


@dataclass(frozen=True)
class Reference:
    """A parsed reference; at least one of ``tag`` and ``digest`` is set."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def reference(self) -> str:
        """What goes in ``/v2/<repo>/manifests/<reference>``: the digest wins over the tag."""
        return self.digest or self.tag or "latest"

    @property
    def host(self) -> str:
        """The registry host without port (brackets removed for IPv6)."""
        if self.registry.startswith("["):
            return self.registry[1:self.registry.index("]")]
        return self.registry.split(":", 1)[0]

    def with_digest(self, digest: str) -> Reference:
        """The same repository pinned to ``digest`` (tag kept for display)."""
        return Reference(self.registry, self.repository, self.tag, digest)

    def __str__(self) -> str:
        out = f"{self.registry}/{self.repository}"
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def parse_reference(text: str) -> Reference:
    """``registry[:port]/path/name[:tag][@sha256:hex]`` -> :class:`Reference`."""
    if not text or len(text) > 1024 or any(c.isspace() for c in text):
        raise UsageError(f"{text!r} is not a registry reference", hint="REGISTRY/REPO:TAG")
    rest, _, digest = text.partition("@")
    if digest and not _DIGEST.match(digest):
        raise UsageError(f"{digest!r} is not a sha256 digest (sha256:<64 hex>)")
    registry, slash, path = rest.partition("/")
    if not slash or not _HOST.match(registry):
        raise UsageError(f"{text!r} does not start with a registry host",
                         hint="REGISTRY/REPO:TAG, e.g. registry.example:5000/models/pair:v1")
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, _, tag = path.rpartition(":")
        if not valid_tag(tag):
            raise UsageError(f"{tag!r} is not a valid tag")
    parts = path.split("/")
    if not path or len(path) > _MAX_REPO or not all(_COMPONENT.match(p) for p in parts):
        raise UsageError(f"{path!r} is not a valid repository name",
                         hint="lower-case path components: [a-z0-9]+ separated by . _ __ or -")
    if tag is None and not digest:
        tag = "latest"
    return Reference(registry, path, tag, digest or None)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (where --plain-http is allowed)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
