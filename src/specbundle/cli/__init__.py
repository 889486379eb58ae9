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
from typing import NoReturn

import click
from rich.text import Text

from specbundle import __version__
from specbundle.cli._errors import exit_code_for
from specbundle.cli._output import err_console, json_written, print_json, reset_json_written
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
    "oci": ("oci", "Push/pull bundles as signed ModelPack artifacts (OCI registry or layout)."),
    "verify": ("verify", "Verify a bundle against a trust policy (exit 3 on failure)."),
    "lint": ("lint", "Lint a bundle or bundle.yaml for speculative-decoding pitfalls."),
    "render": ("render", "Render offline serve manifests for one engine and target."),
    "images": ("images", "Save engine images into the mirror and load them offline."),
    "bench": ("bench", "Benchmark a bundle with and without speculation."),
    "tune": ("tune", "Measure K per concurrency on the real engine; sign the schedule."),
    "admit": ("admit", "Verify, benchmark and admit or reject with a signed decision."),
    "audit": ("audit", "Audit provenance, verify the event log, export ML-BOM/HTML."),
    "diff": ("diff", "Diff bundle versions; mark changes to what runs or the gate (exit 7)."),
    "review": ("review", "Write the approver's offline HTML page: decision, diff, approvals."),
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


def _fail(code: int, kind: str, message: str, hint: str | None, *, as_json: bool) -> NoReturn:
    """Report a failure on stderr (plain text: messages may hold brackets) and exit ``code``.

    With ``--json``, stdout also gets ``{"error": {...}}`` unless the command already printed
    its own document (e.g. verify's ``"verified": false``), so stdout is always one JSON value.
    """
    # Text, not markup: a message may quote file names or values with brackets in them.
    err_console.print(Text.assemble(("error", "bold red"), f" ({kind}): {message}",
                                    f"\n  hint: {hint}" if hint else ""))
    if as_json and not json_written():
        print_json({"error": {"kind": kind, "message": message, "hint": hint,
                              "exit_code": code}})
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args[: args.index("--")] if "--" in args else "--json" in args
    reset_json_written()
    try:
        cli.main(args=args, prog_name="specbundle", standalone_mode=False)
    except click.exceptions.Exit as ex:
        sys.exit(ex.exit_code)
    except click.ClickException as ex:
        if as_json:
            _fail(ExitCode.USAGE, "usage", ex.format_message(), None, as_json=True)
        ex.show()
        sys.exit(ExitCode.USAGE)
    except (click.exceptions.Abort, KeyboardInterrupt):
        # click turns Ctrl-C into Abort; writers stage under tmp/, so nothing half-written
        # is visible, and pull/import resume when run again.
        _fail(130, "interrupted", "stopped by Ctrl-C (or end of input at a prompt)", None,
              as_json=as_json)
    except SpecbundleError as ex:
        _fail(ex.exit_code, ex.kind, ex.message, ex.hint, as_json=as_json)
    except OSError as ex:
        # A file or socket the machine would not give us (permissions, a full disk, a path
        # that is not a directory): the environment, not a bug in specbundle.
        if os.environ.get("SPECBUNDLE_DEBUG"):
            traceback.print_exc()
        what = ex.strerror or type(ex).__name__
        where = ": ".join(str(f) for f in (ex.filename, ex.filename2) if f)
        _fail(exit_code_for(ex), "environment",
              redact(f"{where}: {what}" if where else str(ex) or what), None, as_json=as_json)
    except Exception as ex:  # noqa: BLE001 - the one broad handler, by design
        if os.environ.get("SPECBUNDLE_DEBUG"):
            traceback.print_exc()
        if exit_code_for(ex) == ExitCode.VERIFICATION_FAILED:  # malformed input, refused
            _fail(ExitCode.VERIFICATION_FAILED, "malformed", redact(" ".join(str(ex).split())),
                  None, as_json=as_json)
        if exit_code_for(ex) == ExitCode.ENVIRONMENT:  # out of memory, a network that refused
            _fail(ExitCode.ENVIRONMENT, "environment",
                  redact(": ".join(filter(None, (type(ex).__name__, str(ex))))), None,
                  as_json=as_json)
        _fail(exit_code_for(ex), "internal",
              "internal error: " + redact(" ".join(f"{type(ex).__name__}: {ex}".split())),
              "rerun with --debug for a traceback and report it", as_json=as_json)
    sys.exit(ExitCode.OK)
