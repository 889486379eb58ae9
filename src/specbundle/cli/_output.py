"""Rendering of command results: rich tables for people, JSON for machines.

Names, values and messages shown here come from model files and hub listings: attacker text.
Two layers keep it from acting on a terminal or a CI log:

- :func:`esc` makes a value literal inside rich markup (``[link=...]`` or ``[/]`` in a file
  name is shown, never interpreted) and escapes control characters; every command uses it
  for data it interpolates into a markup string, and :func:`print_table` treats every plain
  cell and title as literal text;
- both consoles escape, as the very last step, every control, format (bidi, zero-width),
  surrogate and line-separator character in the text they write (only rich's own styling and
  cursor sequences are emitted raw), so an ``ESC`` in a value that reached a ``print`` any
  other way (an error message, a warning) is shown as ``\x1b``, never obeyed.

Tables read in a CI log (stdout not a terminal) never wrap: figures are rounded to what they
mean (:func:`figure`), and a table wider than the log's columns (``COLUMNS``, else 80) is
printed one record per line instead of folding a digest or a ratio into ``1.786902…``.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from specbundle.text import escape_char

__all__ = ["console", "err_console", "esc", "figure", "json_written", "print_json", "print_table",
           "reset_json_written", "term_safe", "write_json_text"]

_ASCII_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# controls, format characters (bidi overrides, zero-width, BOM), surrogates, line/paragraph
# separators: what makes a terminal act or shows another text than the one written
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def term_safe(text: str) -> str:
    """``text`` with every character a terminal acts on or hides escaped (newline and tab kept)."""
    if text.isascii():
        return text if text.isprintable() else _ASCII_UNSAFE.sub(
            lambda m: escape_char(m.group()), text)
    return "".join(escape_char(c) if c not in "\n\t" and unicodedata.category(c) in _HIDDEN
                   else c for c in text)


def esc(value: object) -> str:
    """A value made literal for rich markup and safe for a terminal."""
    return escape(term_safe(str(value)))


class _SafeConsole(Console):
    """A console that never writes a control character it did not generate itself."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            seg if seg.control else Segment(term_safe(seg.text), seg.style, None)
            for seg in buffer)


console: Console = _SafeConsole(highlight=False, soft_wrap=True)
err_console: Console = _SafeConsole(stderr=True, highlight=False, soft_wrap=True)

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


def figure(value: float) -> str:
    """A measured figure rounded to what it means: 3 significant digits below 100, whole
    numbers above (``1.786902331`` -> ``1.79``, ``1234.5678`` -> ``1235``)."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _cell(value: Any) -> Text:
    if isinstance(value, Text):  # styled on purpose by the caller (e.g. a status)
        return value
    if isinstance(value, float):
        return Text(figure(value))
    return Text("" if value is None else term_safe(str(value)))


def _records(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Text]]) -> None:
    """One line per row (``column: value | ...``, empty cells left out): what a CI log shows
    without wrapping."""
    if title is not None:
        console.print(_cell(title), soft_wrap=True)
    for r in rows:
        line = Text(" ")
        for c, v in zip(columns, r, strict=False):
            if v.plain:  # an empty cell says nothing in a record
                line.append(f"{' | ' if len(line) > 1 else ''}{c}: ", style="bold")
                line.append_text(v)
        console.print(line, soft_wrap=True)


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A simple table; plain cells and the title are literal text (never markup).

    On a terminal rich fits it to the window; anywhere else (a CI log, a pipe) a table that
    does not fit ``console.width`` becomes one record per line, so nothing wraps.
    """
    cells = [[_cell(v) for v in r] for r in rows]
    table = Table(title=None if title is None else _cell(title), show_edge=False,
                  header_style="bold")
    for c in columns:
        table.add_column(c)
    for r in cells:
        table.add_row(*r)
    if not console.is_terminal:
        natural = Measurement.get(console, console.options.update_width(1 << 20), table)
        if natural.maximum > console.width:
            _records(title, columns, cells)
            return
    console.print(table)
