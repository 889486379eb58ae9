"""One table from exception to exit code; the only place errors become process status.

A :class:`~specbundle.errors.SpecbundleError` carries its own code: 3/4/5 "the check said no",
7 "a diff found a runtime- or gate-changing difference" (``diff --fail-on-behaviour-change``),
1 "the tool broke", 6 "the machine lacks something". A foreign exception that escaped the
library unwrapped is 1 (a bug to report), unless it plainly says the machine lacks something:
an ``OSError`` (disk full, permission), ``MemoryError``, or an httpx transport failure. A
:class:`~specbundle.strict.MalformedDocument` that no stage wrapped is 3: the strict reader
refused bytes it was given (a mirror, medium or registry file), never a bug of the tool.
"""

from __future__ import annotations

import sys

import click

from specbundle.errors import ExitCode, SpecbundleError
from specbundle.strict import MalformedDocument

__all__ = ["exit_code_for"]


def exit_code_for(err: BaseException) -> int:
    """Exit code for any exception that reached the top of a command."""
    if isinstance(err, SpecbundleError):
        return err.exit_code
    if isinstance(err, click.UsageError):
        return ExitCode.USAGE
    if isinstance(err, KeyboardInterrupt):
        return 130
    if isinstance(err, MalformedDocument):  # hostile or damaged input, refused by the reader
        return ExitCode.VERIFICATION_FAILED
    if isinstance(err, OSError | MemoryError):  # a file, socket, disk or memory it lacks
        return ExitCode.ENVIRONMENT
    httpx = sys.modules.get("httpx")  # not imported: the error cannot be one of its own
    if httpx is not None and isinstance(err, httpx.TransportError):  # network would not connect
        return ExitCode.ENVIRONMENT
    return ExitCode.INTERNAL
