"""What changed between two bundle versions, and which changes alter what reaches the GPUs.

The dangerous change is the quiet one: weights untouched, but K, the admission thresholds or
the engine arguments moved, or the draft swapped for another of the same size. So every
change carries two marks: ``runtime`` (what the engines serve or how they speculate differs)
and ``gate`` (what admission or approval judges differs), and threshold moves say whether
they loosen or tighten the gate. Anything this module cannot classify is marked ``runtime``:
an unknown field fails closed. The JSON form has a published schema
(``manifests/schemas/bundle-diff.schema.json``), generated from these dataclasses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from specbundle.record import ArtifactRecord, FileEntry
from specbundle.review.sides import Side, SignatureClaim, read_limited
from specbundle.scan.findings import Finding, ScanReport
from specbundle.strict import MalformedDocument, loads_json
from specbundle.text import safe_text

__all__ = ["DIFF_SCHEMA_ID", "Change", "DiffReport", "SideSummary", "diff_schema", "diff_sides"]

DIFF_SCHEMA_VERSION = "specbundle.bundle-diff/v1"
DIFF_SCHEMA_ID = "https://specbundle.dev/schemas/bundle-diff/v1.json"

Area = Literal["spec", "artifact", "file", "template", "image", "scan", "compat", "signature"]
Kind = Literal["added", "removed", "changed"]

_TOKENIZER = frozenset({"tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt",
                        "special_tokens_map.json", "added_tokens.json", "tokenizer_config.json",
                        "vocab.txt", "spiece.model"})
_TEMPLATE = frozenset({"chat_template.jinja", "chat_template.json"})
_INFO_FILES = ("README", "LICENSE", ".gitattributes", "USE_POLICY")
#: admission thresholds where a lower value lets more through (the others: a higher one)
_LOWER_LOOSENS = ("min_",)


@dataclass(frozen=True)
class Change:
    """One difference; ``runtime``/``gate`` say whether serving or the gate is affected."""

    area: Area
    path: str
    kind: Kind
    before: str | None
    after: str | None
    runtime: bool
    gate: bool
    note: str = ""


@dataclass(frozen=True)
class SideSummary:
    """Where one side came from and what its scan said."""

    label: str
    bundle: str
    version: int | None
    manifest_sha256: str | None
    created: str
    scan_blocked: bool | None
    scan_counts: dict[str, int]
    note: str | None
    signatures: list[SignatureClaim]


@dataclass(frozen=True)
class DiffReport:
    """Every change between ``old`` and ``new``, in a stable order (area, path)."""

    schema_version: str
    old: SideSummary
    new: SideSummary
    changes: list[Change] = field(default_factory=list)

    @property
    def runtime_changed(self) -> bool:
        """Whether anything served or the way it speculates differs."""
        return any(c.runtime for c in self.changes)

    @property
    def gate_changed(self) -> bool:
        """Whether anything the admission gate or the approval judges differs."""
        return any(c.gate for c in self.changes)

    @property
    def behaviour_changed(self) -> bool:
        """Runtime or gate: what ``--fail-on-behaviour-change`` fails on."""
        return self.runtime_changed or self.gate_changed

    def to_json(self) -> dict[str, Any]:
        """JSON form (validates against :func:`diff_schema`)."""
        out: dict[str, Any] = _ADAPTER.dump_python(self, mode="json")
        out["summary"] = {"changes": len(self.changes), "runtime": self.runtime_changed,
                          "gate": self.gate_changed, "behaviour": self.behaviour_changed}
        return out


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """Dotted path -> compact JSON text of every scalar (lists stay whole: argv, schedule)."""
    if isinstance(value, Mapping):
        for k in sorted(value):
            yield from _leaves(value[k], f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, json.dumps(value, sort_keys=True, ensure_ascii=False)


def _spec_marks(path: str) -> tuple[bool, bool]:
    head, _, rest = path.partition(".")
    if head in ("admission", "bench"):
        return False, True
    if head == "deployment":
        return True, True
    if head in ("metadata", "apiVersion", "kind") or rest in ("source",):
        return False, False
    if head in ("target", "draft") and rest == "revision":
        return False, False  # what it resolved to (the commit) is compared under artifacts
    return True, False  # speculative, engines, artifact selection, or unknown: fail closed


def _direction(path: str, before: str | None, after: str | None) -> str:
    """``loosens``/``tightens`` for an admission threshold that moved."""
    name = path.rpartition(".")[2]
    if not path.startswith("admission.") or before is None or after is None:
        return ""
    try:
        b, a = loads_json(before), loads_json(after)
    except (ValueError, MalformedDocument):
        return ""
    if isinstance(b, bool) or isinstance(a, bool):
        return "loosens the gate" if b and not a else "tightens the gate"
    if not isinstance(b, int | float) or not isinstance(a, int | float):
        return ""
    lower_loosens = name.startswith(_LOWER_LOOSENS)
    return "loosens the gate" if (a < b) == lower_loosens else "tightens the gate"


def _spec_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    a, b = dict(_leaves(old)), dict(_leaves(new))
    out = []
    for path in sorted(set(a) | set(b)):
        if a.get(path) == b.get(path):
            continue
        kind: Kind = "added" if path not in a else "removed" if path not in b else "changed"
        runtime, gate = _spec_marks(path)
        out.append(Change("spec", path, kind, a.get(path), b.get(path), runtime, gate,
                          _direction(path, a.get(path), b.get(path))))
    return out


def _file_text(f: FileEntry) -> str:
    return f"{f.size} B sha256:{f.sha256[:16]}…"


def _file_note(role: str, path: str, before: FileEntry | None, after: FileEntry | None) -> str:
    base = path.rpartition("/")[2]
    notes = []
    if base in _TOKENIZER:
        notes.append("tokenizer changed")
    if base in _TEMPLATE or base.endswith(".jinja"):
        notes.append("chat template changed")
    if before and after and before.size == after.size:
        notes.append(f"same size, different bytes: {role} replaced in place")
    return "; ".join(notes)


def _split_config(side: Side, f: FileEntry) -> tuple[str, str] | None:
    """(chat template, every other setting) of a ``tokenizer_config.json``, as JSON text,
    when its bytes are at hand and still hash to the recorded digest."""
    data = read_limited(side, f.sha256)
    try:
        doc = loads_json(data, what=f.path) if data is not None else None
    except MalformedDocument:
        return None
    if not isinstance(doc, dict):
        return None
    tpl = doc.pop("chat_template", None)
    return json.dumps(tpl, sort_keys=True), json.dumps(doc, sort_keys=True)


def _config_note(old: Side, new: Side, x: FileEntry, y: FileEntry) -> str | None:
    """Which part of a changed ``tokenizer_config.json`` moved; None when unreadable."""
    a, b = _split_config(old, x), _split_config(new, y)
    if a is None or b is None:
        return None
    parts = [what for what, i in (("tokenizer changed", 1), ("chat template changed", 0))
             if a[i] != b[i]]
    return "; ".join(parts) or "formatting only"


def _artifact_changes(role: str, a: ArtifactRecord | None, b: ArtifactRecord | None,
                      old: Side, new: Side) -> list[Change]:
    if a is None and b is None:
        return []
    if a is None or b is None:
        return [Change("artifact", role, "added" if a is None else "removed",
                       None if a is None else f"{a.repo}@{a.commit}",
                       None if b is None else f"{b.repo}@{b.commit}", True, True)]
    out = [Change("artifact", f"{role}.{k}", "changed", va, vb, True, True)
           for k, va, vb in (("repo", a.repo, b.repo), ("commit", a.commit, b.commit))
           if va != vb]
    fa, fb = {f.path: f for f in a.files}, {f.path: f for f in b.files}
    for p in sorted(set(fa) | set(fb)):
        x: FileEntry | None = fa.get(p)
        y: FileEntry | None = fb.get(p)
        if x and y and x.sha256 == y.sha256:
            continue
        kind: Kind = "added" if x is None else "removed" if y is None else "changed"
        info = p.rpartition("/")[2].startswith(_INFO_FILES) or p.endswith(".md")
        note = _file_note(role, p, x, y)
        if x and y and p.rpartition("/")[2] == "tokenizer_config.json":
            note = _config_note(old, new, x, y) or note
        out.append(Change("file", f"{role}:{p}", kind, _file_text(x) if x else None,
                          _file_text(y) if y else None, not info, not info, note))
    return out


def _finding_key(f: Finding) -> tuple[str, str, str, str]:
    return f.check_id, f.role or "", f.file or "", f.message


def _scan_changes(a: ScanReport | None, b: ScanReport | None) -> list[Change]:
    if a is None or b is None:
        if a is b:
            return []
        return [Change("scan", "report", "added" if a is None else "removed",
                       None if a is None else "present", None if b is None else "present",
                       False, True)]
    out = []
    if a.fail_on != b.fail_on:
        out.append(Change("scan", "fail_on", "changed", a.fail_on.value, b.fail_on.value,
                          False, True))
    if a.crashed_checks != b.crashed_checks:
        out.append(Change("scan", "crashed_checks", "changed", ", ".join(a.crashed_checks),
                          ", ".join(b.crashed_checks), False, True))
    fa = {_finding_key(f): f for f in a.findings}
    fb = {_finding_key(f): f for f in b.findings}
    for k in sorted(set(fa) ^ set(fb)):
        f, appeared = (fb[k], True) if k in fb else (fa[k], False)
        rep = b if appeared else a
        compat = f.check_id.startswith("compat.")
        blocking = f.severity.rank >= rep.fail_on.rank
        text = f"{f.severity.value}: {f.message}" + (f" ({f.file})" if f.file else "")
        out.append(Change("compat" if compat else "scan",
                          f"{f.role or '-'}:{f.check_id}", "added" if appeared else "removed",
                          None if appeared else text, text if appeared else None,
                          compat, blocking or compat,
                          "finding appeared" if appeared else "finding disappeared"))
    ta = {(t.role, t.file, t.name): t.sha256 for t in a.templates}
    tb = {(t.role, t.file, t.name): t.sha256 for t in b.templates}
    for t in sorted(set(ta) | set(tb)):
        if ta.get(t) != tb.get(t):
            tk: Kind = "added" if t not in ta else "removed" if t not in tb else "changed"
            out.append(Change("template", f"{t[0]}:{t[1]}#{t[2]}", tk, ta.get(t), tb.get(t),
                              True, True, "chat template changed"))
    return out


def _image_changes(a: Mapping[str, str], b: Mapping[str, str]) -> list[Change]:
    return [Change("image", e, "added" if e not in a else "removed" if e not in b else "changed",
                   a.get(e), b.get(e), True, False, "image record")
            for e in sorted(set(a) | set(b)) if a.get(e) != b.get(e)]


def _signature_changes(a: tuple[SignatureClaim, ...], b: tuple[SignatureClaim, ...]
                       ) -> list[Change]:
    sa = {(s.what, s.keyid) for s in a}
    sb = {(s.what, s.keyid) for s in b}
    return [Change("signature", w, "added" if (w, k) in sb else "removed",
                   None if (w, k) in sb else k[:16], k[:16] if (w, k) in sb else None,
                   False, False) for w, k in sorted(sa ^ sb)]


def _summary(s: Side) -> SideSummary:
    return SideSummary(s.label, s.name, s.version, s.manifest_digest, s.created,
                       s.scan.blocked if s.scan else None, s.scan.counts() if s.scan else {},
                       s.scan_note, list(s.signatures))


def _safe(c: Change) -> Change:
    """Strings from model files are shown by terminals and pages: no hidden characters."""
    return Change(c.area, safe_text(c.path), c.kind, c.before and safe_text(c.before),
                  c.after and safe_text(c.after), c.runtime, c.gate, safe_text(c.note))


def diff_sides(old: Side, new: Side) -> DiffReport:
    """Compare two sides field by field."""
    changes = _spec_changes(old.record.spec, new.record.spec)
    if old.record.prompts_sha256 != new.record.prompts_sha256:
        changes.append(Change("spec", "bench.prompts_sha256", "changed",
                              old.record.prompts_sha256, new.record.prompts_sha256, False, True,
                              "benchmark prompts"))
    changes += _artifact_changes("target", old.record.target, new.record.target, old, new)
    changes += _artifact_changes("draft", old.record.draft, new.record.draft, old, new)
    changes += _image_changes(old.images, new.images)
    changes += _scan_changes(old.scan, new.scan)
    changes += _signature_changes(old.signatures, new.signatures)
    return DiffReport(DIFF_SCHEMA_VERSION, _summary(old), _summary(new),
                      [_safe(c) for c in changes])


_ADAPTER = TypeAdapter(DiffReport)


def diff_schema() -> dict[str, Any]:
    """The JSON schema of :meth:`DiffReport.to_json`, as published in ``manifests/schemas``."""
    schema: dict[str, Any] = _ADAPTER.json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = DIFF_SCHEMA_ID
    schema["title"] = "specbundle bundle diff"
    schema["properties"]["schema_version"]["const"] = DIFF_SCHEMA_VERSION
    schema["properties"]["summary"] = {
        "type": "object", "required": ["changes", "runtime", "gate", "behaviour"],
        "properties": {"changes": {"type": "integer"}, "runtime": {"type": "boolean"},
                       "gate": {"type": "boolean"}, "behaviour": {"type": "boolean"}}}
    schema["required"] = [*schema["required"], "summary"]
    return schema
