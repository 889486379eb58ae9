"""Options shared by the signing commands: keys, passphrases, a hashing progress bar."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from specbundle.attest import SigningKey, load_signing_key
from specbundle.cli._progress import byte_progress
from specbundle.errors import EnvironmentProblem

__all__ = ["PASSPHRASE_ENV", "hash_progress", "load_keys", "passphrase_option", "read_passphrase"]

PASSPHRASE_ENV = "SPECBUNDLE_KEY_PASSPHRASE"  # noqa: S105 - a variable name, not a secret
F = TypeVar("F", bound=Callable[..., Any])


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
            return path.read_bytes().splitlines()[0] if path.stat().st_size else b""
        except OSError as err:
            raise EnvironmentProblem(f"cannot read passphrase file {path}: {err.strerror}") from err
    env = os.environ.get(PASSPHRASE_ENV)
    return env.encode() if env else None


def load_keys(paths: tuple[Path, ...], passphrase_file: Path | None) -> list[SigningKey]:
    """Load every ``--key``; the same passphrase applies to each encrypted one."""
    pw = read_passphrase(passphrase_file)
    out = []
    for p in paths:
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
