"""The vLLM test harness: find the CPU build, run a rendered serve.sh on loopback, stop it.

Loaded from the root conftest, so every test directory gets the ``vllm_bin`` fixture. It
skips (with how to install) only when no vLLM environment exists: ``VLLM_BIN``, else the
``.venv-vllm`` that ``ci/install-vllm.sh`` creates at the repository root (CI runs it).
Servers are started one at a time (the CPU worker pins a core) with the environment the
issue measured: offline, bf16 and ``--enforce-eager`` in the spec, 1 GiB of KV, loopback host
address, and compile caches under the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from specbundle.bench.client import AiohttpTransport, CompletionRequest, run_level
from specbundle.bench.prometheus import parse_scrape
from specbundle.bench.servers import free_port, launch
from specbundle.render.vllm_oracle import INSTALL_HINT, find_vllm, oracle_env

__all__ = ["COUNTERS", "VLLM_CPU_ARGS", "client_throughput", "find_test_vllm", "metrics",
           "side_by_side", "vllm_bench_serve", "vllm_completion", "vllm_env", "vllm_server"]

ROOT = Path(__file__).resolve().parent.parent
#: What a CPU boot needs in ``engines.vllm.extra_args`` (torch.compile boots take 2-4x longer
#: and recompile on every boot in this build).
VLLM_CPU_ARGS = ["--dtype", "bfloat16", "--enforce-eager"]
#: Boots measured 43-108 s on an idle 2-core box; a shared one is slower.
BOOT_TIMEOUT_S = float(os.environ.get("SPECBUNDLE_VLLM_BOOT_TIMEOUT", "900"))
#: vLLM's speculative-decoding counters: drafts, draft tokens, accepted tokens.
COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_total")


def find_test_vllm() -> Path | None:
    """``VLLM_BIN`` (or ``vllm`` on PATH), else ``<repo>/.venv-vllm/bin/vllm``."""
    found = find_vllm()
    if found is not None:
        return found
    local = ROOT / ".venv-vllm" / "bin" / "vllm"
    return local if local.is_file() and os.access(local, os.X_OK) else None


def vllm_env(tmp: Path, vllm_bin: Path) -> dict[str, str]:
    """The server environment: offline, CPU, 1 GiB KV, caches under ``tmp``."""
    return {**oracle_env(tmp), "VLLM_BIN": str(vllm_bin), "VLLM_LOGGING_LEVEL": "INFO",
            "VLLM_LOG_STATS_INTERVAL": "1"}


@contextlib.contextmanager
def vllm_server(script: Path, vllm_bin: Path, *, tmp: Path, speculation: bool = True,
                log: Path | None = None, extra_env: Mapping[str, str] | None = None,
                args: Sequence[str] = ()) -> Iterator[str]:
    """Run a rendered vLLM ``serve.sh`` (one arm) on 127.0.0.1; yield its base URL."""
    port = free_port()
    env = {**vllm_env(tmp, vllm_bin), "SPECBUNDLE_HOST": "127.0.0.1",
           "SPECBUNDLE_PORT": str(port), "SPECBUNDLE_SPECULATION": "1" if speculation else "0",
           **(extra_env or {})}
    with launch(["sh", str(script), *args], env=env, host="127.0.0.1", port=port,
                log=log or tmp / ("spec.log" if speculation else "base.log"),
                timeout=BOOT_TIMEOUT_S) as url:
        yield url


class _Held(threading.Thread):
    """One server context, entered and left on this thread: the engine's parent-death signal
    (``servers.launch``) belongs to the thread that started it, so that thread must live as
    long as the server does."""

    def __init__(self, ctx: AbstractContextManager[str]) -> None:
        super().__init__(daemon=True)
        self.ctx = ctx
        self.url = ""
        self.error: BaseException | None = None
        self.ready, self.stop = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            with self.ctx as url:
                self.url = url
                self.ready.set()
                self.stop.wait()
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            self.error = err
        finally:
            self.ready.set()


@contextlib.contextmanager
def side_by_side(*servers: AbstractContextManager[str]) -> Iterator[list[str]]:
    """Boot ``servers`` at once and yield their URLs (in order); all are stopped on exit.

    A vLLM CPU boot is mostly one process after another importing torch and vLLM on one
    core, so two boots on a 2-core box take little longer than one: only boots overlap,
    never a measurement (nothing is sent until every server is up).
    """
    held = [_Held(ctx) for ctx in servers]
    try:
        for h in held:
            h.start()
        for h in held:
            h.ready.wait()
        failed = [h.error for h in held if h.error is not None]
        if failed:
            raise failed[0]
        yield [h.url for h in held]
    finally:
        for h in held:
            h.stop.set()
        for h in held:
            h.join()


def metrics(url: str) -> dict[str, float]:
    """vLLM's counters summed over their label sets (``engine``, ``model_name``)."""
    s = parse_scrape(httpx.get(url + "/metrics", timeout=10, trust_env=False).text)
    names = (*COUNTERS, "vllm:num_preemptions_total")
    return {k: v for k in names if (v := s.total(k)) is not None}


