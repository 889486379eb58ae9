"""``specbundle demo``."""

from __future__ import annotations

import click

__all__ = ["command"]


@click.command("demo")
def command() -> None:
    """(being built)."""
