"""``specbundle lint BUNDLE|bundle.yaml``: the speculative-decoding pitfalls, before serving."""

from __future__ import annotations

from pathlib import Path

import click

from specbundle.bundle import read_unsigned
from specbundle.cli._options import default_mirror, json_option, mirror_option, open_mirror
from specbundle.cli._output import print_json
from specbundle.cli.render import show_findings
from specbundle.errors import RenderError, UsageError
from specbundle.render import TARGETS, LintReport, lint_bundle, lint_spec
from specbundle.spec import EngineName, load_spec

__all__ = ["command"]


def _is_spec_file(arg: str) -> bool:
    return arg.endswith((".yaml", ".yml")) or Path(arg).is_file()


@click.command("lint")
@click.argument("bundle")
@click.option("--engine", default=None, type=click.Choice([e.value for e in EngineName]),
              help="Only this engine (default: every engine the spec enables).")
@click.option("--target", default=None, type=click.Choice(sorted(TARGETS)),
              help="Lint as for this target (unpinned images block compose/kubernetes).")
@click.option("--allow-unpinned-image", is_flag=True,
              help="Report an image without a digest as a warning only.")
@click.option("--engine-check", is_flag=True,
              help="Also run vLLM's own argument parser and config builder on both arms "
                   "(needs vLLM: VLLM_BIN or vllm on PATH; a pulled bundle).")
@mirror_option
@json_option
def command(bundle: str, engine: str | None, target: str | None, allow_unpinned_image: bool,
            engine_check: bool, mirror_dir: Path | None, as_json: bool) -> None:
    """Lint a pulled BUNDLE, or a bundle.yaml before pulling; exit 2 on errors."""
    report: LintReport
    if _is_spec_file(bundle):
        spec = load_spec(Path(bundle))
        report = lint_spec(spec, mirror_root=mirror_dir or default_mirror(), target=target,
                           allow_unpinned_image=allow_unpinned_image)
        if engine is not None:
            report = LintReport(report.bundle,
                                tuple(f for f in report.findings if f.engine in (None, engine)),
                                report.rules_run)
        if engine_check:
            raise UsageError("--engine-check needs a pulled bundle: vLLM reads the model "
                             "configs from the mirror", hint=f"specbundle pull {bundle} first")
    else:
        mirror = open_mirror(mirror_dir)
        report = lint_bundle(read_unsigned(mirror, bundle), engine=engine, target=target,
                             allow_unpinned_image=allow_unpinned_image)
        if engine_check and engine in (None, EngineName.VLLM.value):
            from specbundle.render.vllm_oracle import engine_check_bundle, with_engine_findings

            found, _ = engine_check_bundle(mirror, bundle)
            report = with_engine_findings(report, found)
    if as_json:
        print_json(report.to_json())
    else:
        show_findings(report)
    if not report.ok:
        raise RenderError(f"{len(report.errors)} lint error(s) in bundle {report.bundle!r}",
                          hint="each finding above names the field and the fix")
