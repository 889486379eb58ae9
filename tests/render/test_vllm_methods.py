"""Every speculative method render emits for vLLM boots the real CPU build and speculates.

The flag sets for draft-free n-gram lookup, an EAGLE-1 head, an EAGLE-3 head and a
per-batch-size schedule are each started from the bundle's own rendered ``serve.sh``; each
must draft (its counters move) and keep greedy output exactly the baseline's. A check of
what the engine does, not of its speed: it shares the cores with other tests (ci/test.sh).
Boots are the cost, so the method servers boot two at a time beside the one baseline
(``side_by_side``: a boot is mostly imports on one core).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._vllm import COUNTERS, metrics, side_by_side, vllm_completion
from tests._vllm_bundles import PROMPTS, VllmBox, make_box, vllm_doc

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(3600)]

#: The method bundles, booted two at a time beside the baseline (three servers at most).
METHOD_PAIRS = (("vhead3", "vhead1"), ("vngram", "vsched"))
Served = tuple[dict[str, str], dict[str, float]]


@pytest.fixture(scope="module")
def box(module_tmp: Path, vllm_bin: Path) -> VllmBox:
    return make_box(module_tmp, vllm_bin, lambda m: [
        vllm_doc("vhead3", m.target, m.eagle3, method="eagle3", k=3),
        vllm_doc("vhead1", m.target, m.eagle1, method="eagle", k=2),
        vllm_doc("vngram", m.target, None, method="ngram", k=3,
                 speculative_extra={"prompt_lookup_max": 4, "prompt_lookup_min": 2}),
        vllm_doc("vsched", m.target, m.eagle3, method="eagle3", k=3,
                 schedule=[[1, 1, 3], [2, 8, 1]]),
    ])


@pytest.fixture(scope="module")
def baseline(box: VllmBox) -> Iterator[str]:
    """The baseline arm (no speculation) of the shared target, booted once."""
    with box.serve("vngram", speculation=False) as url:
        yield url


@pytest.fixture(scope="module")
def reference(baseline: str) -> dict[str, str]:
    """The baseline's greedy text per prompt: what every method must reproduce."""
    return {p: vllm_completion(baseline, "vngram", p)["choices"][0]["text"] for p in PROMPTS}


def _greedy_and_counters(url: str, name: str) -> Served:
    before = metrics(url)
    texts = {p: vllm_completion(url, name, p)["choices"][0]["text"] for p in PROMPTS}
    after = metrics(url)
    return texts, {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}


@pytest.fixture(scope="module")
def methods(box: VllmBox, baseline: str) -> dict[str, Served | BaseException]:
    """Each method's greedy texts and counter deltas (or why its server failed), per name."""
    del baseline  # booted first: the servers of a pair then boot side by side beside it
    out: dict[str, Served | BaseException] = {}
    for pair in METHOD_PAIRS:
        try:
            with side_by_side(*(box.serve(n) for n in pair)) as urls:
                for name, url in zip(pair, urls, strict=True):
                    try:
                        out[name] = _greedy_and_counters(url, name)
                    except Exception as err:  # noqa: BLE001 - raised again by its test
                        out[name] = err
        except Exception as err:  # noqa: BLE001 - a boot failed: raised again by each test
            for name in pair:
                out.setdefault(name, err)
    return out


@pytest.mark.parametrize("name", [n for pair in METHOD_PAIRS for n in pair])
def test_rendered_manifest_boots_and_speculates(methods: dict[str, Served | BaseException],
                                                reference: dict[str, str], name: str) -> None:
    """The flag set render emits starts vLLM as is, drafts, and keeps greedy output exact."""
    got = methods[name]
    if isinstance(got, BaseException):
        raise got
    texts, delta = got
    assert delta[COUNTERS[1]] >= delta[COUNTERS[0]] >= 0
    assert 0 <= delta[COUNTERS[2]] <= delta[COUNTERS[1]]
    if name != "vngram":  # the heads draft every step (random heads: acceptance may be 0);
        assert delta[COUNTERS[0]] > 0  # n-gram lookup drafts only on a repeat
    assert texts == reference
