"""Speculation figures from engine log lines (a cross-check beside ``/metrics``).

The formats are the engines' own ``printf`` strings, which change between versions, so
each pattern accepts the historic variants (vLLM's early-2025 line without mean length;
SGLang builds without ``accept rate``, with or without the ``[N]`` forward count;
llama.cpp builds without ``mean len``). Log figures
are interval (vLLM, SGLang) or per-request (llama.cpp) values, never used for the gate.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["LogAcceptance", "parse_log_line", "sum_llamacpp_slots"]

_NUM = r"([0-9]+(?:\.[0-9]+)?|nan)"
_VLLM = re.compile(
    r"SpecDecoding metrics: (?:Mean acceptance length: " + _NUM + r", )?"
    r"(?:Accepted throughput: [^,]+, Drafted throughput: [^,]+, )?"
    r"(?:Draft acceptance rate: " + _NUM + r"%, )?"
    r"Accepted: (\d+) tokens, Drafted: (\d+) tokens"
    r"(?:, Per-position acceptance rate: ([0-9., ]+?))?"
    r"(?:, Avg Draft acceptance rate: " + _NUM + r"%)?\s*$")
#: ``Decode batch [N], #running-req: ...`` (0.5.4; 0.5.23 with LOG_FORWARD_ITERS) or
#: ``Decode batch, #running-req: ...`` (0.5.23): both from the released sources.
_SGLANG = re.compile(
    r"Decode batch(?: \[\d+\])?, #running-req: .*?accept len: " + _NUM
    + r"(?:, accept rate: " + _NUM + r")?")
_LLAMA = re.compile(
    r"draft acceptance(?: rate)? = " + _NUM + r" \(\s*(\d+) accepted /\s*(\d+) generated\)"
    r"(?:, mean (?:len|acceptance length) =\s*" + _NUM + r")?")


@dataclass(frozen=True)
class LogAcceptance:
    """What one log line says; fields an engine's line lacks are ``None``."""

    engine: str
    accepted: int | None
    drafted: int | None
    rate: float | None
    mean_length: float | None
    per_position: tuple[float, ...] = ()


def _f(s: str | None) -> float | None:
    return None if s is None or s == "nan" else float(s)


def parse_log_line(line: str) -> LogAcceptance | None:
    """Parse a vLLM, SGLang or llama.cpp speculation log line; ``None`` for other lines."""
    if m := _VLLM.search(line):
        mean, old_rate, acc, drafted, per, avg = m.groups()
        rate = _f(avg) if avg is not None else _f(old_rate)
        return LogAcceptance(
            "vllm", int(acc), int(drafted), rate / 100.0 if rate is not None else None,
            _f(mean), tuple(float(x) for x in per.split(",")) if per else ())
    if m := _SGLANG.search(line):
        return LogAcceptance("sglang", None, None, _f(m.group(2)), _f(m.group(1)))
    if m := _LLAMA.search(line):
        return LogAcceptance("llamacpp", int(m.group(2)), int(m.group(3)), _f(m.group(1)),
                             _f(m.group(4)))
    return None


def sum_llamacpp_slots(lines: Iterable[str]) -> tuple[int, int] | None:
    """(accepted, drafted) summed over llama-server's per-request slot lines."""
    acc = drafted = 0
    seen = False
    for line in lines:
        got = parse_log_line(line)
        if got is not None and got.engine == "llamacpp" and got.accepted is not None \
                and got.drafted is not None:
            acc, drafted, seen = acc + got.accepted, drafted + got.drafted, True
    return (acc, drafted) if seen else None
