"""Moved to tests/lib/cli.py; kept importable for modules not yet ported."""

from tests.lib.cli import run_cli

__all__ = ["run_cli"]
