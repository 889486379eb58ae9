"""The ``specbundle`` command: a thin layer that parses, calls one library facade, renders.

Each command lives in its own module and exposes ``command``; :data:`COMMANDS` lists them all
explicitly. :func:`main` is the only place with a broad ``except``: it maps every error to
its exit code through :mod:`specbundle.cli._errors` and shows a traceback only with --debug.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

import click

from specbundle import __version__
from specbundle.cli._errors import exit_code_for
from specbundle.cli._output import err_console
from specbundle.errors import ExitCode, SpecbundleError, redact

__all__ = ["COMMANDS", "cli", "main"]

#: Every command, in pipeline order: name -> (module in specbundle.cli, one-line help).
#: Modules load on first use, so `specbundle pull` never pays for the audit stage's
#: schema validators or the benchmark's statistics stack.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "Run the pipeline on a tiny synthetic target+draft pair (no network)."),
    "pull": ("pull", "Pull the target and draft named in a bundle spec into the mirror."),
    "mirror": ("mirror", "Inspect and garbage-collect the mirror."),
    "scan": ("scan", "Scan a bundle (or --path DIR): exit 0 clean, 4 blocked."),
    "keys": ("keys", "Manage signing keys."),
    "sign": ("sign", "Sign a bundle: OMS model.sig + provenance/scan/pair attestations."),
    "sign-model": ("sign_model", "Sign any model directory (OpenSSF Model Signing v1.0)."),
    "verify-model": ("verify_model", "Verify a model directory's model.sig (exit 3 if not)."),
    "export": ("export", "Write a signed, self-contained transfer set for the air gap."),
    "import": ("import_", "Verify a transfer set completely, then add it to the mirror."),
    "verify": ("verify", "Verify a bundle against a trust policy (exit 3 on failure)."),
    "lint": ("lint", "Lint a bundle or bundle.yaml for speculative-decoding pitfalls."),
    "render": ("render", "Render offline serve manifests for one engine and target."),
    "images": ("images", "Save engine images into the mirror and load them offline."),
    "bench": ("bench", "Benchmark a bundle with and without speculation."),
    "admit": ("admit", "Verify, benchmark and admit or reject with a signed decision."),
    "audit": ("audit", "Audit provenance, verify the event log, export ML-BOM/HTML."),
}


class _LazyGroup(click.Group):
    """A group whose subcommands are imported only when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(f"specbundle.cli.{entry[0]}")
        command: click.Command = module.command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, text) for name, (_, text) in COMMANDS.items()])


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specbundle")
@click.option("--debug", is_flag=True, help="Show tracebacks for internal errors.")
def cli(debug: bool) -> None:
    """Carry speculative-decoding deployments (target + draft) into air-gapped clusters."""
    if debug:
        os.environ["SPECBUNDLE_DEBUG"] = "1"


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
