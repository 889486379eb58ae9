"""The tuned speculation schedule: K (and llama.cpp's p_min) per concurrency, measured.

``specbundle tune`` writes it (``bundles/<name>/tune/schedule.json``) and signs a statement
naming its digest; ``render`` applies it to the spec before rendering, so the deployed
configuration is the one that was measured. It lives here, beside the spec, because render
(an earlier stage than bench) reads it and must not import the bench stage.

Per engine: vLLM takes the whole schedule as ``num_speculative_tokens_per_batch_size``
triples (with ``num_speculative_tokens`` = the largest K, since vLLM stores
min(num_speculative_tokens, K)); SGLang takes per-batch-size tiers through
``--speculative-adaptive-config``; llama.cpp has one ``--spec-draft-n-max`` /
``--spec-draft-p-min`` for the server, so it takes the setting measured at the deployment's
P95 concurrency (K = 0 there means speculation off).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from specbundle.attest.log import read_attestations
from specbundle.attest.models import TuneScheduleV1
from specbundle.attest.statement import parse_statement
from specbundle.digest import sha256_bytes
from specbundle.errors import SpecError
from specbundle.mirror import Mirror
from specbundle.spec import BundleSpec
from specbundle.strict import MalformedDocument, loads_json

__all__ = ["SCHEDULE_FILE", "SCHEDULE_VERSION", "Tier", "TunedSchedule", "apply_tuned",
           "read_bound_schedule", "read_logged_schedule"]

SCHEDULE_FILE = "tune/schedule.json"
SCHEDULE_VERSION = "specbundle.tune-schedule/v1"


@dataclass(frozen=True)
class Tier:
    """One measured concurrency level and the setting chosen for it (K = 0: speculation off)."""

    concurrency: int
    k: int
    p_min: float | None


@dataclass(frozen=True)
class TunedSchedule:
    """The measured schedule, as render consumes it."""

    engine: str
    run_id: str
    p95_concurrency: int
    tiers: tuple[Tier, ...]

    def at(self, concurrency: int) -> Tier:
        """The tier in force at a concurrency: the smallest measured level ≥ it, else the last."""
        for t in self.tiers:
            if t.concurrency >= concurrency:
                return t
        return self.tiers[-1]

    @property
    def off_levels(self) -> tuple[int, ...]:
        """Measured levels where speculation is switched off."""
        return tuple(t.concurrency for t in self.tiers if t.k == 0)

    @property
    def max_k(self) -> int:
        return max(t.k for t in self.tiers)

    def vllm_triples(self) -> list[list[int]]:
        """``[start_bs, end_bs, K]`` ranges (inclusive, from 1, contiguous); beyond the highest
        measured level the last K holds (vLLM needs no open end)."""
        out: list[list[int]] = []
        start = 1
        for t in self.tiers:
            if out and out[-1][2] == t.k:
                out[-1][1] = t.concurrency
            else:
                out.append([start, t.concurrency, t.k])
            start = t.concurrency + 1
        return out

    def sglang_adaptive(self) -> dict[str, Any]:
        """The ``--speculative-adaptive-config`` document: one measured step count per tier."""
        return {"candidate_steps": {str(t.concurrency): [t.k] for t in self.tiers}}

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEDULE_VERSION, "engine": self.engine, "run_id": self.run_id,
                "p95_concurrency": self.p95_concurrency,
                "tiers": [{"concurrency": t.concurrency, "k": t.k, "p_min": t.p_min}
                          for t in self.tiers]}

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n").encode()

    @property
    def digest(self) -> str:
        return sha256_bytes(self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes, *, file: str = SCHEDULE_FILE) -> TunedSchedule:
        """Parse strictly; anything off is a :class:`SpecError` naming the file."""
        try:
            doc = loads_json(data)
        except MalformedDocument as err:
            raise SpecError(f"malformed tuned schedule: {err}", file=file) from None
        try:
            if doc["schema_version"] != SCHEDULE_VERSION:
                raise SpecError(f"unknown schedule version {doc['schema_version']!r}", file=file)
            tiers = tuple(Tier(int(t["concurrency"]), int(t["k"]),
                               None if t["p_min"] is None else float(t["p_min"]))
                          for t in doc["tiers"])
            out = cls(str(doc["engine"]), str(doc["run_id"]), int(doc["p95_concurrency"]), tiers)
        except (KeyError, TypeError, ValueError) as err:
            raise SpecError(f"malformed tuned schedule: {err}", file=file) from None
        levels = [t.concurrency for t in tiers]
        if not tiers or levels != sorted(set(levels)) or min(levels) < 1 or \
                any(t.k < 0 or t.k > 64 for t in tiers):
            raise SpecError("tuned schedule tiers must be ascending, distinct, 0 <= K <= 64",
                            file=file)
        return out


def _parsed(data: bytes, engine: str) -> TunedSchedule | None:
    tuned = TunedSchedule.from_bytes(data)
    return tuned if tuned.engine == engine else None


def read_bound_schedule(mirror: Mirror, name: str, engine: str,
                        bound: frozenset[str]) -> TunedSchedule | None:
    """The bundle's tuned schedule for ``engine``, only if its bytes hash to a bound digest.

    ``bound``: the schedule digests a verification found bound by the latest tune statement
    eligible policy keys signed (``VerifiedBundle.tuned_schedules``); the file is used only if
    its bytes, as read now, hash to one of them. Anything else is ignored (never acted on):
    render then uses the spec as written.
    """
    data = mirror.read_bundle_file(name, SCHEDULE_FILE)
    if data is None or sha256_bytes(data) not in bound:
        return None
    return _parsed(data, engine)


def read_logged_schedule(mirror: Mirror, name: str, engine: str) -> TunedSchedule | None:
    """Connected side: the schedule file if any tune statement in the log names its digest.

    Signatures are not checked here (that is ``verify``'s business): only the unsigned
    reading of a bundle (:func:`specbundle.bundle.read_unsigned`) uses this.
    """
    data = mirror.read_bundle_file(name, SCHEDULE_FILE)
    if data is None:
        return None
    digest = sha256_bytes(data)
    for env in read_attestations(mirror, name, problems=[]):
        try:
            st = parse_statement(env.payload)
        except Exception:  # noqa: BLE001, S112 - any unreadable statement simply binds nothing
            continue
        if isinstance(st.typed, TuneScheduleV1) and st.typed.schedule.sha256 == digest:
            return _parsed(data, engine)
    return None


def apply_tuned(spec: BundleSpec, tuned: TunedSchedule | None) -> BundleSpec:
    """The spec with the measured schedule in force for its engine.

    Every value taken from the schedule re-enters through the spec's own validation (field
    ranges and the spec-wide rules): a signed schedule cannot put in force what a spec could
    not say (``p_min`` 7.5, a negative K).

    Raises:
        SpecError: a schedule value the spec refuses.
    """
    if tuned is None:
        return spec
    sp = spec.speculative
    if tuned.engine == "vllm" and tuned.max_k > 0:
        triples = tuple(tuple(t) for t in tuned.vllm_triples())
        return _revalidated(spec, {"speculative": _revalidated(sp, {
            "num_speculative_tokens": tuned.max_k, "schedule": triples})})
    if tuned.engine == "llamacpp" and spec.engines.llamacpp is not None:
        tier = tuned.at(tuned.p95_concurrency)
        if tier.k == 0:  # one setting per server: off at P95 is reported by admit, not hidden
            return spec
        upd: dict[str, object] = {"draft_n_max": tier.k}
        if tier.p_min is not None:
            upd["draft_p_min"] = tier.p_min
        lc = _revalidated(spec.engines.llamacpp, upd)
        return _revalidated(spec, {"engines": _revalidated(spec.engines, {"llamacpp": lc})})
    return spec


_M = TypeVar("_M", bound=BaseModel)


def _revalidated(model: _M, update: dict[str, object]) -> _M:
    """``model`` with ``update`` applied through its validators (never ``model_copy``)."""
    try:
        return type(model).model_validate({**dict(model), **update})
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise SpecError(f"tuned schedule value refused by the spec's rules: {first['msg']}",
                        file=SCHEDULE_FILE, field=loc) from None
