"""Typed predicates: one frozen pydantic model per predicate type and version.

Writers build a model and sign :meth:`~PredicateModel.to_predicate` (``Statement.of``);
readers get the model from :func:`parse_predicate` (``Statement.typed``), never a ``.get()``
chain over a dict. The registry below is closed: a predicate type (or version) without a
model is refused with :class:`WrongPredicateType`, on writing and on reading alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from specbundle.attest.models.base import (
    JsonObject,
    PredicateModel,
    ResourceDescriptor,
    StrictModel,
    WrongPredicateType,
)
from specbundle.attest.models.own import (
    BenchEvidenceV1,
    BundleManifestV1,
    DigestRef,
    LogCheckpointV1,
    LogHead,
    PairBindingV1,
    PairSide,
    RevocationV1,
    TransferChunk,
    TransferChunking,
    TransferIndexV1,
    TransferPart,
    TuneChoice,
    TuneScheduleV1,
)
from specbundle.attest.models.standard import (
    AdmissionDetails,
    CriterionResult,
    FetchProvenanceV1,
    OmsSignatureV1,
    ScanResultV01,
    ScanSummary,
    VerificationSummaryV1,
)
from specbundle.attest.predicates import parse_time
from specbundle.errors import VerificationError

__all__ = [
    "MODEL_BY_PREDICATE",
    "AdmissionDetails",
    "BenchEvidenceV1",
    "BundleManifestV1",
    "CriterionResult",
    "DigestRef",
    "FetchProvenanceV1",
    "JsonObject",
    "LogCheckpointV1",
    "LogHead",
    "OmsSignatureV1",
    "PairBindingV1",
    "PairSide",
    "PredicateModel",
    "ResourceDescriptor",
    "RevocationV1",
    "ScanResultV01",
    "ScanSummary",
    "StrictModel",
    "TransferChunk",
    "TransferChunking",
    "TransferIndexV1",
    "TransferPart",
    "TuneChoice",
    "TuneScheduleV1",
    "VerificationSummaryV1",
    "WrongPredicateType",
    "parse_predicate",
    "statement_time",
]

_MODELS: tuple[type[PredicateModel], ...] = (
    FetchProvenanceV1, ScanResultV01, PairBindingV1, BenchEvidenceV1, TuneScheduleV1,
    VerificationSummaryV1, TransferIndexV1, RevocationV1, LogCheckpointV1, BundleManifestV1,
    OmsSignatureV1,
)
#: Every predicate type (and version) specbundle writes or reads, to its model.
MODEL_BY_PREDICATE: Mapping[str, type[PredicateModel]] = {m.PREDICATE_TYPE: m for m in _MODELS}

def parse_predicate(predicate_type: str, predicate: Mapping[str, Any]) -> PredicateModel:
    """The typed predicate; an unknown type or a predicate that does not fit its model fails.

    Raises:
        WrongPredicateType: no model is registered for ``predicate_type``.
        VerificationError: the predicate does not fit its type's model (the first problem).
    """
    model = MODEL_BY_PREDICATE.get(predicate_type)
    if model is None:
        raise WrongPredicateType(
            f"unknown predicate type {predicate_type[:200]!r} (known: "
            f"{', '.join(sorted(MODEL_BY_PREDICATE))})", predicate_type)
    try:
        return model.model_validate(predicate)
    except ValidationError as err:
        e = err.errors()[0]
        where = ".".join(str(x) for x in e["loc"]) or "predicate"
        raise VerificationError(
            f"{predicate_type} predicate is malformed: {where}: {e['msg']}") from None


def statement_time(predicate_type: str, predicate: Mapping[str, Any]) -> datetime | None:
    """When the claim was made, from the field its predicate type defines for it.

    SLSA provenance: ``runDetails.metadata.finishedOn``; VSA: ``timeVerified``; everything
    else specbundle writes carries ``timeCreated``. A statement without a (readable) time
    cannot satisfy a max-age policy (fail closed).
    """
    try:
        return parse_time(parse_predicate(predicate_type, predicate).signed_time())
    except VerificationError:
        return None
