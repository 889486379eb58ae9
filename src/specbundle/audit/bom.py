"""CycloneDX 1.6 ML-BOM for one bundle, validated against the official schema offline.

``cyclonedx-python-lib`` models neither ``modelCard`` nor ``declarations`` yet, so the JSON is
built here and validated with the library's strict schema validator (schemas ship inside the
package: no network). Target and draft are ``machine-learning-model`` components with purl
``pkg:huggingface/<org>/<name>@<commit>``, every file as a nested ``file`` component, the
draft's ``pedigree.ancestors`` naming its target, and the benchmark figures in the draft's
``modelCard.quantitativeAnalysis.performanceMetrics``. The serial number is derived from the
bundle's content, so exporting the same evidence twice gives the same BOM identity.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from cyclonedx.schema import SchemaVersion
from cyclonedx.spdx import fixup_id
from cyclonedx.validation.json import JsonStrictValidator

from specbundle import __version__
from specbundle._fsutil import canonical_json
from specbundle.audit.model import ArtifactAudit, BenchAudit, BundleAudit
from specbundle.errors import SpecbundleError

__all__ = ["bundle_bom", "validate_bom"]

_NS = uuid.UUID("6f1d3c1e-2b7a-4c55-9a0e-5bd1c0a1e0f7")


def _sha(value: str) -> list[dict[str, str]]:
    return [{"alg": "SHA-256", "content": value}]


def _license(art: ArtifactAudit) -> list[dict[str, Any]]:
    if not art.license:
        return []
    spdx = fixup_id(art.license)
    return [{"license": {"id": spdx} if spdx else {"name": art.license}}]


def _ref(art: ArtifactAudit) -> str:
    return f"{art.role}:{art.repo}@{art.commit}"


def _external(art: ArtifactAudit, bundle: str) -> list[dict[str, Any]]:
    refs: list[dict[str, Any]] = []
    if art.source == "hf":
        base = (art.endpoint or "https://huggingface.co").rstrip("/")
        refs.append({"type": "distribution", "url": f"{base}/{art.repo}/tree/{art.commit}"})
        if any(f.path == "README.md" for f in art.files):
            refs.append({"type": "model-card",
                         "url": f"{base}/{art.repo}/blob/{art.commit}/README.md"})
    else:
        refs.append({"type": "distribution", "url": "file://" + art.source.removeprefix("dir:")})
    if art.model_sig.status != "missing":
        refs.append({"type": "digital-signature",
                     "url": f"bundles/{bundle}/sign/{art.role}/model.sig",
                     "comment": f"OMS v1.0 signature: {art.model_sig.status}"})
    return refs


def _primary_hash(art: ArtifactAudit) -> list[dict[str, str]]:
    weights = [f for f in art.files if f.path.endswith((".gguf", ".safetensors"))]
    return _sha(weights[0].sha256) if weights else []


def _metrics(runs: Sequence[BenchAudit]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in runs:
        where = f"run {r.run_id}, engine {r.engine}, concurrency {r.concurrency}"
        if r.throughput_ratio is not None:
            m: dict[str, Any] = {"type": "throughput-ratio-spec-vs-base",
                                 "value": f"{r.throughput_ratio:.4f}", "slice": where}
            if r.ratio_low is not None and r.ratio_high is not None:
                m["confidenceInterval"] = {"lowerBound": f"{r.ratio_low:.4f}",
                                           "upperBound": f"{r.ratio_high:.4f}"}
            out.append(m)
        for name, val in (("acceptance-rate-alpha", r.alpha), ("draft-cost-ratio-c", r.c),
                          ("mean-acceptance-length", r.acceptance_length)):
            if val is not None:
                out.append({"type": name, "value": f"{val:.4f}", "slice": where})
    return out


def _component(ba: BundleAudit, art: ArtifactAudit) -> dict[str, Any]:
    org, _, short = art.repo.partition("/")
    comp: dict[str, Any] = {
        "type": "machine-learning-model", "bom-ref": _ref(art), "group": org, "name": short,
        "version": art.commit, "purl": f"pkg:huggingface/{art.repo}@{art.commit}",
        "hashes": _primary_hash(art), "licenses": _license(art),
        "externalReferences": _external(art, ba.name),
        "properties": [
            {"name": "specbundle:role", "value": art.role},
            {"name": "specbundle:requested-revision", "value": art.requested_revision},
            {"name": "specbundle:commit-kind", "value": art.commit_kind},
            {"name": "specbundle:source", "value": art.source},
            {"name": "specbundle:oms-root-sha256", "value": art.oms_root},
            {"name": "specbundle:model-sig", "value": art.model_sig.status},
        ],
        "components": [{"type": "file", "bom-ref": f"{_ref(art)}#{f.path}", "name": f.path,
                        "hashes": _sha(f.sha256),
                        "properties": [{"name": "specbundle:size", "value": str(f.size)}]}
                       for f in art.files],
        "modelCard": {"modelParameters": {"task": "text-generation"}},
    }
    if ba.scan.present:
        comp["properties"].append({"name": "specbundle:scan", "value": ba.scan.link.status})
    if art.role == "draft":
        target = next(a for a in ba.artifacts if a.role == "target")
        torg, _, tshort = target.repo.partition("/")
        comp["pedigree"] = {"ancestors": [{
            "type": "machine-learning-model", "group": torg, "name": tshort,
            "version": target.commit, "purl": f"pkg:huggingface/{target.repo}@{target.commit}",
        }], "notes": f"speculative-decoding draft ({ba.method}) bound to its target"}
        metrics = _metrics(ba.bench_runs)
        if metrics:
            comp["modelCard"]["quantitativeAnalysis"] = {"performanceMetrics": metrics}
    for key in ("hashes", "licenses"):
        if not comp[key]:
            del comp[key]
    return comp


def _images(ba: BundleAudit) -> list[dict[str, Any]]:
    return [{"type": "container", "bom-ref": f"image:{i.engine}", "name": i.reference,
             "version": i.image_id, "hashes": _sha(i.archive_sha256),
             "properties": [{"name": "specbundle:engine", "value": i.engine},
                            {"name": "specbundle:repo-digest", "value": i.repo_digest or "-"}]}
            for i in ba.images]


def validate_bom(doc: dict[str, Any]) -> None:
    """Raise :class:`SpecbundleError` unless ``doc`` is a valid CycloneDX 1.6 JSON BOM."""
    err = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(doc))
    if err is not None:
        detail = getattr(err.data, "message", None) or str(err).splitlines()[0]
        raise SpecbundleError(f"generated ML-BOM does not validate against CycloneDX 1.6: "
                              f"{detail}")


def bundle_bom(ba: BundleAudit, *, timestamp: str) -> dict[str, Any]:
    """The validated ML-BOM of an audited bundle."""
    arts = [_component(ba, a) for a in ba.artifacts]
    images = _images(ba)
    bundle_ref = f"bundle:{ba.name}"
    draft = next((a for a in ba.artifacts if a.role == "draft"), None)
    target = next(a for a in ba.artifacts if a.role == "target")
    deps = [{"ref": bundle_ref, "dependsOn": [c["bom-ref"] for c in arts + images]},
            {"ref": _ref(target), "dependsOn": []}]
    if draft is not None:
        deps.append({"ref": _ref(draft), "dependsOn": [_ref(target)]})
    deps += [{"ref": c["bom-ref"], "dependsOn": []} for c in images]
    identity = canonical_json([ba.name, [(a.repo, a.commit, a.oms_root) for a in ba.artifacts],
                               [b.sha256 for b in ba.bench_runs], ba.scan.sha256])
    doc: dict[str, Any] = {
        "$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json",
        "bomFormat": "CycloneDX", "specVersion": "1.6",
        "serialNumber": f"urn:uuid:{uuid.uuid5(_NS, identity.hex())}", "version": 1,
        "metadata": {
            "timestamp": timestamp,
            "tools": {"components": [{"type": "application", "name": "specbundle",
                                      "version": __version__}]},
            "component": {"type": "application", "bom-ref": bundle_ref, "name": ba.name,
                          "description": f"speculative-decoding bundle ({ba.method})"},
            "properties": [{"name": "specbundle:chain", "value": "broken" if ba.broken
                            else "verified"}],
        },
        "components": arts + images,
        "dependencies": deps,
    }
    validate_bom(doc)
    return doc
