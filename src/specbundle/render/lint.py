"""``specbundle lint``: the speculative-decoding pitfalls operators hit, caught before serving.

Lint reads the bundle spec *and* the commands render would emit for each enabled engine, so a
finding is about what would actually run. Every finding names its rule, the spec field or
command-line flag, why it matters and the fix. Errors block render (fail closed); warnings
explain. The rules themselves are in :mod:`specbundle.render.rules`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from specbundle.errors import RenderError
from specbundle.render.interface import ServeCommand
from specbundle.spec import BundleSpec, EngineName

__all__ = ["Finding", "LintInput", "LintReport", "Rule", "Severity", "finding", "run_rules"]

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One problem: which rule, where, why it matters, how to fix it."""

    rule: str
    severity: Severity
    where: str
    message: str
    fix: str
    engine: str | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"rule": self.rule, "severity": self.severity, "where": self.where,
                "message": self.message, "fix": self.fix, "engine": self.engine}

    def __str__(self) -> str:
        eng = f" [{self.engine}]" if self.engine else ""
        return f"{self.severity} {self.rule}{eng} at {self.where}: {self.message} Fix: {self.fix}"


@dataclass(frozen=True)
class LintInput:
    """What the rules look at: the spec, the rendered commands and the draft's config.json."""

    spec: BundleSpec
    commands: Mapping[EngineName, ServeCommand]
    draft_config: Mapping[str, Any] | None = None
    #: True for compose/kubernetes, False for shell/systemd, None when no target is chosen.
    container_target: bool | None = None
    allow_unpinned_image: bool = False
    #: Files of each pulled artifact by role ("target", "draft"); empty when linting a spec.
    artifact_files: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def argv(self, engine: EngineName) -> tuple[str, ...]:
        """The full command line of an engine, or () if it is not rendered."""
        cmd = self.commands.get(engine)
        return cmd.argv if cmd is not None else ()

    def vllm_spec_config(self) -> dict[str, Any] | None:
        """The ``--speculative-config`` JSON vLLM would get, decoded."""
        argv = self.argv(EngineName.VLLM)
        for i, a in enumerate(argv[:-1]):
            if a in ("--speculative-config", "-sc"):
                value = json.loads(argv[i + 1])
                return value if isinstance(value, dict) else None
        return None


Rule = Callable[[LintInput], Iterable[Finding]]


def finding(rule: str, severity: str, where: str, message: str, fix: str,
            engine: EngineName | None = None) -> Finding:
    """Build a finding (severity anything but "error" is a warning)."""
    sev: Severity = "error" if severity == "error" else "warning"
    return Finding(rule, sev, where, message, fix, engine.value if engine else None)


@dataclass(frozen=True)
class LintReport:
    """All findings for one bundle; ``ok`` means no errors."""

    bundle: str
    findings: tuple[Finding, ...]
    rules_run: tuple[str, ...] = ()

    @property
    def errors(self) -> tuple[Finding, ...]:
        """Findings that block render."""
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """Findings that only explain."""
        return tuple(f for f in self.findings if f.severity == "warning")

    @property
    def ok(self) -> bool:
        """No errors."""
        return not self.errors

    def to_json(self) -> dict[str, Any]:
        """JSON form (stored as ``lint.json`` next to each rendered manifest)."""
        return {"bundle": self.bundle, "ok": self.ok, "errors": len(self.errors),
                "warnings": len(self.warnings), "rules_run": list(self.rules_run),
                "findings": [f.to_json() for f in self.findings]}

    def raise_for_errors(self) -> None:
        """Fail closed: a :class:`RenderError` listing every error finding."""
        if self.errors:
            lines = "\n".join(f"  - {f}" for f in self.errors)
            raise RenderError(
                f"lint found {len(self.errors)} error(s) in bundle {self.bundle!r}:\n{lines}",
                hint="fix the bundle spec (or the mirror path) and render again",
            )


def run_rules(inp: LintInput, rules: Mapping[str, Rule]) -> LintReport:
    """Run every rule; findings sorted errors first, then by rule and location."""
    found: list[Finding] = []
    for rule in rules.values():
        found.extend(rule(inp))
    found.sort(key=lambda f: (f.severity != "error", f.rule, f.engine or "", f.where))
    return LintReport(inp.spec.name, tuple(found), tuple(rules))
