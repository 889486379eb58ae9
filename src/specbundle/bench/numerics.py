"""Is a divergence numerics or the draft? The target's own logit margin at the first one.

Greedy speculation is lossless only "to the precision limits of hardware numerics" (the
seed): verifying several tokens in one batch changes the arithmetic, and at a near-tie the
argmax can flip, after which the two outputs part for good. The relaunch-to-relaunch A/A
floor cannot see this (both of its arms decode at the same batch shapes). So at each first
divergence between the baseline's output and speculation's, the baseline server is asked
for its own top-2 log-probabilities at exactly that position (prompt + common prefix, one
token): when speculation's token is the runner-up within :data:`TIE_MARGIN` of the winner,
the flip is numerics; when it is not even the runner-up, or far behind, the draft path
changed the output. Only divergences of the second kind count against agreement.

Collection needs token ids and a way to ask for log-probabilities on a token prompt:
llama-server's ``/tokenize`` and ``/completion`` (``n_probs``); vLLM's ``/tokenize`` and
``/v1/completions`` (``logprobs`` with ``return_tokens_as_token_ids``, its outputs' ids from
``return_token_ids``). SGLang is not probed and keeps the A/A floor alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from specbundle.bench.client import LevelRun
from specbundle.bench.servers import served_model
from specbundle.bench.verifycost import _poster
from specbundle.strict import MalformedDocument

__all__ = ["MARGIN_ENGINES", "TIE_MARGIN", "Divergence", "TieProbe", "collect", "divergences",
           "first_divergence", "probe_margins"]

_Post = Callable[[str, dict[str, Any]], dict[str, Any]]

#: Divergences probed per run at most: a handful of one-token requests, once per prompt.
LIMIT = 16

#: Engines whose servers report top log-probabilities for a token-id prompt.
MARGIN_ENGINES = ("llamacpp", "vllm")
#: A flip within this many nats of the winner is a near-tie numerics can decide: float32 on
#: CPU moves logits by ~1e-4, bf16 on a GPU by a few hundredths; a draft that changes the
#: output picks tokens far behind, or outside the top two.
TIE_MARGIN = 0.1


@dataclass(frozen=True)
class Divergence:
    """The first position at which speculation's output left the baseline's."""

    prompt: str  # the request's prompt text
    prefix: tuple[int, ...]  # the common prefix (token ids)
    base_token: int
    spec_token: int


@dataclass(frozen=True)
class TieProbe:
    """The baseline's verdict on one divergence: the margin of its token over speculation's."""

    divergence: Divergence
    margin: float | None  # nats; None: speculation's token is not in the target's top two

    @property
    def near_tie(self) -> bool:
        """Numerics: speculation's token was the target's close runner-up."""
        return self.margin is not None and abs(self.margin) <= TIE_MARGIN


def first_divergence(prompt: str, base: Sequence[int], spec: Sequence[int]) -> Divergence | None:
    """Where two outputs of one prompt part, or ``None`` if one is a prefix of the other."""
    n = next((i for i, (x, y) in enumerate(zip(base, spec, strict=False)) if x != y), None)
    return None if n is None else Divergence(prompt, tuple(base[:n]), base[n], spec[n])


def divergences(base: dict[int, list[LevelRun]], spec: dict[int, list[LevelRun]],
                prompts: dict[str, str], seen: set[Divergence] | None = None
                ) -> list[Divergence]:
    """First divergences of speculation from the baseline, request by request (token ids).

    Every spec request is compared with every baseline run of the same prompt id; repeated
    (greedy, identical) divergences and those in ``seen`` are given once.
    """
    out: list[Divergence] = []
    known = set(seen or ())
    for c, s_runs in spec.items():
        base_ids = {r.prompt_id: r.token_ids for run in base.get(c, []) for r in run.ok
                    if r.token_ids}
        for run in s_runs:
            for r in run.ok:
                b = base_ids.get(r.prompt_id)
                if not b or not r.token_ids or r.prompt_id not in prompts:
                    continue
                d = first_divergence(prompts[r.prompt_id], b, r.token_ids)
                if d is not None and d not in known:
                    known.add(d)
                    out.append(d)
    return out


def _top(doc: dict[str, object]) -> dict[int, float]:
    """token id -> log-probability from a ``/completion`` answer with ``n_probs``."""
    probs = doc.get("completion_probabilities")
    if not isinstance(probs, list):
        raise MalformedDocument("/completion returned no completion_probabilities")
    if not probs or not isinstance(probs[0], dict):
        return {}
    top = probs[0].get("top_logprobs")
    if not isinstance(top, list):
        raise MalformedDocument("/completion returned no top_logprobs")
    out: dict[int, float] = {}
    for t in top:
        if isinstance(t, dict) and isinstance(t.get("id"), int) and \
                isinstance(t.get("logprob"), int | float):
            out[int(t["id"])] = float(t["logprob"])
    return out


def _vllm_top(doc: dict[str, object]) -> dict[int, float]:
    """token id -> log-probability from a ``/v1/completions`` answer (``token_id:N`` keys)."""
    choices = doc.get("choices")
    lp = choices[0].get("logprobs") if isinstance(choices, list) and choices and \
        isinstance(choices[0], dict) else None
    top = lp.get("top_logprobs") if isinstance(lp, dict) else None
    if not isinstance(top, list):
        raise MalformedDocument("/v1/completions returned no top_logprobs")
    if not top or not isinstance(top[0], dict):
        return {}
    out: dict[int, float] = {}
    for key, value in top[0].items():
        tid = key.removeprefix("token_id:") if isinstance(key, str) else ""
        if tid.isdigit() and isinstance(value, int | float):
            out[int(tid)] = float(value)
    return out


def _ask(post: _Post, engine: str, model: str, prompt: list[int]) -> dict[int, float]:
    """The target's top-2 log-probabilities for the next token after ``prompt`` (ids)."""
    if engine == "vllm":
        return _vllm_top(post("/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0,
            "logprobs": 2, "return_tokens_as_token_ids": True}))
    # a few tokens, not one: llama-server holds back a token that ends inside a UTF-8
    # character, and its probabilities with it, until the character is complete
    return _top(post("/completion", {"prompt": prompt, "n_predict": 4, "n_probs": 2,
                                     "temperature": 0.0, "cache_prompt": False}))


