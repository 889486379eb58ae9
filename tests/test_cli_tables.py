"""Tables in a CI log (stdout not a terminal): no folded figures, no rows broken at 80 columns.

Snapshots at 80 and 200 columns; regenerate with SPECBUNDLE_UPDATE_GOLDENS=1 and review
the diff. Key ids and digests are random per run, so hex runs are masked (same length).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.cli import _output
from specbundle.cli._output import figure, print_table
from tests.lib.cli import run_cli
from tests.lib.policy import policy_doc, write_policy
from tests.lib.versions import Versions

GOLDEN = Path(__file__).parent / "golden" / "cli-tables"
UPDATE = os.environ.get("SPECBUNDLE_UPDATE_GOLDENS") == "1"
WIDTHS = (80, 200)


@pytest.fixture(params=WIDTHS)
def width(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The log's width, set by COLUMNS as a CI runner sets it (the console reads it at each
    print when it was not set at import)."""
    monkeypatch.setenv("COLUMNS", str(request.param))
    assert _output.console.width == request.param, "COLUMNS was set when the CLI was imported"
    return int(request.param)


def _snapshot(name: str, text: str) -> None:
    golden = GOLDEN / name
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.is_file(), f"no golden {golden}; run with SPECBUNDLE_UPDATE_GOLDENS=1"
    assert text == golden.read_text(), f"output differs from {golden}"


def _check_log(text: str, width: int) -> None:
    """Table rows fit the log; no cell was cut short (a deliberate ``<16 hex>…`` id aside)."""
    for line in text.splitlines():
        if "┃" in line or "│" in line:
            assert len(line) <= width, line
            assert not re.search(r"(?<![0-9a-fx]{16})…", line), line


def test_figures_round_to_meaning() -> None:
    assert [figure(x) for x in (1.786902331, 0.0123456, 1234.5678, 12.0)] == [
        "1.79", "0.0123", "1235", "12"]


def test_wide_table_becomes_records(width: int, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [["ratio", 1.786902331, "a" * 64, "throughput at the deployment's P95 concurrency"],
            ["alpha", 0.7312, "b" * 64, "acceptance rate, accepted over drafted tokens"]]
    print_table("bench", ["figure", "value", "report sha256", "meaning"], rows)
    out = capsys.readouterr().out
    _check_log(out, width)
    assert "1.79" in out and "1.7869" not in out
    assert "a" * 64 in out  # whole, on one line
    _snapshot(f"records-{width}.txt", out)


def test_narrow_table_stays_a_table(width: int, capsys: pytest.CaptureFixture[str]) -> None:
    print_table(None, ["role", "files"], [["target", 5], ["draft", 5]])
    out = capsys.readouterr().out
    assert "┃" in out
    _snapshot(f"narrow-{width}.txt", out)


def test_verify_failure_in_a_ci_log(width: int, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 3 with the problems and the approval table, readable at either width."""
    v = Versions(tmp_path)
    v.sign()
    doc = policy_doc({"release": v.key, "security": attest.generate_key("ecdsa-p256")})
    doc["require"] = {"pair-binding": {"threshold": 2}}
    policy = write_policy(tmp_path / "two.yaml", doc)
    code, out, _ = run_cli(capsys, "verify", "pair", "--mirror", str(v.mirror.root),
                           "--trust", str(policy))
    assert code == 3 and "1 more of: security" in out
    _check_log(out, width)
    _snapshot(f"verify-failed-{width}.txt", _mask(out))


def _mask(text: str) -> str:
    """Random key ids and digests masked, keeping their length (and the columns)."""
    return re.sub(r"[0-9a-f]{16,}", lambda m: "x" * len(m.group()), text)


def test_diff_in_a_ci_log(width: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    v = Versions(tmp_path)
    v.sign()
    v.sign(k=6, min_ratio=1.0, extra_args=("--enforce-eager", "--max-num-batched-tokens",
                                           "8192"))
    code, out, _ = run_cli(capsys, "diff", "pair", "--mirror", str(v.mirror.root))
    assert code == 0
    _check_log(out, width)
    assert '["--enforce-eager","--max-num-batched-tokens","8192"]' in out.replace(" ", "")
    _snapshot(f"diff-{width}.txt", _mask(out))
