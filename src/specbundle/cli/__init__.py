"""The ``specbundle`` command: a thin layer that parses, calls one library facade, renders.

Each command lives in its own module and exposes ``command``; :data:`COMMANDS` lists them all
explicitly. :func:`main` is the only place with a broad ``except``: it maps every error to
its exit code through :mod:`specbundle.cli._errors` and shows a traceback only with --debug.
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from specbundle import __version__
from specbundle.cli import demo as _demo
from specbundle.cli import mirror as _mirror
from specbundle.cli import pull as _pull
from specbundle.cli._errors import exit_code_for
from specbundle.cli._output import err_console
from specbundle.errors import ExitCode, SpecbundleError, redact

__all__ = ["COMMANDS", "cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specbundle")
@click.option("--debug", is_flag=True, help="Show tracebacks for internal errors.")
def cli(debug: bool) -> None:
    """Carry speculative-decoding deployments (target + draft) into air-gapped clusters."""
    if debug:
        os.environ["SPECBUNDLE_DEBUG"] = "1"


COMMANDS: tuple[click.Command, ...] = (
    _pull.command,
    _mirror.command,
    _demo.command,
)
for _c in COMMANDS:
    cli.add_command(_c)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    try:
        cli.main(args=argv, prog_name="specbundle", standalone_mode=False)
    except click.exceptions.Exit as ex:
        sys.exit(ex.exit_code)
    except click.ClickException as ex:
        ex.show()
        sys.exit(ExitCode.USAGE)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except SpecbundleError as ex:
        err_console.print(f"[bold red]error[/] ({ex.kind}): {ex.diagnostics()}", markup=True)
        sys.exit(ex.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as ex:  # noqa: BLE001 - the one broad handler, by design
        if os.environ.get("SPECBUNDLE_DEBUG"):
            traceback.print_exc()
        err_console.print(f"internal error: {redact(type(ex).__name__ + ': ' + str(ex))}")
        sys.exit(exit_code_for(ex))
    sys.exit(ExitCode.OK)