def _tokenize(post: _Post, engine: str, model: str, text: str) -> list[int]:
    body: dict[str, object] = {"model": model, "prompt": text, "add_special_tokens": True} \
        if engine == "vllm" else {"content": text, "add_special": True}
    got = post("/tokenize", body).get("tokens")
    if not isinstance(got, list) or not all(isinstance(t, int) for t in got):
        raise MalformedDocument("/tokenize returned no token ids")
    return [int(t) for t in got]


def probe_margins(url: str, divs: Sequence[Divergence], *, limit: int = 16,
                  timeout: float = 60.0, engine: str = "llamacpp") -> list[TieProbe]:
    """Ask the baseline server at ``url`` for its margin at each divergence (``limit`` of them).

    Raises:
        httpx.HTTPError: the server did not answer (left to the caller, which notes it).
        MalformedDocument: the answer is not what the engine sends.
    """
    post = _poster(url, timeout)
    model = served_model(url) if engine == "vllm" and divs else ""
    prompt_ids: dict[str, list[int]] = {}
    out = []
    for d in divs[:limit]:
        if d.prompt not in prompt_ids:
            prompt_ids[d.prompt] = _tokenize(post, engine, model, d.prompt)
        top = _ask(post, engine, model, [*prompt_ids[d.prompt], *d.prefix])
        if not top:
            continue  # nothing reported for this position: not probed
        margin = (top[d.base_token] - top[d.spec_token]
                  if d.base_token in top and d.spec_token in top else None)
        out.append(TieProbe(d, margin))
    return out



def collect(url: str, engine: str, base: dict[int, list[LevelRun]],
            spec: dict[int, list[LevelRun]], prompts: dict[str, str],
            done: Sequence[TieProbe], *, timeout: float,
            endpoint: str = "completions") -> tuple[list[TieProbe], str]:
    """Probe the divergences not probed yet (``done``); a failure is a note, not an error.

    Only outputs measured on ``completions`` (the prompt text as sent) are probed: behind
    ``chat`` the server applied a template, and the raw text is not the context it decoded.
    """
    if engine not in MARGIN_ENGINES:
        return [], f"{engine}: divergences not probed for near-ties (no token log-probabilities)"
    if endpoint != "completions":
        return [], (f"{engine}: divergences not probed for near-ties (measured through /{endpoint}"
                    ": the prompt the server decoded is templated)")
    new = divergences(base, spec, prompts, {t.divergence for t in done})
    try:
        return probe_margins(url, new, limit=max(0, LIMIT - len(done)), timeout=timeout,
                             engine=engine), ""
    except (httpx.HTTPError, MalformedDocument) as err:
        return [], f"near-tie probe failed: {err}"