def vllm_completion(url: str, model: str, prompt: str, *, max_tokens: int = 32,
                    timeout: float = 300.0, **extra: Any) -> dict[str, Any]:
    """One greedy, fixed-length ``/v1/completions`` request."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, **extra}
    r = httpx.post(url + "/v1/completions", json=body, timeout=timeout, trust_env=False)
    r.raise_for_status()
    result: dict[str, Any] = r.json()
    return result


def client_throughput(url: str, model: str, prompts: Sequence[str], max_tokens: int,
                      concurrency: int) -> float:
    """specbundle's bench client alone on ``url``: output tokens/s of one closed-loop level."""
    reqs = [CompletionRequest(f"r{i}", p, max_tokens) for i, p in enumerate(prompts)]

    async def go() -> float:
        transport = AiohttpTransport(limit=concurrency, timeout_s=600.0)
        try:
            run = await run_level(transport, url, reqs, concurrency, endpoint="completions",
                                  model=model)
        finally:
            await transport.aclose()
        if len(run.ok) != len(reqs):
            raise RuntimeError(f"{len(reqs) - len(run.ok)} request(s) failed")
        return float(run.output_throughput)

    return asyncio.run(go())


def vllm_bench_serve(vllm: Path, url: str, model: str, tokenizer: Path, prompts: Sequence[str],
                     max_tokens: int, concurrency: int, tmp: Path) -> dict[str, Any]:
    """``vllm bench serve`` on the same workload (greedy, fixed length, raw prompts): its JSON.

    Raises ``subprocess.CalledProcessError`` (with vLLM's output) when it fails.
    """
    data = tmp / "vllm-bench-prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    out = tmp / "vllm-bench.json"
    subprocess.run(
        [str(vllm), "bench", "serve", "--backend", "vllm", "--base-url", url, "--endpoint",
         "/v1/completions", "--model", model, "--tokenizer", str(tokenizer), "--dataset-name",
         "custom", "--dataset-path", str(data), "--custom-output-len", str(max_tokens),
         "--num-prompts", str(len(prompts)), "--max-concurrency", str(concurrency),
         "--ignore-eos", "--temperature", "0", "--skip-chat-template", "--disable-shuffle",
         "--save-result", "--result-dir", str(tmp), "--result-filename", out.name],
        check=True, capture_output=True, text=True, timeout=1800,
        env={**vllm_env(tmp, vllm), "PATH": "/usr/bin:/bin"})
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.fixture(scope="session")
def vllm_bin() -> Path:
    """The ``vllm`` launcher; skips the test when no vLLM environment is installed."""
    found = find_test_vllm()
    if found is None:
        pytest.skip(f"vLLM not installed: {INSTALL_HINT}")
    return found
