"""Predicates only specbundle defines (``https://specbundle.dev/attestation/<kind>/v<N>``).

Each model is one type *and* version: a new version is a new model beside the old one, so
statements signed under the old version keep verifying. Unknown fields are refused.
"""

from __future__ import annotations

from pydantic import Field

from specbundle.attest.models.base import JsonObject, PredicateModel, StrictModel
from specbundle.attest.predicates import (
    BENCH_EVIDENCE_V1,
    BUNDLE_MANIFEST_V1,
    LOG_CHECKPOINT_V1,
    PAIR_BINDING_V1,
    REVOCATION_V1,
    TRANSFER_INDEX_V1,
    TUNE_SCHEDULE_V1,
)

__all__ = [
    "BenchEvidenceV1",
    "BundleManifestV1",
    "DigestRef",
    "LogCheckpointV1",
    "LogHead",
    "PairBindingV1",
    "PairSide",
    "PairTokenizer",
    "RevocationV1",
    "ScanReportRef",
    "TransferChunk",
    "TransferChunking",
    "TransferIndexV1",
    "TransferPart",
    "TuneChoice",
    "TuneScheduleV1",
]


class DigestRef(StrictModel):
    """A file named by URI and digest (and the schema of its content, where it has one)."""

    uri: str
    digest: dict[str, str]
    schema_: str | None = Field(default=None, alias="schema")

    @property
    def sha256(self) -> str | None:
        """The sha256 of the file, if named."""
        return self.digest.get("sha256")


class PairSide(StrictModel):
    """One artifact a pair binding names."""

    repo: str
    commit: str
    commit_kind: str
    root_digest: str
    gguf: str | None


class PairTokenizer(StrictModel):
    """Tokenizer file digests of both sides, and whether the draft's match the target's."""

    digest: str | None
    target: dict[str, str]
    draft: dict[str, str]
    draft_matches_target: bool


class PairBindingV1(PredicateModel):
    """Binds the exact target and draft bytes to the speculative settings of one bundle."""

    PREDICATE_TYPE = PAIR_BINDING_V1

    bundle: str
    method: str | None
    target: PairSide | None
    draft: PairSide | None
    tokenizer: PairTokenizer
    speculative: JsonObject
    #: absent in bindings signed before approvals bound the spec
    spec_sha256: str | None = None
    time_created: str
    tool_version: str


class BenchEvidenceV1(PredicateModel):
    """A bench run's report, by digest, and its headline figures (decimal strings)."""

    PREDICATE_TYPE = BENCH_EVIDENCE_V1

    time_created: str
    run_id: str
    engine: str
    report: DigestRef
    figures: dict[str, str]


class TuneChoice(StrictModel):
    """The K chosen for one concurrency level (figures as decimal strings)."""

    concurrency: int
    k: int
    p_min: str | None
    ratio: str
    ratio_low: str
    gain_over_fixed: str | None


class TuneScheduleV1(PredicateModel):
    """``specbundle tune``: the measured K-per-concurrency schedule, by its file's digest."""

    PREDICATE_TYPE = TUNE_SCHEDULE_V1

    time_created: str
    run_id: str
    engine: str
    result: DigestRef
    schedule: DigestRef
    choices: list[TuneChoice]
    best_fixed: str | None
    crossover_concurrency: int | None


class TransferPart(StrictModel):
    """One file of a transfer set (``offset`` for a part of a split file)."""

    path: str
    size: int
    sha256: str
    offset: int | None = None


class TransferChunk(StrictModel):
    """One piece of a split set."""

    name: str
    size: int
    sha256: str


class TransferChunking(StrictModel):
    """How a set was split for removable media."""

    chunk_size: int
    chunks: list[TransferChunk]


class LogHead(StrictModel):
    """An event-log head: the last entry's sequence number and digest."""

    seq: int
    digest: str


class TransferIndexV1(PredicateModel):
    """What a transfer set carries, by path and digest, and the exporter's log floor."""

    PREDICATE_TYPE = TRANSFER_INDEX_V1

    bundle: str
    version: int
    time_created: str
    tool_version: str
    parts: list[TransferPart]
    revocations: list[JsonObject]
    log_head: LogHead | None
    chunking: TransferChunking | None = None


class RevocationV1(PredicateModel):
    """A key revocation (an event-log entry; subject = the revoked fingerprint)."""

    PREDICATE_TYPE = REVOCATION_V1

    fingerprint: str
    reason: str
    time_created: str
    mirror: str


class LogCheckpointV1(PredicateModel):
    """A signed event-log head; ``previous`` chains it to the checkpoint line before."""

    PREDICATE_TYPE = LOG_CHECKPOINT_V1

    seq: int
    entries: int
    time_created: str
    mirror: str
    previous: str | None = None


class ScanReportRef(StrictModel):
    """The scan report a manifest version was signed with."""

    sha256: str


class BundleManifestV1(PredicateModel):
    """One signed bundle version; ``spec`` is the spec's canonical JSON text (floats exact)
    and ``record`` the bundle record without it (validated by its own reader)."""

    PREDICATE_TYPE = BUNDLE_MANIFEST_V1

    bundle: str
    version: int
    previous_manifest: str | None
    spec: str
    record: JsonObject
    roots: dict[str, str]
    method: str | None
    scan_report: ScanReportRef | None
    images: dict[str, str]
    time_created: str
