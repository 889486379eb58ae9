"""Options shared by the signing commands: keys, passphrases, a hashing progress bar.

Every ``--key`` is a key file or a PKCS#11 URI (RFC 7512, ``pkcs11:token=…;object=…``): the
``KEY_SOURCE`` type accepts both and :func:`load_keys` opens either, so each signing command
gets token keys without code of its own. ``--signing-cert``/``--cert-chain`` attach an X.509
chain to the key (the OMS certificate method).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from specbundle.attest import SigningKey, load_certificates, load_signing_key
from specbundle.attest.pkcs11 import is_pkcs11_uri, load_token_key
from specbundle.cli._progress import byte_progress
from specbundle.errors import EnvironmentProblem, UsageError
from specbundle.strict import MalformedDocument, read_bounded

__all__ = ["KEY_SOURCE", "PASSPHRASE_ENV", "attach_chain", "cert_options", "hash_progress",
           "load_keys", "passphrase_option", "read_passphrase"]

PASSPHRASE_ENV = "SPECBUNDLE_KEY_PASSPHRASE"  # noqa: S105 - a variable name, not a secret
_MAX_SECRET_FILE = 65536
F = TypeVar("F", bound=Callable[..., Any])


class _KeySource(click.ParamType[Path | str, Any]):
    """An existing key file (-> Path) or a ``pkcs11:`` URI (-> str, parsed when loaded)."""

    name = "KEY|pkcs11:URI"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Path | str:
        if isinstance(value, Path):
            return value
        text = str(value)
        if is_pkcs11_uri(text):
            return text
        return click.Path(dir_okay=False, exists=True, path_type=Path).convert(text, param, ctx)


KEY_SOURCE = _KeySource()


def cert_options(f: F) -> F:
    """``--signing-cert LEAF`` and repeatable ``--cert-chain`` (the reference tool's names)."""
    f = click.option("--cert-chain", "--cert_chain", "cert_chain", multiple=True,
                     type=click.Path(dir_okay=False, exists=True, path_type=Path),
                     help="Issuer certificates of --signing-cert, leaf to root (repeat).")(f)
    return click.option("--signing-cert", "--signing_cert", "signing_cert", default=None,
                        type=click.Path(dir_okay=False, exists=True, path_type=Path),
                        help="X.509 certificate of the (first) key: sign with the OMS "
                             "certificate method.")(f)


def attach_chain(keys: list[SigningKey], signing_cert: Path | None,
                 cert_chain: tuple[Path, ...]) -> list[SigningKey]:
    """The first key signing as ``signing_cert`` with ``cert_chain`` behind it."""
    if signing_cert is None:
        if cert_chain:
            raise click.UsageError("--cert-chain needs --signing-cert")
        return keys
    chain = load_certificates((signing_cert, *cert_chain))
    return [keys[0].with_chain(chain), *keys[1:]]


def passphrase_option(f: F) -> F:
    """``--passphrase-file``: where an encrypted key's passphrase is (else the env variable)."""
    return click.option(
        "--passphrase-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help=f"File holding the private key passphrase (default: ${PASSPHRASE_ENV}).",
    )(f)


def read_passphrase(path: Path | None) -> bytes | None:
    """The passphrase from a file (first line) or the environment; None when neither is set."""
    if path is not None:
        try:
            data = read_bounded(path, max_bytes=_MAX_SECRET_FILE, what=f"passphrase file {path}")
            return data.splitlines()[0] if data else b""
        except MalformedDocument as err:
            raise UsageError(str(err)) from None
        except OSError as err:
            raise EnvironmentProblem(f"cannot read passphrase file {path}: {err.strerror}") from err
    env = os.environ.get(PASSPHRASE_ENV)
    return env.encode() if env else None


def load_keys(paths: tuple[Path | str, ...], passphrase_file: Path | None) -> list[SigningKey]:
    """Load every ``--key`` (file or PKCS#11 URI); one passphrase serves every encrypted file."""
    pw = read_passphrase(passphrase_file)
    out = []
    for p in paths:
        if isinstance(p, str):
            out.append(load_token_key(p))
            continue
        try:
            out.append(load_signing_key(p, None))
        except EnvironmentProblem:
            if pw is None:
                raise
            out.append(load_signing_key(p, pw))
    return out


@contextlib.contextmanager
def hash_progress(
    enabled: bool, total: int | None, what: str
) -> Iterator[Callable[[int], None] | None]:
    """A byte progress bar for hashing, as a callback (None when hidden)."""
    with byte_progress(enabled) as bar:
        if bar is None:
            yield None
            return
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)
