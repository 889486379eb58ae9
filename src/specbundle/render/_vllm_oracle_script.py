"""Runs inside vLLM's own interpreter (not specbundle's): vLLM's parser and config builder.

``python _vllm_oracle_script.py VLLM_BIN check`` reads ``{"commands": [[args...], ...]}``
(the words after ``vllm serve``) on stdin and, for each, runs what ``vllm serve`` runs before
it loads weights: the serve argument parser, ``validate_parsed_serve_args`` and
``AsyncEngineArgs.create_engine_config`` (model, draft, parallel and cache configs, the
speculative config's resolution), then the scheduler's Dynamic-SD lookup
(``build_dynamic_sd_schedule_lookup``, which 0.32 runs only when the scheduler is built).
The CPU platform rewrites some decisions a GPU node keeps: async scheduling is recorded as the
general path decides it, just before the platform hook runs (the CUDA platform does not touch
it), and ``not_reproduced`` names what stays CPU-specific. ``... dump`` prints the serve
flags and the ``SpeculativeConfig`` fields of the installed version. One JSON document goes
to stdout; vLLM's own logging is moved to stderr. No GPU, no network: ``VLLM_TARGET_DEVICE=cpu`` and
``HF_HUB_OFFLINE=1`` are set by the caller. Imports nothing from specbundle on purpose.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import traceback
import typing
from pathlib import Path
from typing import Any

# This file sits next to specbundle's render/vllm.py, which must not shadow the vllm package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

_OUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # vLLM logs to stdout; the answer owns the real stdout


class _ArgError(Exception):
    pass


def _serve_parser() -> Any:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def _error(self: Any, message: str) -> typing.NoReturn:
        raise _ArgError(f"{self.prog}: error: {message}")

    FlexibleArgumentParser.error = _error
    top = FlexibleArgumentParser(prog="vllm")
    subs = top.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subs)
    return top


#: Decided by the GPU platform and not reproducible on the CPU one.
NOT_REPRODUCED = ("cudagraph mode and capture sizes (and Dynamic SD's PIECEWISE downgrade)",
                  "attention backend", "KV cache size (GPU memory)",
                  "max_num_seqs / max_num_batched_tokens defaults keyed by GPU memory")
_SEEN: dict[str, Any] = {}


def _watch_platform() -> None:
    """Record async scheduling as decided before the platform hook (CPU forces it off)."""
    from vllm.platforms import current_platform

    cls = type(current_platform)
    original = cls.check_and_update_config

    def hook(_cls: Any, vllm_config: Any) -> None:
        _SEEN["async_scheduling"] = vllm_config.scheduler_config.async_scheduling
        original(vllm_config)

    cls.check_and_update_config = classmethod(hook)


def _ranges(dense: list[int]) -> list[list[int]]:
    """A dense batch-size -> K lookup as [start, end, K] ranges."""
    out: list[list[int]] = []
    for bs, k in enumerate(dense[1:], start=1):
        if out and out[-1][2] == k and out[-1][1] == bs - 1:
            out[-1][1] = bs
        else:
            out.append([bs, bs, k])
    return out


def _schedule(cfg: Any) -> list[list[int]] | None:
    """The K per batch size the scheduler runs (its own lookup; raises as it would)."""
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    sc = cfg.speculative_config
    if sc is None or not sc.num_speculative_tokens_per_batch_size:
        return None
    dense = build_dynamic_sd_schedule_lookup(
        sc.num_speculative_tokens_per_batch_size,
        vllm_max_batch_size=cfg.scheduler_config.max_num_seqs,
        vllm_num_speculative_tokens=sc.num_speculative_tokens)
    return _ranges(dense)


def _resolved(cfg: Any) -> dict[str, Any]:
    sc = cfg.speculative_config
    out: dict[str, Any] = {
        "max_num_seqs": cfg.scheduler_config.max_num_seqs,
        "block_size": cfg.cache_config.block_size,
        "max_model_len": cfg.model_config.max_model_len,
        "async_scheduling_gpu": _SEEN.get("async_scheduling"),
        "async_scheduling_here": cfg.scheduler_config.async_scheduling,
        "not_reproduced": list(NOT_REPRODUCED),
        "speculative": None,
    }
    if sc is not None:
        out["speculative"] = {
            "method": sc.method, "num_speculative_tokens": sc.num_speculative_tokens,
            "model": sc.model,
            "num_speculative_tokens_per_batch_size":
                [list(t) for t in sc.num_speculative_tokens_per_batch_size or ()] or None,
            "draft_tensor_parallel_size": sc.draft_tensor_parallel_size,
        }
    return out


def _check(top: Any, words: list[str]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args
    from vllm.usage.usage_lib import UsageContext

    stage = "parse"
    try:
        args = top.parse_args(["serve", *words])
        stage = "validate"
        validate_parsed_serve_args(args)
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
        stage = "config"
        _SEEN.clear()
        engine_args = AsyncEngineArgs.from_cli_args(args)
        cfg = engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        stage = "scheduler"
        schedule = _schedule(cfg)
        resolved = _resolved(cfg)
        if resolved["speculative"] is not None:
            resolved["speculative"]["schedule_in_force"] = schedule
        return {"ok": True, "stage": "scheduler", "resolved": resolved}
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the engine's refusal, in its words
        text = str(err).strip() or type(err).__name__
        return {"ok": False, "stage": stage, "error_type": type(err).__name__,
                "message": text[:2000],
                "trace": traceback.format_exc(limit=3)[-1500:]}


def _kind(action: argparse.Action) -> str:
    name = type(action).__name__
    if name in ("BooleanOptionalAction", "_StoreTrueAction", "_StoreFalseAction"):
        return "bool"
    if action.choices is not None:
        return "choice"
    t = action.type
    tname = getattr(t, "__name__", "") if t is not None else ""
    if t is int:
        return "int"
    if t is float:
        return "float"
    if "json" in tname or "loads" in tname:
        return "json"
    try:  # vLLM wraps json.loads in closures: ask the converter itself
        probe = t('{"k": 1}') if callable(t) else None
        return "json" if isinstance(probe, dict) else "str"
    except Exception:  # noqa: BLE001 - any refusal means "not a JSON flag"
        return "str"


def _literal_values(tp: Any) -> list[str]:
    if typing.get_origin(tp) is typing.Literal:
        out: list[str] = []
        for a in typing.get_args(tp):
            out += [a] if isinstance(a, str) else _literal_values(a)
        return out
    return []


def _field_kind(name: str, ann: Any) -> tuple[str, list[str]]:
    """An ArgRule kind (and choices) for one SpeculativeConfig field annotation."""
    import types

    if name == "num_speculative_tokens_per_batch_size":
        return "schedule", []
    while typing.get_origin(ann) is typing.Annotated:
        ann = typing.get_args(ann)[0]
    args = [ann]
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
    if len(args) == 1:
        one = args[0]
        if typing.get_origin(one) is typing.Literal:
            return "choice", _literal_values(one)
        for py, kind in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
            if one is py:
                return kind, []
        if isinstance(one, type) and issubclass(one, __import__("enum").Enum):
            return "str", []
    if str in args:
        return "str", []
    return "json", []


def _bound(info: Any) -> tuple[Any, bool]:
    minimum, gt = None, False
    for m in info.metadata:
        if getattr(m, "gt", None) is not None:
            minimum, gt = m.gt, True
        elif getattr(m, "ge", None) is not None:
            minimum = m.ge
    return minimum, gt


def _config_bounds() -> dict[str, tuple[Any, bool]]:
    """Lower bounds of the config fields behind the serve flags (argparse has none: vLLM's
    config classes check them when the engine config is built)."""
    import vllm.config as cfg_mod

    out: dict[str, tuple[Any, bool]] = {}
    for obj in vars(cfg_mod).values():
        for name, info in (getattr(obj, "__pydantic_fields__", None) or {}).items():
            minimum, gt = _bound(info)
            if minimum is not None:
                out.setdefault(name, (minimum, gt))
    return out


def _dump(top: Any) -> dict[str, Any]:
    import importlib.metadata as md

    from vllm.config import speculative as spec_mod

    bounds = _config_bounds()
    serve = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    parser = serve.choices["serve"]
    flags: dict[str, Any] = {}
    for action in parser._actions:
        opts = [o for o in action.option_strings if o.startswith("--")]
        if not opts or action.dest == "help":
            continue
        main = opts[0]
        negatable = type(action).__name__ == "BooleanOptionalAction"
        aliases = [o for o in action.option_strings if o != main
                   and not (negatable and o.startswith("--no-"))]
        kind = _kind(action)
        minimum, gt = bounds.get(action.dest, (None, False)) if kind in ("int", "float") \
            else (None, False)
        flags[main] = {"kind": kind, "aliases": aliases, "negatable": negatable,
                       "choices": [str(c) for c in action.choices] if kind == "choice" else [],
                       "minimum": minimum, "exclusive_minimum": gt}
    # FlexibleArgumentParser rewrites -O<n> / -O <n> into --optimization-level before parsing
    if "--optimization-level" in flags:
        flags["--optimization-level"]["aliases"].append("-O")
    keys: dict[str, Any] = {}
    hints = typing.get_type_hints(spec_mod.SpeculativeConfig, include_extras=True)
    for name, info in spec_mod.SpeculativeConfig.__pydantic_fields__.items():
        ann = hints.get(name)
        if "SkipValidation" in repr(ann) or info.init is False:
            continue  # internal: filled in by vLLM, not a user key
        minimum, gt = _bound(info)
        kind, choices = _field_kind(name, ann)
        keys[name] = {"kind": kind, "choices": choices, "minimum": minimum,
                      "exclusive_minimum": gt}
    return {"vllm_version": md.version("vllm"),
            "methods": _literal_values(spec_mod.SpeculativeMethod), "flags": flags,
            "speculative_keys": keys}


def main() -> None:
    launcher, mode = sys.argv[1], sys.argv[2]
    runpy.run_path(launcher, run_name="specbundle_vllm_launcher")  # its metadata shims only
    top = _serve_parser()
    _watch_platform()
    doc: dict[str, Any] = {}
    if "dump" in mode:  # "dump", "check" or "check+dump" (one interpreter start for both)
        doc["table"] = _dump(top)
    if "check" in mode:
        import importlib.metadata as md

        request = json.loads(sys.stdin.read())
        doc["vllm_version"] = md.version("vllm")
        doc["results"] = [_check(top, list(words)) for words in request["commands"]]
    _OUT.write(json.dumps(doc) + "\n")
    _OUT.flush()


if __name__ == "__main__":
    main()
