"""llama.cpp slots: each one must hold a whole request, and lint's figure is the server's.

b11434 splits ``--ctx-size`` over ``--parallel`` slots unless ``--kv-unified``
(``llama-context.cpp``: ``n_ctx_seq = pad256(n_ctx / n_seq_max)``). Render sizes the context
from the workload; an explicit context too small for prompt + output is a lint error that says
what each slot gets. The real server (``/props``) holds :func:`slot_context`'s arithmetic.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from specbundle.bench.servers import free_port, launch
from specbundle.bundle import read_unsigned
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.render import build_serve_command, lint_bundle
from specbundle.render.llamacpp import slot_context, slot_need
from specbundle.spec import parse_spec
from specbundle.synth import make_pair
from tests.lib.bundles import BundleFactory

_LLAMA = {"engines.vllm": None, "engines.sglang": None, "engines.llamacpp.parallel": None,
          "deployment.p95_concurrency": 8}


def _value(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _rules(mirror: Mirror) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for f in lint_bundle(read_unsigned(mirror, "llama-pair")).findings:
        out.setdefault(f.rule, []).append(f)
    return out


def test_render_sizes_the_context_for_every_slot(mirror: Mirror, bundle: BundleFactory) -> None:
    rec = bundle(**_LLAMA)
    argv = build_serve_command(rec, "llamacpp", mirror=mirror).argv
    slots, ctx = int(_value(argv, "--parallel") or 0), int(_value(argv, "--ctx-size") or 0)
    assert slots == 16
    sc = slot_context(ctx, slots, unified=False)
    assert sc.per_slot >= slot_need(parse_spec(rec.spec)) == 256 + 128
    assert "llamacpp-slot-context" not in _rules(mirror)


def test_a_context_split_too_thin_is_an_error_naming_the_slot_size(
        mirror: Mirror, bundle: BundleFactory) -> None:
    bundle(**_LLAMA, **{"engines.llamacpp.ctx_size": 4096})
    (f,) = _rules(mirror)["llamacpp-slot-context"]
    assert f.severity == "error"
    assert "gives each slot 256 tokens" in f.message and "384" in f.message


def test_kv_unified_is_rendered_and_lets_each_slot_use_the_pool(
        mirror: Mirror, bundle: BundleFactory) -> None:
    rec = bundle(**_LLAMA, **{"engines.llamacpp.ctx_size": 4096,
                              "engines.llamacpp.kv_unified": True})
    argv = build_serve_command(rec, "llamacpp", mirror=mirror).argv
    assert "--kv-unified" in argv
    assert "llamacpp-slot-context" not in _rules(mirror)  # 8 requests x 384 fit in 4096
    bundle(**_LLAMA, **{"engines.llamacpp.ctx_size": 2048, "engines.llamacpp.kv_unified": True})
    (f,) = _rules(mirror)["llamacpp-slot-context"]
    assert f.severity == "warning" and "share one pool of 2048" in f.message


@pytest.fixture(scope="module")
def pair_argv(module_tmp: Path) -> tuple[str, ...]:
    """The baseline arm of a rendered tiny pair (P95 8: 16 slots), from the mirror alone."""
    pair = make_pair(module_tmp / "pair", seed=3, hidden_size=64, intermediate_size=128,
                     target_layers=2, draft_layers=1)
    spec = parse_spec({
        "apiVersion": "specbundle/v1", "metadata": {"name": "slots"},
        "target": {"repo": "synth/target", "source": f"dir:{pair.target_dir}",
                   "gguf_file": "model.gguf"},
        "draft": {"repo": "synth/draft", "source": f"dir:{pair.draft_dir}",
                  "gguf_file": "model.gguf"},
        "speculative": {"method": "draft_model", "num_speculative_tokens": 4},
        "engines": {"llamacpp": {"threads": 1, "n_gpu_layers": "0", "draft_n_gpu_layers": "0",
                                 "flash_attn": "off"}},
        "deployment": {"p95_concurrency": 8, "gpus": 0},
    })
    mirror = Mirror.open(module_tmp / "mirror", create=True)
    pull_bundle(spec, mirror)
    shutil.rmtree(module_tmp / "pair")
    rec = mirror.load_bundle("slots")
    return build_serve_command(rec, "llamacpp", mirror=mirror, speculation=False).args


def _with(args: tuple[str, ...], **flags: str | None) -> list[str]:
    out = list(args)
    for flag, value in flags.items():
        name = "--" + flag.replace("_", "-")
        if value is None:
            out.append(name)
        else:
            out[out.index(name) + 1] = value
    return out


@pytest.mark.engine
@pytest.mark.parametrize("change", [{}, {"ctx_size": "4096"},
                                    {"ctx_size": "4096", "kv_unified": None},
                                    {"ctx_size": "3000", "parallel": "5"}])
def test_the_server_gives_each_slot_what_lint_computes(
        pair_argv: tuple[str, ...], llama_server_bin: Path, tmp_path: Path,
        change: dict[str, str | None]) -> None:
    args = _with(pair_argv, **change)
    ctx, slots = int(args[args.index("--ctx-size") + 1]), int(args[args.index("--parallel") + 1])
    want = slot_context(ctx, slots, unified="--kv-unified" in args)
    port = free_port()
    argv = [str(llama_server_bin), *args, "--host", "127.0.0.1", "--port", str(port)]
    with launch(argv, env={"LLAMA_OFFLINE": "1"}, host="127.0.0.1", port=port,
                log=tmp_path / "server.log", timeout=120) as url:
        props = httpx.get(url + "/props", timeout=10, trust_env=False).json()
    assert props["total_slots"] == slots
    assert props["default_generation_settings"]["n_ctx"] == want.per_slot
