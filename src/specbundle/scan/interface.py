"""The plug-in point of the scan stage: a :class:`Check` reads a :class:`CheckContext`.

Every check family (file types, safetensors, GGUF, pickles, remote code, chat templates,
second opinions, draft/target compatibility) is one sibling module implementing :class:`Check`;
the explicit list lives in :mod:`specbundle.scan.runner`. A check never raises for bad
*input* (a malformed file is a finding); if it raises anyway the runner records a crash and
the scan fails closed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from specbundle.scan.findings import CheckOutcome, Severity
from specbundle.scan.inventory import ArtifactTree
from specbundle.scan.sniff import FileKind, sniff
from specbundle.spec import SpecMethod

__all__ = ["Check", "CheckContext", "ScanOptions"]


@dataclass(frozen=True)
class ScanOptions:
    """Knobs of one scan; the defaults are the fail-closed policy."""

    fail_on: Severity = Severity.HIGH
    second_opinions: bool = True
    second_opinion_timeout_s: float = 120.0
    max_safetensors_header: int = 100_000_000
    max_pickle_bytes: int = 256 * 1024 * 1024
    # one template: 14x the largest real one (18 kB, tests/scan/templates)
    max_template_bytes: int = 256_000
    # all distinct templates of one scan together: a hostile template costs 7-15 s per MB to
    # analyse (Jinja's parser and code generator; real ones ~4 s per MB), so this bounds a
    # hostile scan to a few seconds while holding ~28 of the largest real templates
    max_template_total_bytes: int = 512_000
    max_config_bytes: int = 64 * 1024 * 1024
    # EAGLE-3 d2t/t2d are read whole: real vocabularies are ~32k-260k entries (a d2t of at
    # most 2 MB), so one past 16 M is a HIGH finding, not a multi-GB read into memory
    max_vocab: int = 1 << 24
    progress: Callable[[str], None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class CheckContext:
    """Everything a check may read: the artifact trees, the method, the options.

    ``memo`` lets one check reuse what another parsed (a GGUF header is read once per scan);
    it is a cache of pure functions of file bytes, never a channel for results.
    """

    trees: tuple[ArtifactTree, ...]
    method: SpecMethod | None = None
    options: ScanOptions = ScanOptions()
    memo: dict[tuple[str, Path], Any] = field(default_factory=dict, compare=False, repr=False)

    def tree(self, role: str) -> ArtifactTree | None:
        """The tree for a role (``target``, ``draft`` or ``tree``), if scanned."""
        return next((t for t in self.trees if t.role == role), None)

    def cached(self, kind: str, path: Path, compute: Callable[[Path], Any]) -> Any:
        """``compute(path)`` once per scan for a given kind of parse."""
        key = (kind, path)
        if key not in self.memo:
            self.memo[key] = compute(path)
        return self.memo[key]

    def kind(self, path: Path) -> FileKind:
        """The sniffed kind of a file, once per scan; ``unknown-binary`` if it cannot be read.

        The error is kept (:meth:`unreadable`) for the files check to report: a file the scan
        cannot read is never a crash and never clean.
        """
        kind: FileKind = self.cached("sniff", path, self._sniff)
        return kind

    def unreadable(self, path: Path) -> str | None:
        """Why sniffing ``path`` failed, if it did."""
        why: str | None = self.memo.get(("sniff-error", path))
        return why

    def readable(self, path: Path) -> bool:
        """Whether ``path`` could be read when sniffed. A check skips a file that could not:
        the files check reports it (HIGH), so it is never silently clean nor a crash."""
        self.kind(path)
        return self.unreadable(path) is None

    def _sniff(self, path: Path) -> FileKind:
        try:
            return sniff(path)
        except Exception as err:  # noqa: BLE001 - any failure to read is a finding, not a crash
            self.memo[("sniff-error", path)] = f"{type(err).__name__}: {err}"[:300]
            return FileKind.UNKNOWN


class Check(ABC):
    """One family of checks.

    Implementers set ``family`` and ``rules`` (check id -> one-line description, used for
    SARIF ``tool.driver.rules``) and return every finding with an id from ``rules``.
    """

    family: ClassVar[str]
    rules: ClassVar[Mapping[str, str]]

    @abstractmethod
    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Inspect the trees and report; never unpickle, execute or render anything."""
