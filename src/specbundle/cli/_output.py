"""Rendering of command results: rich tables for people, JSON for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["console", "err_console", "json_written", "print_json", "print_table",
           "reset_json_written", "write_json_text"]

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

# Whether this invocation already put its JSON document on stdout: with --json, a failure
# after that (verify's "verified: false", scan's blocked report) must not add a second one.
_written: list[bool] = [False]


def reset_json_written() -> None:
    """Start of an invocation (the CLI also runs in-process, many times, in tests)."""
    _written[0] = False


def json_written() -> bool:
    """Whether a JSON document went to stdout during this invocation."""
    return _written[0]


def write_json_text(text: str) -> None:
    """An already serialised JSON document (scan's json/SARIF) on stdout."""
    sys.stdout.write(text)
    sys.stdout.flush()
    _written[0] = True


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    write_json_text(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A simple table."""
    table = Table(title=title, show_edge=False, header_style="bold")
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*("" if v is None else str(v) for v in r))
    console.print(table)
