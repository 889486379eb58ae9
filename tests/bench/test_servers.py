"""Engines started by the benchmark die with it, even when it is killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specbundle.bench.servers import free_port

_DRIVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from specbundle.bench.servers import launch
    port, pidfile, log = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    with launch(argv, env={}, host="127.0.0.1", port=port, log=log, health="/", timeout=60):
        import subprocess
        out = subprocess.run(["pgrep", "-f", f"http.server {port}"], capture_output=True,
                             text=True).stdout.split()
        pidfile.write_text(out[0])
        time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal is Linux only")
def test_engine_dies_when_the_benchmark_is_killed(tmp_path: Path) -> None:
    port, pidfile = free_port(), tmp_path / "server.pid"
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER, str(port), str(pidfile),
                               str(tmp_path / "server.log")])
    try:
        deadline = time.monotonic() + 60
        while not pidfile.is_file() or not pidfile.read_text():
            assert driver.poll() is None, "the driver exited before the server was healthy"
            assert time.monotonic() < deadline, "the server never became healthy"
            time.sleep(0.1)
        server = int(pidfile.read_text())
        assert _alive(server)
        os.kill(driver.pid, signal.SIGKILL)  # no finally block, no atexit: only the kernel
        driver.wait()
        deadline = time.monotonic() + 20
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server), "the engine outlived the benchmark that started it"
    finally:
        if driver.poll() is None:
            driver.kill()
        subprocess.run(["pkill", "-f", f"http.server {port}"], check=False)


@pytest.mark.parametrize("what", ["link", "fifo", "dir-link"])
def test_an_engine_log_planted_as_a_link_or_fifo_is_refused_before_the_start(
        tmp_path: Path, what: str) -> None:
    """Issue 22 item 1: the engine's log under the run folder is opened through that
    folder's no-follow fd: a planted link is never appended to, a FIFO never hangs it, and
    nothing is started."""
    from specbundle.bench.servers import launch
    from specbundle.errors import CorruptMirror

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    run = tmp_path / "tmp" / "bench-r1"
    run.parent.mkdir()
    if what == "dir-link":
        run.symlink_to(victim, target_is_directory=True)
    else:
        run.mkdir()
        if what == "link":
            (run / "spec.log").symlink_to(victim / "keep")
        else:
            os.mkfifo(run / "spec.log")
    argv = [sys.executable, "-c", "raise SystemExit('must not start')"]
    with pytest.raises(CorruptMirror) as err, \
            launch(argv, env={}, host="127.0.0.1", port=free_port(), log=run / "spec.log",
                   timeout=5):
        pass
    assert err.value.exit_code == 3 and "\n" not in err.value.message
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]
    assert (victim / "keep").read_text() == "precious"
