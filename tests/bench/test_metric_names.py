"""Every ``/metrics`` series the bench reads exists in the engine that is to export it.

Names come from the engines' own code: the metric declarations of the installed vLLM 0.32 and
SGLang 0.5.23 packages (``prometheus_client`` adds ``_total`` to a counter's exposed name),
and the strings of the built llama-server b11434 (its ``/metrics`` text is hand-rendered).
A renamed series would otherwise read as "unmeasured" on a GPU node, not fail.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import specbundle.bench.prometheus as prom
from specbundle.bench.prometheus import SERIES
from tests._engine import find_llama_server
from tests._sglang import VENV as SGLANG_VENV
from tests._vllm import find_test_vllm

#: Series kept for older releases only (vLLM before ``kv_cache_usage_perc``).
_OLDER_RELEASES = {"vllm:gpu_cache_usage_perc"}


def test_series_lists_every_name_the_readers_use() -> None:
    src = Path(prom.__file__).read_text()
    quoted = set(re.findall(r'"((?:vllm|sglang|llamacpp):[a-z_]+)"', src))
    prefixed = set(re.findall(r'\{prefix\}([a-z_]+)', src))
    named = set().union(*SERIES.values())
    assert quoted <= named
    for p in ("vllm:", "llamacpp:"):
        assert {p + n for n in prefixed} <= named


def _declared(root: Path) -> set[str]:
    """Every ``name="engine:..."`` (or tuple-declared) metric name in a package's sources."""
    out: set[str] = set()
    for f in root.rglob("*.py"):
        out |= set(re.findall(r'"((?:vllm|sglang):[a-z_]+)"', f.read_text(errors="replace")))
    return out


def _missing(engine: str, declared: set[str]) -> set[str]:
    return {n for n in SERIES[engine] - _OLDER_RELEASES
            if n not in declared and n.removesuffix("_total") not in declared}


def test_vllm_series_are_declared_by_the_installed_vllm() -> None:
    vllm = find_test_vllm()
    if vllm is None:
        pytest.skip("vLLM not installed")
    pkg = next(vllm.parent.parent.glob("lib/python3*/site-packages/vllm"))
    assert _missing("vllm", _declared(pkg / "v1")) == set()


def test_sglang_series_are_declared_by_the_installed_sglang() -> None:
    pkgs = list(SGLANG_VENV.glob("lib/python3*/site-packages/sglang/srt/observability"))
    if not pkgs:
        pytest.skip("SGLang not installed (ci/install-sglang.sh)")
    declared = _declared(pkgs[0])
    assert _missing("sglang", declared) == set()
    # the counter form of Σ meta_info spec_verify_ct (issue 25): it exists in 0.5.23
    assert "sglang:spec_verify_calls_total" in declared


def test_llamacpp_series_are_in_the_built_server() -> None:
    binary = find_llama_server()
    if binary is None:
        pytest.skip("llama-server not built")
    blob = b"".join(f.read_bytes() for f in binary.parent.iterdir()
                    if f.is_file() and (f.name.startswith("libllama-server") or f == binary))
    missing = {n for n in SERIES["llamacpp"]
               if b"\0" + n.removeprefix("llamacpp:").encode() + b"\0" not in blob
               and n.encode() not in blob}
    assert missing == set()


def test_sglang_routes_the_bench_calls_are_current() -> None:
    """``/server_info`` and ``/generate`` are 0.5.23 routes; ``/get_server_info`` is the
    deprecated alias (it warns on every call), which the bench must not use."""
    from specbundle.bench.engines import SGLangAdapter

    servers = list(SGLANG_VENV.glob("lib/python3*/site-packages/sglang/srt/entrypoints"))
    if not servers:
        pytest.skip("SGLang not installed (ci/install-sglang.sh)")
    src = (servers[0] / "http_server.py").read_text()
    routes = set(re.findall(r'@app\.(?:get|post|api_route)\("(/[a-z_]+)"', src))
    assert SGLangAdapter.props_path in routes and "/get_server_info" in routes
    assert SGLangAdapter.props_path != "/get_server_info"
    assert re.search(r'"/generate"', src)
