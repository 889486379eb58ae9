"""Headless Chromium for the HTML pages specbundle writes (Debian's ``chromium``).

Why a real browser: a page that escapes every string can still fail to render, or render
markup an attacker planted; only a browser's own parser and layout say what a reader sees.
The browser runs with no network (``--no-proxy-server``, a proxy that cannot resolve, and
the suite's own network namespace on the isolated side), a throwaway profile, and a time
limit. :func:`dump_dom` returns the DOM after parsing (what the reader gets, scripts run or
not), :func:`screenshot` a PNG. Tests that need it skip when no Chromium is installed;
``.ci/run`` installs it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

__all__ = ["chromium", "dump_dom", "requires_chromium", "screenshot"]

_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def chromium() -> str | None:
    """The Chromium binary on PATH, or None."""
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


requires_chromium = pytest.mark.skipif(chromium() is None, reason="chromium is not installed")


def _run(page: Path, extra: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    binary = chromium()
    if binary is None:
        pytest.skip("chromium is not installed")
    with tempfile.TemporaryDirectory(prefix="sb-chromium-") as profile:
        argv = [
            binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--disable-background-networking", "--disable-sync", "--no-proxy-server",
            "--proxy-server=socks5://255.255.255.255:1", "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={profile}", "--virtual-time-budget=3000", *extra,
            page.resolve().as_uri(),
        ]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False,
        )


def dump_dom(page: Path, *, timeout: float = 60.0) -> str:
    """The page's serialised DOM after Chromium parsed (and laid out) it."""
    proc = _run(page, ["--dump-dom"], timeout)
    assert proc.returncode == 0, f"chromium failed on {page}: {proc.stderr[-2000:]}"
    assert proc.stdout.strip(), f"chromium rendered nothing for {page}: {proc.stderr[-2000:]}"
    return proc.stdout


def screenshot(page: Path, out: Path, *, width: int = 1280, height: int = 2000,
               timeout: float = 60.0) -> Path:
    """A PNG of the page as Chromium lays it out; asserts the file was written."""
    proc = _run(page, [f"--screenshot={out}", f"--window-size={width},{height}",
                       "--hide-scrollbars"], timeout)
    assert proc.returncode == 0, f"chromium failed on {page}: {proc.stderr[-2000:]}"
    assert out.is_file() and out.stat().st_size > 0, f"no screenshot of {page}"
    return out
