"""Attestation machinery shared by sign, verify, admit and audit: keys, DSSE, in-toto, the log.

Everything signed is canonical JSON (``specbundle._fsutil.canonical_json``) inside a DSSE
envelope; verification checks the exact signed bytes and only then parses them. Keys are
named by fingerprint = sha256 hex of the SubjectPublicKeyInfo DER.

Public API (stable; other stages code against it)::

    # keys                                                     (specbundle.attest.keys)
    generate_key("ecdsa-p256" | "ecdsa-p384" | "ecdsa-p521" | "ed25519") -> SigningKey
    load_signing_key(path, passphrase: bytes | None = None) -> SigningKey   # PEM/DER PKCS#8, SEC1
    load_public_key(path) -> PublicKey;  public_key_from_pem(bytes) -> PublicKey
    write_private_key(key, path, passphrase=None)   # creates 0600, refuses to overwrite
    write_public_key(key.public, path)
    SigningKey.fingerprint / .algorithm / .public / .sign(data)
    PublicKey.fingerprint / .pem / .oms_hint / .verify(sig, data)

    # DSSE                                                     (specbundle.attest.dsse)
    pae(payload_type, body) -> bytes
    sign_envelope(payload, payload_type, keys) -> Envelope   # keyid = key fingerprint
    Envelope.to_json() / Envelope.from_json(obj) / Envelope.to_line()
    check_envelope(env, trusted_keys) -> EnvelopeCheck(payload, payload_type, signers, problems)
    verify_envelope(env, trusted_keys) -> EnvelopeCheck      # raises unless >= 1 trusted signer

    # in-toto Statement v1                                     (specbundle.attest.statement)
    artifact_subjects(repo, oms_root_digest, commit, commit_kind) -> (Subject, Subject)
    Statement.build(subjects, predicate_type, predicate) -> Statement   # no floats allowed
    sign_statement(statement, keys) -> Envelope
    check_statement(envelope, trusted_keys) -> CheckedStatement(.statement, .signers, .check)
    parse_statement(payload_bytes) -> Statement;  Statement.time -> datetime | None

    # typed predicates: one frozen model per type and version   (specbundle.attest.models)
    Statement.of(subjects, PairBindingV1(...)) -> Statement;  statement.typed -> model
    statement.typed_as(PairBindingV1) -> PairBindingV1   # any other type: WrongPredicateType
    parse_predicate(predicate_type, predicate) -> PredicateModel; MODEL_BY_PREDICATE

    # predicate types                                          (specbundle.attest.predicates)
    SLSA_PROVENANCE_V1 (fetch provenance), SCAN_RESULT (in-toto test-result v0.1),
    PAIR_BINDING_V1, BENCH_EVIDENCE_V1, SLSA_VSA_V1 (admission), TRANSFER_INDEX_V1,
    OMS_SIGNATURE_V1, REVOCATION_V1 (key revocation, event log); PREDICATE_BY_KIND /
    KIND_BY_PREDICATE map policy kind names
    ("fetch-provenance", "scan-result", "pair-binding", "bench-evidence", "admission",
    "transfer-index") to URIs. Time field: provenance runDetails.metadata.finishedOn,
    VSA timeVerified, every other predicate ``timeCreated`` (RFC 3339, UTC).

    # bundle manifest: one signed statement per bundle version (specbundle.attest.manifest)
    build_manifest(record, roots, version=, previous=, scan_report_sha256=, images=, now=)
    parse_manifest(statement, payload) -> BundleManifest   # call only on verified payloads
    BUNDLE_MANIFEST_V1; layout (versions/<N>/, current) lives in specbundle.mirror.versions

    # attestation log  bundles/<name>/attestations.jsonl      (specbundle.attest.log)
    append_attestation(mirror, bundle, envelope) -> line_no   # hold mirror.lock()
    read_attestations(mirror, bundle, problems=None) -> tuple[Envelope, ...]

    # OMS model.sig (OpenSSF Model Signing v1.0)               (specbundle.attest.oms)
    OmsManifest(model_name, resources, allow_symlinks, ignore_paths).root_digest
    build_model_sig(manifest, key) -> bytes;  open_model_sig(data, public_key) -> OmsManifest
    # certificate method: key.with_chain((leaf, *issuers)) signs; the verifier holds anchors
    open_model_sig_chain(data, ChainTrust(anchors, crls, identities), at=) -> (OmsManifest,
        CertIdentity);  verify_chain(chain, trust, at) -> CertIdentity  (specbundle.attest.certs)

Example, the admission VSA the admit stage signs::

    from specbundle import attest
    subjects = attest.artifact_subjects(rec.target.repo, root, rec.target.commit)
    st = attest.Statement.build(subjects, attest.SLSA_VSA_V1, {
        "verifier": {"id": "https://specbundle.dev/admit"}, "timeVerified": now,
        "resourceUri": "...", "policy": {"uri": "...", "digest": {"sha256": "..."}},
        "inputAttestations": [...], "verificationResult": "PASSED",
        "verifiedLevels": ["SLSA_BUILD_LEVEL_UNEVALUATED"]})
    with mirror.lock():
        attest.append_attestation(mirror, rec.name, attest.sign_statement(st, [key]))
"""

