"""The three statements ``specbundle sign`` makes about a pulled bundle.

* fetch provenance (SLSA provenance v1 shape): the pull is the "build"; endpoint, repo,
  requested and resolved revision, per-file sha256 with the hub's LFS digest, time, tool;
* scan result (in-toto test-result v0.1 shape) naming the scan report by its sha256;
* pair binding: target root, draft root, tokenizer digests, method and speculative settings,
  so a draft cannot be swapped under an approved target.

Pure builders: values in, :class:`~specbundle.attest.Statement` out; signing happens in
:mod:`specbundle.sign`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from specbundle import __version__
from specbundle.attest import FETCH_BUILD_TYPE_V1, SPECBUNDLE_URI, Statement
from specbundle.attest.manifest import spec_sha256
from specbundle.attest.mirrored import subjects_for
from specbundle.attest.models import (
    FetchProvenanceV1,
    PairBindingV1,
    PairSide,
    ResourceDescriptor,
    ScanResultV01,
    ScanSummary,
)
from specbundle.attest.models.own import PairTokenizer
from specbundle.attest.models.standard import (
    BuildDefinition,
    Builder,
    FetchInternal,
    RunDetails,
    RunMetadata,
)
from specbundle.attest.predicates import SCAN_CONFIGURATION_V1
from specbundle.record import ArtifactRecord, BundleRecord
from specbundle.scan.findings import ScanReport

__all__ = [
    "TOKENIZER_FILES",
    "fetch_provenance",
    "jsonable",
    "pair_binding",
    "scan_result",
]

#: Files whose digests decide whether draft and target speak the same tokens.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                   "special_tokens_map.json", "vocab.json", "merges.txt")


def jsonable(value: Any) -> Any:
    """Floats become strings (signed JSON carries no floats); containers recurse."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def fetch_provenance(rec: BundleRecord, art: ArtifactRecord, root: str) -> Statement:
    """SLSA provenance v1 for how one artifact entered the mirror."""
    spec_art = rec.spec.get(art.role, {}) or {}
    location = f"{(art.endpoint or 'https://huggingface.co').rstrip('/')}/{art.repo}" \
        if art.source == "hf" else art.source
    commit_key = "gitCommit" if art.commit_kind == "git" else "specbundleContentCommit"
    files = []
    for f in art.files:
        ann = {k: v for k, v in (("hubLfsSha256", f.lfs_sha256), ("gitBlobId", f.git_blob_id))
               if v}
        files.append(ResourceDescriptor(name=f.path, digest={"sha256": f.sha256},
                                        annotations={"size": f.size, **ann}))
    predicate = FetchProvenanceV1(
        build_definition=BuildDefinition(
            build_type=FETCH_BUILD_TYPE_V1,
            external_parameters=jsonable({
                "repo": art.repo, "revision": art.requested_revision, "source": art.source,
                "endpoint": art.endpoint, "allowPatterns": spec_art.get("allow_patterns"),
                "allowPickle": spec_art.get("allow_pickle", False),
                "allowRemoteCode": spec_art.get("allow_remote_code", False),
            }),
            internal_parameters=FetchInternal(bundle=rec.name, role=art.role),
            resolved_dependencies=[
                ResourceDescriptor(
                    uri=location, digest={commit_key: art.commit},
                    annotations={"requestedRevision": art.requested_revision,
                                 # the publisher's own signature, verified by pull
                                 **({"publisher": art.publisher.to_json()}
                                    if art.publisher else {})}),
                *files,
            ],
        ),
        run_details=RunDetails(
            builder=Builder(id=f"{SPECBUNDLE_URI}/pull", version={"specbundle": rec.tool_version}),
            metadata=RunMetadata(invocation_id=f"{rec.name}/{art.role}/{art.commit}",
                                 started_on=art.pulled_at or rec.created,
                                 finished_on=art.pulled_at or rec.created),
            byproducts=[ResourceDescriptor(name="oms-root-digest", digest={"sha256": root}),
                        *(ResourceDescriptor(name=f"skipped:{s.path}",
                                             annotations={"reason": s.reason})
                          for s in art.skipped)],
        ),
    )
    return Statement.of(subjects_for(art, root), predicate)


def scan_result(
    rec: BundleRecord, roots: Mapping[str, str], report: ScanReport | None, report_sha256: str,
    now: str,
) -> Statement:
    """test-result v0.1 over the scan report; ``report=None`` records an explicit no-scan."""
    subjects = [s for art in rec.artifacts for s in subjects_for(art, roots[art.role])]
    if report is None:
        return Statement.of(subjects, ScanResultV01(
            result="FAILED", configuration=[], passed_tests=[], warned_tests=[],
            failed_tests=["scan:not-run"], time_created=now, specbundle_unscanned=True))
    blocking = set(report.blocking())
    failed = sorted({f"{f.check_id}:{f.role or '-'}:{f.file or '-'}" for f in blocking}
                    | {f"crashed:{c}" for c in report.crashed_checks})
    warned = sorted({f"{f.check_id}:{f.role or '-'}:{f.file or '-'}"
                     for f in report.findings if f not in blocking})
    result: Literal["PASSED", "WARNED", "FAILED"] = (
        "FAILED" if report.blocked else ("WARNED" if warned else "PASSED"))
    return Statement.of(subjects, ScanResultV01(
        result=result,
        configuration=[ResourceDescriptor(uri=SCAN_CONFIGURATION_V1, name="scan/report.json",
                                          digest={"sha256": report_sha256})],
        passed_tests=[] if failed or warned else ["scan:all-checks"],
        warned_tests=warned, failed_tests=failed, time_created=now,
        specbundle_scan=ScanSummary(
            report_sha256=report_sha256, spec_sha256=spec_sha256(rec.spec),
            fail_on=report.fail_on.value, counts=report.counts(),
            scanned_at=report.scanned_at, tool_version=report.tool_version)))


def _tokenizer_digests(art: ArtifactRecord | None) -> dict[str, str]:
    if art is None:
        return {}
    return {f.path: f.sha256 for f in art.files if f.path.rsplit("/", 1)[-1] in TOKENIZER_FILES}


def pair_binding(rec: BundleRecord, roots: Mapping[str, str], now: str) -> Statement:
    """One statement binding the exact target and draft bytes to the speculative settings."""
    tok_t, tok_d = _tokenizer_digests(rec.target), _tokenizer_digests(rec.draft)
    main_tok = next((tok_t[p] for p in ("tokenizer.json", "tokenizer.model") if p in tok_t), None)

    def side(art: ArtifactRecord | None) -> PairSide | None:
        if art is None:
            return None
        return PairSide(repo=art.repo, commit=art.commit, commit_kind=art.commit_kind,
                        root_digest=roots[art.role],
                        gguf=(rec.spec.get(art.role) or {}).get("gguf_file"))

    spec_spec = rec.spec.get("speculative", {}) or {}
    predicate = PairBindingV1(
        bundle=rec.name, method=spec_spec.get("method"),
        target=side(rec.target), draft=side(rec.draft),
        tokenizer=PairTokenizer(digest=main_tok, target=tok_t, draft=tok_d,
                                draft_matches_target=bool(tok_d) and all(
                                    tok_t.get(p) == d for p, d in tok_d.items())),
        speculative=jsonable(spec_spec), spec_sha256=spec_sha256(rec.spec),
        time_created=now, tool_version=__version__,
    )
    subjects = [s for art in rec.artifacts for s in subjects_for(art, roots[art.role])]
    return Statement.of(subjects, predicate)
