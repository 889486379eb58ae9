"""Signing keys held in a PKCS#11 token (HSM, smart card, SoftHSM), named by RFC 7512 URI.

``pkcs11:token=release;object=signing-key?module-path=/usr/lib/softhsm/libsofthsm2.so``

The private key never leaves the token: this module hashes in software and asks the token
for a raw ECDSA signature (``CKM_ECDSA``) over the digest, so it works with keys created
non-extractable. The PIN never comes from the command line: it is read from the URI's
``pin-source`` (a file) or from ``$SPECBUNDLE_PKCS11_PIN``; a URI with ``pin-value`` is
refused. The module is the URI's ``module-path`` or ``$SPECBUNDLE_PKCS11_MODULE``.

Only ECDSA keys (P-256/P-384/P-521) are supported, the kinds OMS allows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from specbundle.attest.keys import SigningKey
from specbundle.errors import EnvironmentProblem, UsageError
from specbundle.strict import MalformedDocument, read_bounded

__all__ = [
    "MODULE_ENV",
    "PIN_ENV",
    "Pkcs11Uri",
    "is_pkcs11_uri",
    "load_token_key",
    "parse_pkcs11_uri",
]

PIN_ENV = "SPECBUNDLE_PKCS11_PIN"
MODULE_ENV = "SPECBUNDLE_PKCS11_MODULE"
_PATH_ATTRS = {"token", "object", "id", "type", "manufacturer", "model", "serial",
               "library-manufacturer", "library-description", "library-version", "slot-id",
               "slot-description", "slot-manufacturer"}
_QUERY_ATTRS = {"module-path", "module-name", "pin-source", "pin-value"}
# DER-encoded namedCurve OIDs (CKA_EC_PARAMS) -> curve, coordinate size
_CURVES: dict[bytes, tuple[ec.EllipticCurve, int]] = {
    bytes.fromhex("06082a8648ce3d030107"): (ec.SECP256R1(), 32),
    bytes.fromhex("06052b81040022"): (ec.SECP384R1(), 48),
    bytes.fromhex("06052b81040023"): (ec.SECP521R1(), 66),
}


def is_pkcs11_uri(text: str) -> bool:
    """True when ``text`` names a token key rather than a file."""
    return text.startswith("pkcs11:")


@dataclass(frozen=True)
class Pkcs11Uri:
    """The parts of an RFC 7512 URI this loader uses (values percent-decoded)."""

    path: dict[str, bytes]
    query: dict[str, str]

    def text(self, name: str) -> str | None:
        """A path attribute as UTF-8 text."""
        v = self.path.get(name)
        return v.decode("utf-8", "replace") if v is not None else None


def _pairs(part: str, sep: str, allowed: set[str], uri_kind: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for item in filter(None, part.split(sep)):
        name, eq, value = item.partition("=")
        if not eq or name not in allowed:
            raise UsageError(f"PKCS#11 URI: unknown or malformed {uri_kind} attribute {name!r}",
                             hint="RFC 7512, e.g. pkcs11:token=NAME;object=LABEL")
        if name in out:
            raise UsageError(f"PKCS#11 URI: attribute {name!r} given twice")
        out[name] = unquote_to_bytes(value)
    return out


def parse_pkcs11_uri(uri: str) -> Pkcs11Uri:
    """Parse ``pkcs11:path?query``; refuses a PIN in the URI itself.

    Raises:
        UsageError: not a PKCS#11 URI, unknown attributes, ``pin-value``, no object selector.
    """
    if not is_pkcs11_uri(uri):
        raise UsageError(f"not a PKCS#11 URI: {uri[:40]!r}")
    path, _, query = uri[len("pkcs11:"):].partition("?")
    p = _pairs(path, ";", _PATH_ATTRS, "path")
    q = {k: v.decode("utf-8", "replace") for k, v in _pairs(query, "&", _QUERY_ATTRS,
                                                            "query").items()}
    if "pin-value" in q:
        raise UsageError("PKCS#11 URI carries pin-value: a PIN must not be on the command line",
                         hint=f"set ${PIN_ENV} or pin-source=FILE")
    if "object" not in p and "id" not in p:
        raise UsageError("PKCS#11 URI names no key: add object=LABEL or id=%XX…")
    if p.get("type", b"private") != b"private":
        raise UsageError("PKCS#11 URI: a signing key must be type=private")
    return Pkcs11Uri(p, q)


def _pin(uri: Pkcs11Uri) -> str:
    src = uri.query.get("pin-source")
    if src is not None:
        file = Path(src.removeprefix("file:"))
        try:
            lines = read_bounded(file, max_bytes=65536, what=f"PKCS#11 PIN file {file}"
                                 ).decode("utf-8", "replace").splitlines()
        except MalformedDocument as err:
            raise UsageError(str(err)) from None
        except OSError as err:
            raise EnvironmentProblem(f"cannot read PKCS#11 PIN file {file}: {err.strerror}"
                                     ) from err
        return lines[0] if lines else ""
    pin = os.environ.get(PIN_ENV)
    if pin is None:
        raise EnvironmentProblem("no PIN for the PKCS#11 token",
                                 hint=f"set ${PIN_ENV} or add pin-source=FILE to the URI")
    return pin


def _ec_public(params: bytes, point: bytes) -> ec.EllipticCurvePublicKey:
    entry = _CURVES.get(params)
    if entry is None:
        raise UsageError("the PKCS#11 key is not ECDSA P-256/P-384/P-521")
    curve, size = entry
    if len(point) != 1 + 2 * size:  # DER OCTET STRING around the point (PKCS#11 v2.40)
        hdr = 2 if point[1] < 0x80 else 2 + (point[1] & 0x7F)
        point = point[hdr:]
    return ec.EllipticCurvePublicKey.from_encoded_point(curve, point)


class _TokenKey:
    """A private key handle in an open, logged-in session (kept open while referenced)."""

    def __init__(self, lib: Any, session: Any, handle: Any,
                 public: ec.EllipticCurvePublicKey) -> None:
        self._lib, self._session, self._handle, self._public = lib, session, handle, public

    def public_key(self) -> ec.EllipticCurvePublicKey:
        return self._public

    def sign(self, data: bytes, algorithm: hashes.HashAlgorithm) -> bytes:
        import PyKCS11

        h = hashes.Hash(algorithm)
        h.update(data)
        try:
            raw = bytes(self._session.sign(self._handle, h.finalize(),
                                           PyKCS11.Mechanism(PyKCS11.CKM_ECDSA)))
        except PyKCS11.PyKCS11Error as err:
            raise EnvironmentProblem(f"PKCS#11 token refused to sign: {err}") from err
        half = len(raw) // 2
        return encode_dss_signature(int.from_bytes(raw[:half]), int.from_bytes(raw[half:]))


def _find(session: Any, pk: Any, cls: int, uri: Pkcs11Uri) -> list[Any]:
    tmpl: list[tuple[int, Any]] = [(pk.CKA_CLASS, cls)]
    if (label := uri.text("object")) is not None:
        tmpl.append((pk.CKA_LABEL, label))
    if (key_id := uri.path.get("id")) is not None:
        tmpl.append((pk.CKA_ID, tuple(key_id)))
    return list(session.findObjects(tmpl))


def load_token_key(uri_text: str) -> SigningKey:
    """Open the token the URI names, log in, and wrap its private key as a :class:`SigningKey`.

    Raises:
        UsageError: malformed URI, no such key, several matching keys, not ECDSA.
        EnvironmentProblem: no binding or module, token absent, wrong PIN, no PIN.
    """
    uri = parse_pkcs11_uri(uri_text)
    module = uri.query.get("module-path") or os.environ.get(MODULE_ENV)
    if not module:
        raise EnvironmentProblem("no PKCS#11 module given",
                                 hint=f"add module-path=/path/to/module.so or set ${MODULE_ENV}")
    try:
        import PyKCS11
    except ImportError as err:
        raise EnvironmentProblem("PKCS#11 keys need the PyKCS11 package",
                                 hint="pip install 'specbundle[pkcs11]'") from err
    lib = PyKCS11.PyKCS11Lib()
    try:
        lib.load(module)
        slots = lib.getSlotList(tokenPresent=True)
        want = uri.text("token")
        chosen = [s for s in slots
                  if want is None or lib.getTokenInfo(s).label.strip() == want]
        if not chosen:
            raise EnvironmentProblem(f"no PKCS#11 token labelled {want!r} in {module}")
        session = lib.openSession(chosen[0], PyKCS11.CKF_SERIAL_SESSION)
        try:
            session.login(_pin(uri))
        except PyKCS11.PyKCS11Error as err:
            # login is per token and process: a second key of the same token is already in
            if err.value != PyKCS11.CKR_USER_ALREADY_LOGGED_IN:
                raise
        keys = _find(session, PyKCS11, PyKCS11.CKO_PRIVATE_KEY, uri)
        pubs = _find(session, PyKCS11, PyKCS11.CKO_PUBLIC_KEY, uri)
        if len(keys) != 1 or len(pubs) != 1:
            raise UsageError(f"PKCS#11 URI matches {len(keys)} private and {len(pubs)} public "
                             "key(s) in the token; it must name exactly one key pair")
        params, point = session.getAttributeValue(
            pubs[0], [PyKCS11.CKA_EC_PARAMS, PyKCS11.CKA_EC_POINT], allAsBinary=True)
    except PyKCS11.PyKCS11Error as err:
        raise EnvironmentProblem(f"PKCS#11 token {uri.text('token')!r}: {err}") from err
    public = _ec_public(bytes(params), bytes(point))
    return SigningKey.from_token(_TokenKey(lib, session, keys[0], public))
