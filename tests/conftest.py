"""Shared test setup: a clean, offline-by-default environment for every test."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._engine import llama_server_bin  # noqa: F401 - shared engine fixture
from tests._vllm import vllm_bin  # noqa: F401 - shared vLLM fixture
from tests.lib.bundles import signed  # noqa: F401 - shared signed-bundle fixture
from tests.lib.fs import small_fs  # noqa: F401 - shared tmpfs fixture
from tests.lib.models import synth_pairs  # noqa: F401 - the session's read-only pairs

# A suite started in the background by a non-interactive shell (``cmd &``, nohup, some CI
# runners) inherits SIGINT as *ignored*, and so would every child it starts: the tests that
# press Ctrl-C on a pull or a container run would then test nothing. An ignored disposition
# survives exec, a handler does not, so installing Python's own handler here gives every
# child the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A runner's terminal width (pytest-xdist starts its workers with COLUMNS=80) would fix the
# CLI console's width when it is imported, which happens after this file: the tests that
# need a width set one themselves (tests/test_cli_tables.py).
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)

_SCRUB = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "SPECBUNDLE_MIRROR",
          "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
               ) -> Iterator[Path]:
    """A test module's scratch folder, removed when the module ends.

    Engine fixtures hold hundreds of MB each (models, mirrors, logs) and CI's free disk varies,
    so a module's data must not outlive it; function folders of passing tests go at teardown
    too (``tmp_path_retention_policy``).
    """
    path = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1][:40])
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for k in _SCRUB:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("SPECBUNDLE_EXPORT_STATE", str(tmp_path / "export-state.json"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    yield
    os.environ.pop("SPECBUNDLE_DEBUG", None)
