"""Every staged temp name comes from ``_fsutil.tmp_name`` (pid + random token).

A name built from the pid alone is shared by the threads of one process: two renders side by
side renamed each other's temp link away (CI, stop 30). This pins the class, not the site.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "specbundle"
_PID_NAME = re.compile(r"""f["']\.[^"']*getpid\(\)[^"']*\.(tmp|part)["']""")


def test_no_temp_name_is_built_from_the_pid_alone() -> None:
    offenders = [f"{p.relative_to(SRC)}:{n}"
                 for p in sorted(SRC.rglob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if _PID_NAME.search(line) and p.name != "_fsutil.py"]
    assert offenders == []


def test_the_pattern_sees_the_old_form() -> None:
    assert _PID_NAME.search('tmp = f".{link.name}.{os.getpid()}.tmp"')
    assert _PID_NAME.search('x = dest.with_name(f".{dest.name}.{os.getpid()}.part")')
