"""A self-contained HTML page per bundle that an auditor can read without the tool.

One file, inline CSS, no scripts and no external references, autoescaped (everything shown
came from files an attacker may have touched). The template is ``templates/audit/``.
"""

from __future__ import annotations

import jinja2

from specbundle import __version__
from specbundle.audit.model import AuditReport, BundleAudit
from specbundle.render.targets import templates_dir

__all__ = ["render_html"]


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render_html(report: AuditReport, bundle: BundleAudit) -> str:
    """The HTML report of one audited bundle."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir() / "audit")),
        autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
    )
    return env.get_template("report.html.j2").render(
        report=report, b=bundle, version=__version__, fmt=_fmt)
