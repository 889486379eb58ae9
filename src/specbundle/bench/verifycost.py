"""Verification cost v(g, batch): a target forward over g + 1 tokens per sequence, in steps.

Leviathan's closed form charges one decode step for verifying g + 1 tokens; that holds
only while the target is memory-bound. No engine reports the verification forward of the
speculative arm on its own (llama.cpp's ``timings`` time drafting and verification
together), so v is measured by a controlled probe on the baseline server, the target
alone: with a prefix cached, the engine's own prompt-processing time (``timings.prompt_ms``,
server-side, no HTTP in it) for ``batch·(g + 1)`` new tokens is divided by the time for
``batch`` new tokens, one decode step's worth of work. The batch is folded into one
sequence: the matrix products, which decide whether the forward is compute-bound, are the
same; attention over a short context differs little. The two sizes alternate, and v's
interval is the paired t-interval of their log ratio, so load that drifts hits both.

Pure maths (:func:`verify_cost`) is separate from collection (:func:`probe`, llama.cpp
only; other engines report v unmeasured, and the extended model is then not applied).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
from scipy import stats as sps

from specbundle.strict import MalformedDocument, loads_json

__all__ = ["PROBE_ENGINES", "VERIFY_SAMPLES", "VerifyCost", "VerifySample", "probe",
           "verify_cost"]

#: Engines whose timings let the probe measure prompt processing server-side.
PROBE_ENGINES = ("llamacpp",)
#: Interleaved pairs per level after which the bench stops probing v (two launches' worth).
VERIFY_SAMPLES = 10
_PREFIX = 48  # cached prefix length (tokens): a realistic short context, cheap to prefill


@dataclass(frozen=True)
class VerifySample:
    """One interleaved pair: ``batch`` new tokens vs ``batch·(g + 1)`` new tokens."""

    batch: int
    g: int
    step_ms: float  # engine time for ``batch`` tokens: one decode step's work
    verify_ms: float  # engine time for ``batch·(g + 1)`` tokens: one verification's work


@dataclass(frozen=True)
class VerifyCost:
    """v at one level with its interval, and what it was measured from."""

    batch: int
    g: int
    v: float
    low: float
    high: float
    confidence: float
    samples: int
    step_ms: float  # mean engine time of one decode step's work in the probe
    verify_ms: float
    method: str = "probe: llama.cpp timings.prompt_ms on a cached prefix, batch folded"


def verify_cost(samples: Sequence[VerifySample], *, confidence: float = 0.90) -> VerifyCost | None:
    """v = verify_ms / step_ms with a paired t-interval on the log scale; ``None`` for no data.

    One sample gives the point with a zero-width interval (reported, but one pair says
    nothing about noise); at least three make the interval meaningful.
    """
    ok = [s for s in samples if s.step_ms > 0 and s.verify_ms > 0]
    if not ok:
        return None
    logs = np.log([s.verify_ms / s.step_ms for s in ok])
    mean = float(logs.mean())
    half = 0.0
    if logs.size >= 2:
        sd = float(logs.std(ddof=1))
        half = float(sps.t.ppf(0.5 + confidence / 2.0, logs.size - 1)) * sd / math.sqrt(logs.size)
    return VerifyCost(batch=ok[0].batch, g=ok[0].g, v=math.exp(mean), low=math.exp(mean - half),
                      high=math.exp(mean + half), confidence=confidence, samples=len(ok),
                      step_ms=float(np.mean([s.step_ms for s in ok])),
                      verify_ms=float(np.mean([s.verify_ms for s in ok])))


# -- collection (llama.cpp) --------------------------------------------------------------------

#: POST a JSON body to a path of the server, return the decoded JSON object.
Post = Callable[[str, dict[str, Any]], dict[str, Any]]


def _poster(url: str, timeout: float) -> Post:
    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(url + path, json=body, timeout=timeout, trust_env=False)
        r.raise_for_status()
        doc = loads_json(r.content, max_bytes=16 * 1024 * 1024, what=f"{path} response")
        if not isinstance(doc, dict):
            raise MalformedDocument(f"{path} response is not a JSON object")
        return doc
    return post


def _tokens(post: Post, text: str, need: int) -> list[int]:
    toks = [t for t in post("/tokenize", {"content": text}).get("tokens", [])
            if isinstance(t, int) and not isinstance(t, bool)]
    if not toks:
        raise MalformedDocument("/tokenize returned no tokens")
    return (toks * (need // len(toks) + 2))[:need + len(toks)]


def _prompt_ms(post: Post, prompt: list[int], expect: int) -> float | None:
    doc = post("/completion", {"prompt": prompt, "n_predict": 1, "cache_prompt": True,
                               "id_slot": 0, "temperature": 0.0, "top_k": 1})
    t = doc.get("timings")
    if not isinstance(t, dict):
        return None
    n, ms = t.get("prompt_n"), t.get("prompt_ms")
    # the cached prefix must have been reused: exactly the new tokens were processed
    if not isinstance(n, int | float) or not isinstance(ms, int | float) or \
            not expect <= n <= expect + 1:
        return None
    return float(ms)


def probe(url: str, *, batch: int, g: int, reps: int = 5, text: str,
          timeout: float = 120.0, post: Post | None = None) -> list[VerifySample]:
    """Measure ``reps`` interleaved pairs on a llama-server serving the target alone.

    Slot 0 holds a cached prefix; each request appends a fresh continuation (its first
    token differs from the previous request's, so only the new tokens are processed) and
    generates one token. A pair whose ``prompt_n`` shows the prefix was not reused is
    dropped rather than guessed. Raises ``httpx.HTTPError`` / :class:`MalformedDocument`.
    """
    call = post or _poster(url.rstrip("/"), timeout)
    big = batch * (g + 1)
    pool = _tokens(call, text, _PREFIX + 4 * big)
    prefix, rest = pool[:_PREFIX], pool[_PREFIX:]
    call("/completion", {"prompt": prefix, "n_predict": 1, "cache_prompt": True, "id_slot": 0,
                         "temperature": 0.0, "top_k": 1})
    out: list[VerifySample] = []
    last = -1
    offset = 0

    def fresh(n: int) -> list[int]:
        nonlocal last, offset
        for _ in range(len(rest)):
            offset = (offset + 1) % max(1, len(rest) - n)
            cont = rest[offset:offset + n]
            if len(cont) == n and cont[0] != last:
                last = cont[0]
                return prefix + cont
        raise MalformedDocument("the workload text tokenizes to too few distinct tokens")

    _prompt_ms(call, fresh(big), big)  # warm-up: first large batch allocates buffers
    for r in range(reps):
        sizes = (batch, big) if r % 2 == 0 else (big, batch)
        got = {n: _prompt_ms(call, fresh(n), n) for n in sizes}
        step, ver = got[batch], got[big]
        if step is not None and ver is not None:
            out.append(VerifySample(batch=batch, g=g, step_ms=step, verify_ms=ver))
    return out
