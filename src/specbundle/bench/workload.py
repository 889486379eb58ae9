"""The benchmark's prompts: shipped with the bundle or built in, never downloaded.

Acceptance is workload-shaped (code and summarisation copy far more than creative chat),
so the default set mixes chat, code and summarisation, and a bundle can ship its own
prompts file (JSONL with ``prompt`` or MT-Bench/Spec-Bench style ``turns``; or plain text,
one prompt per line). Warm-up prompts are held out from the measured set so the measured
window never starts on a warm prefix. Every prompt set is recorded with its SHA-256.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specbundle.digest import sha256_bytes
from specbundle.errors import SpecError
from specbundle.strict import MalformedDocument, loads_json, read_bounded

__all__ = ["DEFAULT_PROMPTS", "WARMUP_PROMPTS", "Prompt", "Workload", "default_workload",
           "load_prompts_file", "prompts_from_bytes"]


@dataclass(frozen=True)
class Prompt:
    """One prompt with a stable id (pairs the two arms' outputs) and a category."""

    id: str
    category: str
    text: str


@dataclass(frozen=True)
class Workload:
    """Measured prompts, held-out warm-up prompts and where they came from."""

    prompts: tuple[Prompt, ...]
    warmup: tuple[Prompt, ...]
    source: str
    sha256: str

    def cycle(self, n: int, offset: int = 0) -> list[Prompt]:
        """``n`` prompts in a fixed order (wrapping); both arms get the same list."""
        k = len(self.prompts)
        return [self.prompts[(offset + i) % k] for i in range(n)]


_RAW: tuple[tuple[str, str], ...] = (
    ("chat", "Explain to a new colleague why a build server should pin every dependency."),
    ("chat", "What are three practical ways to reduce meeting overload in a small team?"),
    ("chat", "Describe how a refrigerator keeps food cold, in plain words."),
    ("chat", "Give advice to someone preparing for their first half marathon."),
    ("chat", "Why do leaves change colour in autumn? Answer for a ten-year-old."),
    ("code", "Write a Python function that returns the n-th Fibonacci number iteratively."),
    ("code", "Write a SQL query that lists the ten customers with the highest total order value."),
    ("code", "Implement binary search over a sorted list of integers in Go."),
    ("code", "Write a bash script that deletes files older than seven days in /var/tmp."),
    ("code", "Refactor this to use a list comprehension:\nresult = []\nfor x in data:\n"
             "    if x % 2 == 0:\n        result.append(x * x)"),
    ("summarisation", "Summarise in two sentences: The council met on Tuesday to discuss the "
                      "new cycle lanes. Residents raised concerns about parking, while shop "
                      "owners reported more foot traffic since the trial began. The council "
                      "agreed to extend the trial by six months and publish the data."),
    ("summarisation", "Summarise the key points: Backups must be tested by restoring them. A "
                      "backup that was never restored is a hope, not a plan. Keep one copy "
                      "offline, rotate media, and record how long a full restore takes."),
    ("summarisation", "Write a one-paragraph summary of the water cycle: evaporation from "
                      "oceans, condensation into clouds, precipitation as rain or snow, and "
                      "collection in rivers, lakes and groundwater."),
    ("summarisation", "Summarise this incident report: At 02:10 the primary database ran out "
                      "of disk. Writes failed for 14 minutes until an operator expanded the "
                      "volume. Root cause: log retention was disabled during a migration."),
)

DEFAULT_PROMPTS: tuple[Prompt, ...] = tuple(
    Prompt(f"default-{i:02d}", cat, text) for i, (cat, text) in enumerate(_RAW)
)

WARMUP_PROMPTS: tuple[Prompt, ...] = (
    Prompt("warmup-0", "chat", "Say hello and introduce yourself briefly."),
    Prompt("warmup-1", "code", "Write a Python function that reverses a string."),
    Prompt("warmup-2", "summarisation", "Summarise: the meeting moved to Friday at noon."),
)


def _digest(prompts: tuple[Prompt, ...]) -> str:
    doc = [{"id": p.id, "category": p.category, "text": p.text} for p in prompts]
    return sha256_bytes(json.dumps(doc, sort_keys=True).encode())


def default_workload() -> Workload:
    """The built-in varied set (chat, code, summarisation)."""
    return Workload(DEFAULT_PROMPTS, WARMUP_PROMPTS, "built-in", _digest(DEFAULT_PROMPTS))


def _from_json_line(obj: object, n: int, file: str) -> Prompt:
    if not isinstance(obj, dict):
        raise SpecError(f"line {n}: expected a JSON object", file=file)
    text = obj.get("prompt")
    if text is None and isinstance(obj.get("turns"), list) and obj["turns"]:
        text = obj["turns"][0]
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"line {n}: needs a non-empty 'prompt' or 'turns'", file=file)
    pid = obj.get("id", obj.get("question_id", f"p{n:04d}"))
    return Prompt(str(pid), str(obj.get("category", "custom")), text)


def load_prompts_file(path: Path) -> Workload:
    """Prompts from a ``.jsonl`` or ``.txt`` file shipped with the bundle."""
    try:
        data = read_bounded(path, what=str(path))  # never blocks on a FIFO
    except MalformedDocument as err:
        raise SpecError(f"cannot read prompts file: {err}", file=str(path)) from None
    except OSError as err:
        raise SpecError(f"cannot read prompts file: {err.strerror}", file=str(path)) from None
    return prompts_from_bytes(data, path)


def prompts_from_bytes(data: bytes, path: Path) -> Workload:
    """Prompts from the bytes of a prompts file (already read, e.g. checked by digest);
    ``path`` gives the format (``.jsonl`` or text) and the name reported."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError("prompts file is not UTF-8", file=str(path)) from None
    prompts: list[Prompt] = []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if path.suffix == ".jsonl":
        for n, line in enumerate(lines, 1):
            try:
                obj = loads_json(line, what=f"line {n}")
            except MalformedDocument as err:
                raise SpecError(str(err), file=str(path)) from None
            prompts.append(_from_json_line(obj, n, str(path)))
    else:
        prompts = [Prompt(f"p{n:04d}", "custom", ln) for n, ln in enumerate(lines, 1)]
    if len(prompts) < 2:
        raise SpecError("a prompts file needs at least two prompts", file=str(path))
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise SpecError("prompt ids must be unique", file=str(path))
    return Workload(tuple(prompts), WARMUP_PROMPTS, path.name, sha256_bytes(data))
