"""Admission: verify, benchmark, gate and sign the decision (isolated side, no network).

``admit_bundle(verified, keys=[...])`` takes the value :func:`specbundle.verify.verify_bundle`
returned (a bundle that did not verify is refused with :func:`reject_unverified`, signed
too), runs :func:`specbundle.bench.run_bench` on it, then the pure gate
(:func:`.decision.evaluate`) over the report and the spec's ``admission`` thresholds. The
decision is signed as an SLSA Verification Summary Attestation (policy digest, input
attestations, the bench report's digest, PASSED/FAILED) into the bundle's attestation log;
only a PASSED decision marks the bundle admitted (``bundles/<name>/admit/status.json``).
A rejection raises :class:`Rejected` (an ``AdmissionRejected``, exit 5) listing every reason.
"""

from specbundle.admit.api import (
    STATUS_FILE,
    VERIFIER_ID,
    Decision,
    Rejected,
    admit_bundle,
    read_status,
    reject_unverified,
)
from specbundle.admit.decision import Criterion, GateResult, evaluate

__all__ = ["STATUS_FILE", "VERIFIER_ID", "Criterion", "Decision", "GateResult", "Rejected",
           "admit_bundle", "evaluate", "read_status", "reject_unverified"]
