"""``specbundle render BUNDLE --engine E --target T``: offline serve manifests (lint runs first)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from rich.markup import escape

from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, print_json, print_table
from specbundle.cli.verify import bundle_options, open_bundle
from specbundle.errors import UsageError
from specbundle.render import TARGETS, LintReport, render_bundle
from specbundle.spec import EngineName

__all__ = ["command", "show_findings"]


def show_findings(report: LintReport) -> None:
    """Human listing of lint findings: rule, where, why, fix."""
    if not report.findings:
        console.print(f"lint: no findings for [bold]{report.bundle}[/]")
        return
    console.print(f"lint: {len(report.errors)} error(s), {len(report.warnings)} warning(s) "
                  f"for [bold]{report.bundle}[/]")
    for f in report.findings:
        style = "red" if f.severity == "error" else "yellow"
        engine = f" [{f.engine}]" if f.engine else ""
        console.print(f"[{style}]{f.severity}[/] {escape(f'{f.rule}{engine} at {f.where}')}",
                      markup=True, highlight=False)
        console.print(f"  why: {f.message}", markup=False)
        console.print(f"  fix: {f.fix}", markup=False)


@click.command("render")
@click.argument("bundle")
@click.option("--engine", "engine", required=True,
              type=click.Choice([e.value for e in EngineName]), help="Serving engine.")
@click.option("--target", "target", required=True, type=click.Choice(sorted(TARGETS)),
              help="Deployment target.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Output folder (default: bundles/<name>/render/<engine>/<target>"
              " in the mirror).")
@click.option("--image-digest", default=None, metavar="sha256:HEX",
              help="Pin the spec's image to this digest (e.g. from `docker image inspect`).")
@click.option("--image", "image", default=None, metavar="REF",
              help="Use this image reference instead of the spec's (should be name@sha256:...).")
@click.option("--allow-unpinned-image", is_flag=True,
              help="Render compose/kubernetes with an image not pinned by digest (warning).")
@bundle_options
@click.option("--model-source", type=click.Choice(["mirror", "oci"]), default="mirror",
              show_default=True, help="kubernetes: models from the mirror (hostPath) or from "
              "a registry (image volumes pinned by digest; see `specbundle oci`).")
@click.option("--oci-repo", default=None, metavar="REGISTRY/REPO",
              help="With --model-source oci: the repository the bundle was pushed to.")
@click.option("--oci-tool-image", default=None, metavar="REF@sha256:HEX",
              help="With --model-source oci: an image with specbundle (init-container, "
              "benchmark Job).")
@click.option("--oci-init-container", is_flag=True,
              help="With --model-source oci: pull+verify in an init-container instead of "
              "image volumes (clusters before Kubernetes 1.31).")
@mirror_option
@json_option
def command(bundle: str, engine: str, target: str, out_dir: Path | None,
            image_digest: str | None, image: str | None, allow_unpinned_image: bool,
            trust: Path | None, unsigned: bool, model_source: str, oci_repo: str | None,
            oci_tool_image: str | None, oci_init_container: bool, mirror_dir: Path | None,
            as_json: bool) -> None:
    """Render BUNDLE's serve manifests for one engine and target; lint errors block (exit 2)."""
    if model_source == "oci" and (target != "kubernetes" or not oci_repo):
        raise UsageError("--model-source oci renders --target kubernetes and needs --oci-repo")
    mirror = open_mirror(mirror_dir)
    res = render_bundle(open_bundle(mirror, bundle, trust, unsigned), engine, target, out_dir,
                        image=image, image_digest=image_digest,
                        allow_unpinned_image=allow_unpinned_image)
    if model_source == "oci" and oci_repo:
        from specbundle.cli.oci import render_from_registry

        extra = render_from_registry(mirror, res, oci_repo, tool_image=oci_tool_image,
                                     init_container=oci_init_container, plain_http=False)
        res = dataclasses.replace(res, files=tuple(dict.fromkeys((*res.files, *extra))))
    if as_json:
        print_json(res.to_json())
        return
    show_findings(res.lint)
    if not res.custody["signed"]:
        console.print("[bold red]UNSIGNED[/]: rendered from the unsigned bundle record")
    console.print(f"rendered [bold]{res.bundle}[/] for {res.engine.value}/{res.target} "
                  f"into {res.out_dir}")
    print_table(None, ["file", "bytes"], [[f.name, f.stat().st_size] for f in res.files])
