"""Predicates of published formats specbundle writes: SLSA provenance v1 (the fetch), in-toto
test-result v0.1 (the scan), SLSA VSA v1 (the admission) and OMS v1.0 (``model.sig``).

Their specifications tell consumers to ignore fields they do not know, so unknown fields are
kept (and written back byte for byte) but never read; the fields specbundle reads are typed
strictly, and the parts specbundle alone defines (``internalParameters`` of its build type,
``specbundle_scan``, the VSA's ``specbundle``) refuse unknown fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, JsonValue

from specbundle.attest.models.base import (
    JsonObject,
    OpenModel,
    PredicateModel,
    ResourceDescriptor,
    StrictModel,
)
from specbundle.attest.predicates import (
    OMS_SIGNATURE_V1,
    SCAN_RESULT,
    SLSA_PROVENANCE_V1,
    SLSA_VSA_V1,
)

__all__ = [
    "AdmissionDetails",
    "BuildDefinition",
    "Builder",
    "CriterionResult",
    "FetchInternal",
    "FetchProvenanceV1",
    "OmsResource",
    "OmsSerialization",
    "OmsSignatureV1",
    "PolicyRef",
    "RunDetails",
    "RunMetadata",
    "ScanResultV01",
    "ScanSummary",
    "VerificationSummaryV1",
    "Verifier",
]


class _OpenPredicate(PredicateModel):
    model_config = ConfigDict(extra="allow")


class FetchInternal(StrictModel):
    """Which bundle and role the fetch was for (specbundle's build type defines these)."""

    bundle: str
    role: str


class BuildDefinition(OpenModel):
    """SLSA ``buildDefinition``."""

    build_type: str
    external_parameters: JsonObject
    internal_parameters: FetchInternal
    resolved_dependencies: list[ResourceDescriptor]


class Builder(OpenModel):
    """SLSA ``runDetails.builder``."""

    id: str
    version: dict[str, str] | None = None


class RunMetadata(OpenModel):
    """SLSA ``runDetails.metadata``."""

    invocation_id: str | None = None
    started_on: str | None = None
    finished_on: str | None = None


class RunDetails(OpenModel):
    """SLSA ``runDetails``."""

    builder: Builder
    metadata: RunMetadata | None = None
    byproducts: list[ResourceDescriptor] | None = None


class FetchProvenanceV1(_OpenPredicate):
    """SLSA provenance v1 for how one artifact entered the mirror (the pull is the build)."""

    PREDICATE_TYPE = SLSA_PROVENANCE_V1

    build_definition: BuildDefinition
    run_details: RunDetails

    def signed_time(self) -> str | None:
        """``runDetails.metadata.finishedOn`` (or ``startedOn``)."""
        md = self.run_details.metadata
        return (md.finished_on or md.started_on) if md else None


class ScanSummary(StrictModel):
    """specbundle's part of a scan result: the report by digest and what it found."""

    report_sha256: str
    #: absent in scan results signed before approvals bound the spec
    spec_sha256: str | None = None
    fail_on: str
    counts: dict[str, int]
    scanned_at: str | None
    tool_version: str | None


class ScanResultV01(_OpenPredicate):
    """in-toto test-result v0.1 over the scan report (``specbundle_unscanned``: no scan ran)."""

    PREDICATE_TYPE = SCAN_RESULT

    result: Literal["PASSED", "WARNED", "FAILED"]
    configuration: list[ResourceDescriptor]
    passed_tests: list[str]
    warned_tests: list[str]
    failed_tests: list[str]
    time_created: str | None = None
    specbundle_scan: ScanSummary | None = Field(default=None, alias="specbundle_scan")
    specbundle_unscanned: bool | None = Field(default=None, alias="specbundle_unscanned")


class Verifier(OpenModel):
    """VSA ``verifier``."""

    id: str
    version: dict[str, str] | None = None


class PolicyRef(OpenModel):
    """VSA ``policy``."""

    uri: str
    digest: dict[str, str] | None = None


class CriterionResult(StrictModel):
    """One admission criterion as signed (figures as decimal strings)."""

    name: str
    passed: bool
    measured: JsonValue
    threshold: JsonValue


class AdmissionDetails(StrictModel):
    """specbundle's part of an admission VSA: why, and which signed version it judged."""

    reasons: list[str] | None = None
    outcome: Literal["admitted", "rejected", "inconclusive"] | None = None
    manifest_sha256: str | None = None
    version: int | None = None
    criteria: list[CriterionResult] | None = None


class VerificationSummaryV1(_OpenPredicate):
    """SLSA VSA v1: the admission decision."""

    PREDICATE_TYPE = SLSA_VSA_V1

    verifier: Verifier
    time_verified: str
    resource_uri: str
    policy: PolicyRef
    input_attestations: list[ResourceDescriptor] | None = None
    verification_result: Literal["PASSED", "FAILED"]
    verified_levels: list[str]
    specbundle: AdmissionDetails | None = None

    def signed_time(self) -> str | None:
        """``timeVerified``."""
        return self.time_verified


class OmsSerialization(OpenModel):
    """OMS ``serialization`` (wire names are snake_case)."""

    method: str
    hash_type: str = Field(alias="hash_type")
    allow_symlinks: bool = Field(default=False, alias="allow_symlinks")
    ignore_paths: list[str] = Field(default_factory=list, alias="ignore_paths")


class OmsResource(OpenModel):
    """One OMS resource: a file (or a shard) and its digest."""

    name: str
    algorithm: str
    digest: str


class OmsSignatureV1(_OpenPredicate):
    """OpenSSF Model Signing v1.0 predicate (``model.sig``)."""

    PREDICATE_TYPE = OMS_SIGNATURE_V1

    serialization: OmsSerialization
    resources: list[OmsResource]
