"""JSON from untrusted model files: strict where it is a format (no duplicate keys, no NaN),
bounded in size, and never a crash (deep nesting raises RecursionError in ``json``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from specbundle.strict import read_bounded

__all__ = ["MAX_JSON_BYTES", "DuplicateKeys", "load_json", "loads_strict"]

MAX_JSON_BYTES = 256 * 1024 * 1024


class DuplicateKeys(ValueError):
    """An object with the same key twice (readers disagree on which one wins)."""


def _no_dups(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        counts = Counter(k for k, _ in pairs)
        raise DuplicateKeys(", ".join(sorted(k for k, n in counts.items() if n > 1)[:5]))
    return out


def _bad_constant(name: str) -> None:
    raise ValueError(f"non-JSON constant {name}")


def loads_strict(text: str | bytes) -> Any:
    """Parse JSON rejecting duplicate keys, NaN/Infinity and pathological nesting.

    Raises:
        DuplicateKeys: a key repeats inside one object.
        ValueError: anything else that is not plain JSON (nesting included).
    """
    try:
        return json.loads(text, object_pairs_hook=_no_dups, parse_constant=_bad_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def load_json(path: Path) -> Any:
    """A model file's JSON (lenient about duplicates), or None if unreadable or too big."""
    try:
        return json.loads(read_bounded(path, max_bytes=MAX_JSON_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