from specbundle.attest.certs import (
    CLOCK_SKEW,
    CertIdentity,
    ChainTrust,
    IdentityRule,
    UntrustedCertificate,
    load_certificates,
    load_crls,
    verify_chain,
)
from specbundle.attest.dsse import (
    INTOTO_PAYLOAD_TYPE,
    Envelope,
    EnvelopeCheck,
    MalformedEnvelope,
    Signature,
    check_envelope,
    pae,
    sign_envelope,
    verify_envelope,
)
from specbundle.attest.keys import (
    KeyAlgorithm,
    PublicKey,
    SigningKey,
    generate_key,
    load_public_key,
    load_signing_key,
    public_key_from_pem,
    write_private_key,
    write_public_key,
)
from specbundle.attest.log import (
    ATTESTATIONS_FILE,
    append_attestation,
    append_lines,
    attestations_path,
    check_attestation_log,
    read_attestations,
)
from specbundle.attest.models import (
    MODEL_BY_PREDICATE,
    PredicateModel,
    WrongPredicateType,
    parse_predicate,
    statement_time,
)
from specbundle.attest.oms import (
    OmsManifest,
    OtherKey,
    Resource,
    build_model_sig,
    model_sig_chain,
    open_model_sig,
    open_model_sig_chain,
)
from specbundle.attest.predicates import (
    BENCH_EVIDENCE_V1,
    BUNDLE_MANIFEST_V1,
    FETCH_BUILD_TYPE_V1,
    KIND_BY_PREDICATE,
    LOG_CHECKPOINT_V1,
    OMS_SIGNATURE_V1,
    PAIR_BINDING_V1,
    PREDICATE_BY_KIND,
    REVOCATION_V1,
    SCAN_RESULT,
    SLSA_PROVENANCE_V1,
    SLSA_VSA_V1,
    SPECBUNDLE_URI,
    TRANSFER_INDEX_V1,
    TUNE_SCHEDULE_V1,
    parse_time,
)
from specbundle.attest.statement import (
    STATEMENT_TYPE,
    CheckedStatement,
    Statement,
    Subject,
    artifact_subjects,
    check_statement,
    parse_statement,
    sign_statement,
)

__all__ = [
    "ATTESTATIONS_FILE",
    "BENCH_EVIDENCE_V1",
    "BUNDLE_MANIFEST_V1",
    "CLOCK_SKEW",
    "FETCH_BUILD_TYPE_V1",
    "INTOTO_PAYLOAD_TYPE",
    "KIND_BY_PREDICATE",
    "LOG_CHECKPOINT_V1",
    "MODEL_BY_PREDICATE",
    "OMS_SIGNATURE_V1",
    "PAIR_BINDING_V1",
    "PREDICATE_BY_KIND",
    "REVOCATION_V1",
    "SCAN_RESULT",
    "SLSA_PROVENANCE_V1",
    "SLSA_VSA_V1",
    "SPECBUNDLE_URI",
    "STATEMENT_TYPE",
    "TRANSFER_INDEX_V1",
    "TUNE_SCHEDULE_V1",
    "CertIdentity",
    "ChainTrust",
    "CheckedStatement",
    "Envelope",
    "EnvelopeCheck",
    "IdentityRule",
    "KeyAlgorithm",
    "MalformedEnvelope",
    "OmsManifest",
    "OtherKey",
    "PredicateModel",
    "PublicKey",
    "Resource",
    "Signature",
    "SigningKey",
    "Statement",
    "Subject",
    "UntrustedCertificate",
    "WrongPredicateType",
    "append_attestation",
    "append_lines",
    "artifact_subjects",
    "attestations_path",
    "build_model_sig",
    "check_attestation_log",
    "check_envelope",
    "check_statement",
    "generate_key",
    "load_certificates",
    "load_crls",
    "load_public_key",
    "load_signing_key",
    "model_sig_chain",
    "open_model_sig",
    "open_model_sig_chain",
    "pae",
    "parse_predicate",
    "parse_statement",
    "parse_time",
    "public_key_from_pem",
    "read_attestations",
    "sign_envelope",
    "sign_statement",
    "statement_time",
    "verify_chain",
    "verify_envelope",
    "write_private_key",
    "write_public_key",
]
