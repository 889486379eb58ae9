"""pytest plugin (``-p tests._timing``, as ci/test.sh loads it): where a suite's minutes go.

At the end of a run it prints the slowest test modules (setup, call and teardown summed, so a
module whose fixture builds models or starts engines shows its real cost) and writes the
counts ci/test.sh adds up for its closing line. pytest's own ``--durations`` lists single
tests, which hides a module of many mid-sized ones.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

_SECONDS: defaultdict[str, float] = defaultdict(float)
_COUNTS: defaultdict[str, int] = defaultdict(int)
_TOP = 25


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _SECONDS[report.nodeid.split("::", 1)[0]] += report.duration
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        _COUNTS[outcome] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _SECONDS:
        total = sum(_SECONDS.values())
        terminalreporter.write_sep("=", f"slowest test modules (of {len(_SECONDS)})")
        for path, secs in sorted(_SECONDS.items(), key=lambda kv: -kv[1])[:_TOP]:
            terminalreporter.write_line(
                f"{int(secs) // 60:4d}:{int(secs) % 60:02d} {100 * secs / total:5.1f}%  {path}")
    out = os.environ.get("SB_PYTEST_COUNTS")
    # under pytest-xdist the controller sees every worker's reports: only it writes the counts
    if out and not hasattr(terminalreporter.config, "workerinput"):
        Path(out).write_text(json.dumps(dict(_COUNTS)), encoding="utf-8")
