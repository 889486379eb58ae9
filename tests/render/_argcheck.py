"""Validators for rendered command lines, built from the engines' captured argument rules.

vLLM and SGLang parse their CLIs with argparse; :func:`check_vllm` and :func:`check_sglang`
build argparse parsers from :mod:`specbundle.render.argrules` (so an unknown flag, a missing
value or a bad type fails exactly as at engine start) and check every ``--speculative-config``
key and value against vLLM's ``SpeculativeConfig`` rules. llama.cpp flags are checked against
the real ``llama-server --help`` of the build the tests run (``data/llama-server-help.txt``).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any, NoReturn

from specbundle.render.argrules import (
    SGLANG_FLAGS,
    VLLM_FLAGS,
    VLLM_METHODS,
    VLLM_SPEC_KEYS,
    ArgRule,
)

DATA = Path(__file__).parent / "data"
_NEEDS_MODEL = {"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "dflash", "dspark"}


class ArgCheckError(ValueError):
    """A rendered command the engine would refuse."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgCheckError(message)


def _number(kind: Callable[[str], Any], rule: ArgRule) -> Callable[[str], Any]:
    def conv(text: str) -> Any:
        value = kind(text)
        if rule.minimum is not None and (
            value < rule.minimum or (rule.exclusive_minimum and value == rule.minimum)
        ):
            raise argparse.ArgumentTypeError(f"{text} is below the minimum {rule.minimum}")
        return value
    return conv


def _json(text: str) -> Any:
    return json.loads(text)


def _parser(prog: str, table: dict[str, ArgRule], positional: str | None) -> _Parser:
    p = _Parser(prog=prog, allow_abbrev=False, add_help=False, exit_on_error=False)
    if positional:
        p.add_argument(positional)
    for flag, rule in table.items():
        names = (flag, *rule.aliases)
        if rule.kind == "bool":
            p.add_argument(*names, action=argparse.BooleanOptionalAction if rule.negatable
                           else "store_true")
        elif rule.kind == "int":
            p.add_argument(*names, type=_number(int, rule))
        elif rule.kind == "float":
            p.add_argument(*names, type=_number(float, rule))
        elif rule.kind == "choice":
            p.add_argument(*names, choices=rule.choices)
        elif rule.kind == "json":
            p.add_argument(*names, type=_json)
        else:
            p.add_argument(*names)
    return p


def _parse(p: _Parser, args: Sequence[str]) -> argparse.Namespace:
    try:
        ns, unknown = p.parse_known_args(list(args))
    except argparse.ArgumentError as err:
        raise ArgCheckError(str(err)) from None
    if unknown:
        raise ArgCheckError(f"unknown arguments: {unknown}")
    return ns


def check_spec_config(cfg: dict[str, Any], *, target_tp: int = 1) -> None:
    """A ``--speculative-config`` object against ``SpeculativeConfig``'s fields and checks."""
    for key, value in cfg.items():
        if key == "tensor_parallel_size":
            raise ArgCheckError("'tensor_parallel_size' is not a valid argument in the "
                                "speculative_config")
        rule = VLLM_SPEC_KEYS.get(key)
        if rule is None:
            raise ArgCheckError(f"unknown speculative-config key {key!r}")
        _check_value(key, value, rule)
    method = cfg.get("method")
    if method is None:
        raise ArgCheckError("speculative-config without an explicit method")
    if method in _NEEDS_MODEL and not str(cfg.get("model", "")).startswith("/"):
        raise ArgCheckError(f"method {method} needs 'model' as an absolute local path")
    dtp = cfg.get("draft_tensor_parallel_size")
    if dtp is not None and dtp not in (1, target_tp):
        raise ArgCheckError("draft_tensor_parallel_size must be 1 or the target's TP")
    sched = cfg.get("num_speculative_tokens_per_batch_size")
    if sched is not None:
        ordered = sorted(sched)
        if ordered[0][0] != 1:
            raise ArgCheckError("the first batch-size range must start at 1")
        for (_, e0, _), (s1, _, _) in pairwise(ordered):
            if s1 <= e0:
                raise ArgCheckError("batch-size ranges must be non-overlapping and sorted")


