"""``specbundle pull``."""

from __future__ import annotations

import click

__all__ = ["command"]


@click.command("pull")
def command() -> None:
    """(being built)."""
