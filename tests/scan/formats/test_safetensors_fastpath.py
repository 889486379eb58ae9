"""Lockstep: the header check's fast path decides exactly what the per-entry rules decide.

``read_header`` validates a well-formed header in one loop (``_well_formed``) and its layout by
list comparison (``_tiles``), and falls back to the per-entry rules (``_tensor``, ``_layout``)
only when those cannot vouch for it. Over random headers built to sit on every rule's edge
(bools for ints, negative and float dims, odd bit counts, zero-size tensors, gaps, overlaps,
extra keys, unknown dtypes, names at the length limit), the result must equal the slow path's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from specbundle.scan.formats import safetensors_header as sh

ROUNDS = 400


def _slow(doc: dict[str, Any], data_len: int) -> tuple[dict[str, sh.StTensor], list[Any]]:
    probs: list[Any] = []
    names_clean = not sh._BAD_NAME.search("\x7f".join(doc))
    tensors = {}
    for name, entry in doc.items():
        t = sh._tensor(name, entry, probs, names_clean)
        if t is not None:
            tensors[name] = t
    sh._layout(tensors, data_len, probs)
    return tensors, probs


def _edge(rng: random.Random) -> object:
    return rng.choice([0, 1, 2, 3, -1, True, False, 1.0, "2", None, [2], 2**64])


def _header(rng: random.Random) -> tuple[dict[str, Any], int]:
    doc: dict[str, Any] = {}
    pos = 0
    for i in range(rng.randint(0, 6)):
        dtype = rng.choice(["F16", "F16", "BF16", "F4", "F6_E2M3", "U8", "F32", "X9", 16])
        bits = sh.DTYPE_BITS.get(dtype, 16) if isinstance(dtype, str) else 16
        shape: list[object] = [rng.choice([0, 1, 2, 3, 5]) for _ in range(rng.randint(0, 3))]
        numel = 1
        for d in shape:
            numel *= d  # type: ignore[operator]
        span = numel * bits // 8
        begin = pos + rng.choice([0, 0, 0, 0, 1, -1]) if pos else rng.choice([0, 0, 0, 2])
        entry: dict[str, object] = {"dtype": dtype, "shape": shape,
                                    "data_offsets": [begin, begin + span]}
        mutation = rng.randrange(36)  # most entries valid: one bad one must tip it
        if mutation == 0 and shape:
            shape[rng.randrange(len(shape))] = _edge(rng)
        elif mutation == 1:
            entry["data_offsets"] = [_edge(rng), begin + span]
        elif mutation == 2:
            entry["data_offsets"] = [begin, _edge(rng)]
        elif mutation == 3:
            entry[rng.choice(["dtype", "shape", "data_offsets"])] = _edge(rng)
        elif mutation == 4:
            entry["extra"] = 1
        elif mutation == 5:
            del entry[rng.choice(["dtype", "shape", "data_offsets"])]
        elif mutation == 6:
            entry["data_offsets"] = [begin, begin + span + rng.choice([1, -1])]
        elif mutation == 7:
            entry["data_offsets"] = [begin, begin + span, 0]
        elif mutation == 8:  # a consistent span that starts before the data section
            entry["data_offsets"] = [-1, span - 1]
        name = f"t{i}" if rng.randrange(8) else rng.choice(
            ["", "x" * sh._MAX_NAME, "x" * (sh._MAX_NAME + 1), f"a/../t{i}", f"t{i}\x01"])
        doc[name] = entry if rng.randrange(30) else rng.choice([[1], "s", 3, None])
        pos = max(pos, begin + span)
    return doc, pos + rng.choice([0, 0, 0, 1, -1])


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_matches_the_per_entry_rules(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    fast = slow_clean = slow_flagged = 0
    for i in range(ROUNDS):
        doc, data_len = _header(rng)
        data_len = max(data_len, 0)
        hb = json.dumps(doc).encode()
        hb += b" " * (-len(hb) % 8)
        path = tmp_path / f"{i}.safetensors"
        path.write_bytes(len(hb).to_bytes(8, "little") + hb + b"\0" * data_len)
        got = sh.read_header(path, 1 << 20)
        tensors, probs = _slow(json.loads(hb), data_len)
        assert (got.tensors, list(got.problems)) == (tensors, probs), doc
        fast += sh._well_formed(json.loads(hb)) is not None
        slow_clean += not probs
        slow_flagged += bool(probs) and len(tensors) == len(doc)  # one rule short of fast
    # every side was exercised: headers the fast path takes, and near misses it must not
    assert min(fast, slow_clean, slow_flagged) > ROUNDS // 10, (fast, slow_clean, slow_flagged)


@pytest.mark.parametrize("shape", [[2**62] * 20_000, [10**400], [2**62] * 5_000 + [0]])
def test_hostile_shapes_are_findings_in_linear_time(tmp_path: Path, shape: list[int]) -> None:
    """Thousands of 2^62 dims made the element count a quadratic big-int product, and one
    too large for a float crashed the report; a zero dim still makes an empty tensor."""
    span = 0 if 0 in shape else 2
    hb = json.dumps({"t": {"dtype": "F16", "shape": shape, "data_offsets": [0, span]}}).encode()
    hb += b" " * (-len(hb) % 8)
    path = tmp_path / "x.safetensors"
    path.write_bytes(len(hb).to_bytes(8, "little") + hb + b"\0" * span)
    got = sh.read_header(path, 1 << 27)
    assert [p[0] for p in got.problems] == ([] if span == 0 else ["safetensors.size-mismatch"])
    json.dumps([p[3] for p in got.problems])  # the evidence stays serialisable
