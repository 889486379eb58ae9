"""Versioned predicate-type URIs and where each one keeps its signed time.

Standard shapes keep their standard, versioned URIs (SLSA provenance v1, in-toto test-result
v0.1, SLSA VSA v1) so third-party tools understand them; what only specbundle defines lives
under ``https://specbundle.dev/attestation/<kind>/v<N>``. A new version gets a new constant
and the old one stays readable. Trust policies name statements by the short *kind*.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

__all__ = [
    "BENCH_EVIDENCE_V1",
    "BUNDLE_MANIFEST_V1",
    "FETCH_BUILD_TYPE_V1",
    "KIND_BY_PREDICATE",
    "LOG_CHECKPOINT_V1",
    "OMS_SIGNATURE_V1",
    "PAIR_BINDING_V1",
    "PREDICATE_BY_KIND",
    "REVOCATION_V1",
    "SCAN_CONFIGURATION_V1",
    "SCAN_RESULT",
    "SLSA_PROVENANCE_V1",
    "SLSA_VSA_V1",
    "SPECBUNDLE_URI",
    "TRANSFER_INDEX_V1",
    "TUNE_SCHEDULE_V1",
    "parse_time",
]

SPECBUNDLE_URI = "https://specbundle.dev"

OMS_SIGNATURE_V1 = "https://model_signing/signature/v1.0"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
SCAN_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
SLSA_VSA_V1 = "https://slsa.dev/verification_summary/v1"
PAIR_BINDING_V1 = f"{SPECBUNDLE_URI}/attestation/pair-binding/v1"
BENCH_EVIDENCE_V1 = f"{SPECBUNDLE_URI}/attestation/bench-evidence/v1"
#: ``specbundle tune``: the measured K-per-concurrency schedule, by its file's digest.
TUNE_SCHEDULE_V1 = f"{SPECBUNDLE_URI}/attestation/tune-schedule/v1"
TRANSFER_INDEX_V1 = f"{SPECBUNDLE_URI}/attestation/transfer-index/v1"
#: A key revocation (recorded in the mirror's event log, not a bundle statement, so it has
#: no policy *kind*): subject = the revoked fingerprint, predicate = reason + ``timeCreated``.
REVOCATION_V1 = f"{SPECBUNDLE_URI}/attestation/revocation/v1"
#: One signed, immutable statement per bundle version (``versions/<N>/``, not the log).
BUNDLE_MANIFEST_V1 = f"{SPECBUNDLE_URI}/attestation/bundle-manifest/v1"
#: A signed event-log head (``audit/checkpoints.jsonl``, not a bundle statement).
LOG_CHECKPOINT_V1 = f"{SPECBUNDLE_URI}/attestation/log-checkpoint/v1"

#: ``buildDefinition.buildType`` of the fetch provenance (pull is the "build").
FETCH_BUILD_TYPE_V1 = f"{SPECBUNDLE_URI}/build/fetch/v1"
#: ``predicate.configuration[].uri`` marker of the scan test-result.
SCAN_CONFIGURATION_V1 = f"{SPECBUNDLE_URI}/scan/v1"

PREDICATE_BY_KIND: Mapping[str, str] = {
    "fetch-provenance": SLSA_PROVENANCE_V1,
    "scan-result": SCAN_RESULT,
    "pair-binding": PAIR_BINDING_V1,
    "bench-evidence": BENCH_EVIDENCE_V1,
    "tune-schedule": TUNE_SCHEDULE_V1,
    "admission": SLSA_VSA_V1,
    "transfer-index": TRANSFER_INDEX_V1,
}
KIND_BY_PREDICATE: Mapping[str, str] = {v: k for k, v in PREDICATE_BY_KIND.items()}


def parse_time(value: object) -> datetime | None:
    """RFC 3339 string to an aware datetime; None when absent or unparseable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)
