"""Fixtures of the scan tests: a fast scan (no second opinions) and finding look-ups."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specbundle.scan import ScanOptions, ScanReport, Severity, scan_tree

FAST = ScanOptions(second_opinions=False)


def ids(report: ScanReport, at_least: Severity = Severity.LOW) -> set[str]:
    """Check ids of findings at or above a severity."""
    return {f.check_id for f in report.findings if f.severity.rank >= at_least.rank}


@pytest.fixture
def scan_one(tmp_path: Path) -> Callable[..., ScanReport]:
    """Write one file into a fresh folder and scan the folder."""
    counter = iter(range(10_000))

    def run(name: str, data: bytes, **kw: Any) -> ScanReport:
        d = tmp_path / f"tree{next(counter)}"
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
        kw.setdefault("options", FAST)
        return scan_tree(d, **kw)

    return run
