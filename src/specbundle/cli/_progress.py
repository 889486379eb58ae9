"""Progress bars for long work (stderr, hidden when not a terminal or with --json)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from specbundle.cli._output import err_console

__all__ = ["byte_progress"]


@contextlib.contextmanager
def byte_progress(enabled: bool = True) -> Iterator[Progress | None]:
    """A byte-transfer progress bar on stderr, or None when disabled."""
    if not enabled or not err_console.is_terminal:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
        TransferSpeedColumn(), TimeRemainingColumn(), console=err_console, transient=False,
    ) as bar:
        yield bar
