"""SGLang's native ``/generate`` stream: the request body and a per-chunk recorder.

The benchmark measures SGLang through ``/generate`` because only there does every
request's final ``meta_info`` carry its speculation figures (the OpenAI endpoints need an
opt-in extension). The stream is ``data: {"text": ..., "output_ids": [...], "meta_info":
{...}}`` events ending in ``data: [DONE]``. ``meta_info.completion_tokens`` is cumulative
in every event, which gives the tokens each chunk carried (per-token ITL); ``text`` and
``output_ids`` are cumulative by default but deltas under ``--incremental-streaming-output``
(``--stream-output`` in older releases), so the recorder tells which from the ids (a
cumulative list is never shorter than the token count) and rebuilds the text either way.
The spec fields appear only in the final event's ``meta_info``.

The recorder exposes the same fields as the OpenAI recorder in :mod:`.client`, so TTFT,
TPOT, E2E and both ITL flavours are computed by the same code for every engine.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

from specbundle.bench.interface import TransportError

__all__ = ["GenerateRecorder", "generate_body"]

_decode = json.JSONDecoder().decode


def generate_body(prompt: str, max_tokens: int, temperature: float, ignore_eos: bool,
                  extras: Mapping[str, Any]) -> bytes:
    """Streaming ``/generate`` body; greedy and the fixed length set in ``sampling_params``."""
    body: dict[str, Any] = {
        "text": prompt, "stream": True,
        "sampling_params": {"max_new_tokens": max_tokens, "temperature": temperature,
                            "ignore_eos": ignore_eos},
    }
    body.update(extras)
    return json.dumps(body).encode()


class GenerateRecorder:
    """Per-request state fed by the transport for one ``/generate`` stream."""

    __slots__ = ("_ids_cumulative", "_last", "_texts", "cum", "finish", "server", "times",
                 "usage")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.cum: list[int | None] = []
        self.usage: dict[str, Any] | None = None
        self.server: dict[str, Any] = {}
        self.finish: str | None = None
        self._texts: list[str] = []
        self._last = 0
        self._ids_cumulative: bool | None = None

    def __call__(self, now: int, payload: bytes) -> bool:
        if payload == b"[DONE]":
            return False
        obj = _decode(payload.decode())
        if not isinstance(obj, dict):
            raise ValueError(f"event is not a JSON object: {payload[:100]!r}")
        if obj.get("error"):
            raise TransportError(f"server error event: {str(obj['error'])[:300]}")
        meta = obj.get("meta_info")
        meta = meta if isinstance(meta, dict) else {}
        text = obj.get("text")
        if isinstance(text, str):
            self._texts.append(text)
        n = meta.get("completion_tokens")
        if isinstance(n, int) and not isinstance(n, bool):
            ids = obj.get("output_ids")
            if self._ids_cumulative is None and self._last and n > self._last \
                    and isinstance(ids, list):
                self._ids_cumulative = len(ids) >= n
            if n > self._last:
                self.times.append(now)
                self.cum.append(n)
            self._last = max(self._last, n)
            self.usage = {"completion_tokens": n, "prompt_tokens": meta.get("prompt_tokens")}
        elif text:
            self.times.append(now)
            self.cum.append(None)
        fin = meta.get("finish_reason")
        if fin:
            self.finish = str(fin.get("type")) if isinstance(fin, dict) else str(fin)
        if meta:
            self.server["meta_info"] = meta
        return True

    def _cumulative(self) -> bool:
        if self._ids_cumulative is not None:
            return self._ids_cumulative
        texts = self._texts
        return len(texts) > 1 and all(b.startswith(a) for a, b in itertools.pairwise(texts))

    @property
    def parts(self) -> list[str]:
        """The generated text in pieces (one piece when the server streams cumulatively)."""
        if self._cumulative():
            return self._texts[-1:]
        return self._texts
