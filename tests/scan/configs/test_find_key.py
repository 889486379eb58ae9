"""``find_key`` finds every occurrence of a key at any depth, with its path: an object's own
key before anything nested in it, nested objects in file order.

Checked against a plain recursive reference over random nested documents (objects whose values
are all scalars are skipped without a Python loop, so those are generated on purpose).
"""

from __future__ import annotations

import random
from typing import Any

from specbundle.scan.configs.check import find_key


def _reference(doc: Any, key: str, path: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if isinstance(doc, dict):
        if key in doc:
            out.append((f"{path}.{key}" if path else key, doc[key]))
        for k, v in doc.items():
            out.extend(_reference(v, key, f"{path}.{k}" if path else str(k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.extend(_reference(v, key, f"{path}[{i}]"))
    return out


def _doc(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(4) if depth < 5 else 3
    if kind == 0:
        return {rng.choice(["auto_map", "a", "b", "c", "chat_template"]) + str(i % 2 or ""):
                _doc(rng, depth + 1) for i in range(rng.randint(0, 4))}
    if kind == 1:
        return [_doc(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == 2:  # all scalars: the fast skip
        return {f"k{i}": rng.choice(["s", 1, 1.5, True, None]) for i in range(3)} | (
            {"auto_map": "x"} if rng.randrange(2) else {})
    return rng.choice(["auto_map", 0, None, False, 2.5])


def test_matches_a_recursive_reference() -> None:
    rng = random.Random(0)
    hits = 0
    for _ in range(2000):
        doc = _doc(rng, 0)
        for key in ("auto_map", "chat_template", "a1"):
            got = list(find_key(doc, key))
            assert got == _reference(doc, key), doc
            hits += len(got)
    assert hits > 500


def test_a_weight_map_of_strings_is_searched_too() -> None:
    doc = {"weight_map": {f"t{i}": "model.safetensors" for i in range(1000)} | {"auto_map": "x"}}
    assert list(find_key(doc, "auto_map")) == [("weight_map.auto_map", "x")]