def _check_value(key: str, value: Any, rule: ArgRule) -> None:
    ok = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "choice": lambda v: v in rule.choices,
        "json": lambda v: True,
        "schedule": lambda v: isinstance(v, list) and bool(v) and all(
            isinstance(t, list) and len(t) == 3 and all(isinstance(x, int) for x in t)
            and 1 <= t[0] <= t[1] and t[2] >= 0 for t in v),
    }[rule.kind]
    if not ok(value):
        raise ArgCheckError(f"speculative-config {key}={value!r} is not a valid {rule.kind}")
    if rule.minimum is not None and isinstance(value, int | float) and (
        value < rule.minimum or (rule.exclusive_minimum and value == rule.minimum)
    ):
        raise ArgCheckError(f"speculative-config {key}={value!r} is below {rule.minimum}")
    if key == "method" and value not in VLLM_METHODS:
        raise ArgCheckError(f"unknown method {value!r}")


def check_vllm(argv: Sequence[str]) -> argparse.Namespace:
    """``vllm serve MODEL [flags]``: every flag known, typed, and the speculative config valid."""
    if list(argv[:2]) != ["vllm", "serve"]:
        raise ArgCheckError(f"not a vllm serve command: {argv[:2]}")
    ns = _parse(_parser("vllm serve", VLLM_FLAGS, "model_tag"), argv[2:])
    if not ns.model_tag.startswith("/"):
        raise ArgCheckError(f"model {ns.model_tag!r} is not an absolute local path")
    if ns.speculative_config is not None:
        if not isinstance(ns.speculative_config, dict):
            raise ArgCheckError("--speculative-config is not a JSON object")
        check_spec_config(ns.speculative_config, target_tp=ns.tensor_parallel_size or 1)
    return ns


def check_sglang(argv: Sequence[str]) -> argparse.Namespace:
    """``python3 -m sglang.launch_server [flags]`` against SGLang's server args."""
    if list(argv[:3]) != ["python3", "-m", "sglang.launch_server"]:
        raise ArgCheckError(f"not an SGLang launch command: {argv[:3]}")
    ns = _parse(_parser("sglang", SGLANG_FLAGS, None), argv[3:])
    tree = (ns.speculative_num_steps, ns.speculative_eagle_topk,
            ns.speculative_num_draft_tokens)
    # DFLASH's width is num_draft_tokens alone (SGLang forces steps = topk = 1)
    if any(v is None for v in tree) and any(v is not None for v in tree) \
            and ns.speculative_algorithm != "DFLASH":
        raise ArgCheckError("speculative tree parameters must be given all together or not")
    if ns.speculative_algorithm and ns.max_running_requests is None:
        raise ArgCheckError("speculation without --max-running-requests (silently 48)")
    return ns


_HELP_FLAG_RE = re.compile(r"^(-[^\s].*?)(?:\s{2,}|$)")


def llamacpp_flags(help_text: str | None = None) -> dict[str, bool]:
    """Flags of ``llama-server --help`` -> whether each takes a value (removed ones omitted)."""
    text = help_text if help_text is not None else (DATA / "llama-server-help.txt").read_text()
    lines = text.splitlines()
    out: dict[str, bool] = {}
    for i, line in enumerate(lines):
        m = _HELP_FLAG_RE.match(re.sub(r",\s+", ", ", line))
        if not m:
            continue
        follow = " ".join(lines[i:i + 2])
        if "has been removed" in follow:
            continue
        parts = [p.strip() for p in m.group(1).split(",")]
        names, takes = [], False
        for part in parts:
            words = part.split()
            if words and words[0].startswith("-"):
                names.append(words[0])
                takes = takes or len(words) > 1
        for n in names:
            out[n] = takes
    return out


def check_llamacpp(argv: Sequence[str], help_text: str | None = None) -> dict[str, str | None]:
    """Every flag known to this llama-server build and given a value where it takes one."""
    flags = llamacpp_flags(help_text)
    seen: dict[str, str | None] = {}
    i = 1
    while i < len(argv):
        a = argv[i]
        if a not in flags:
            raise ArgCheckError(f"llama-server: invalid argument: {a}")
        if flags[a]:
            if i + 1 >= len(argv):
                raise ArgCheckError(f"{a} needs a value")
            seen[a] = argv[i + 1]
            i += 2
        else:
            seen[a] = None
            i += 1
    return seen
