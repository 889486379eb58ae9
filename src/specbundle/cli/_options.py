"""Options shared by many commands, declared once."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from specbundle.mirror import Mirror

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["default_mirror", "json_option", "mirror_option", "open_mirror"]


def default_mirror() -> Path:
    """``$SPECBUNDLE_MIRROR``, else ``./mirror``."""
    return Path(os.environ.get("SPECBUNDLE_MIRROR") or "mirror")


def mirror_option(f: F) -> F:
    """``--mirror DIR`` on every command that reads or writes the mirror."""
    return click.option(
        "--mirror", "mirror_dir", type=click.Path(file_okay=False, path_type=Path),
        default=None, help="Mirror directory (default: $SPECBUNDLE_MIRROR, else ./mirror).",
    )(f)


def json_option(f: F) -> F:
    """``--json``: machine-readable output instead of tables."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(f)


def open_mirror(mirror_dir: Path | None, *, create: bool = False) -> Mirror:
    """Open the mirror a command was pointed at."""
    return Mirror.open(mirror_dir or default_mirror(), create=create)
