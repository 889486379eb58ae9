"""Evidence produced after signing: benchmark runs, admissions, manifests, engine images.

These links are optional until produced (a bundle not yet benchmarked is ``absent``, not
broken), but anything present must verify: a report whose digest differs from the one a
signed statement names, or an image archive that no longer hashes right, fails the chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specbundle.attest import BENCH_EVIDENCE_V1, SLSA_VSA_V1, parse_predicate
from specbundle.attest.models import BenchEvidenceV1
from specbundle.audit.model import AttestationAudit, BenchAudit, ImageAudit, Link, RenderAudit
from specbundle.bench.report import BenchReport
from specbundle.digest import hash_file, sha256_bytes
from specbundle.errors import SpecbundleError
from specbundle.image_record import read_image_records
from specbundle.mirror import Mirror, model_dir_name
from specbundle.record import BundleRecord
from specbundle.render.paths import model_aliases
from specbundle.strict import MalformedDocument, loads_json, read_mirror_file

__all__ = ["admissions", "bench_audits", "image_audits", "render_audits"]


def _evidence_for(ptype: str, pred: Any) -> BenchEvidenceV1 | None:
    """A bench-evidence predicate through its typed model, else None (another type, or a
    shape that does not fit: such a line links nothing, whatever strings it carries)."""
    if ptype != BENCH_EVIDENCE_V1:
        return None
    try:
        got = parse_predicate(ptype, pred)
    except SpecbundleError:
        return None
    return got if isinstance(got, BenchEvidenceV1) else None


def _figures(report: BenchReport) -> dict[str, Any]:
    level = report.at_p95 or (report.levels[-1] if report.levels else None)
    if level is None:
        return {}
    acc = level.acceptance
    return {"concurrency": level.concurrency,
            "throughput_ratio": level.ratio.ratio if level.ratio else None,
            "ratio_low": level.ratio.low if level.ratio else None,
            "ratio_high": level.ratio.high if level.ratio else None,
            "alpha": acc.alpha, "c": level.c_measured if level.c_measured is not None
            else level.c_black_box, "acceptance_length": acc.mean_acceptance_length}


def bench_audits(
    mirror: Mirror, rec: BundleRecord, attestations: Sequence[AttestationAudit],
    raw_predicates: Sequence[tuple[str, Any]],
) -> tuple[BenchAudit, ...]:
    """Every stored run with its key figures; linked to any bench-evidence statement."""
    out: list[BenchAudit] = []
    for path in sorted((mirror.bundle_dir(rec.name) / "bench").glob("*/report.json")):
        try:
            data = read_mirror_file(path)
        except (MalformedDocument, OSError):
            continue  # a planted link, FIFO or device is no report
        digest = sha256_bytes(data)
        run_id = path.parent.name
        typed = [(a, ev) for a, (ptype, pred) in zip(attestations, raw_predicates, strict=True)
                 if (ev := _evidence_for(ptype, pred)) is not None]
        # a statement is about this run if it names the run or the report's digest; it vouches
        # for the bytes only through the digest its report field signs
        evidence = [a for a, ev in typed if ev.run_id == run_id or ev.report.sha256 == digest]
        try:
            report = BenchReport.from_json(loads_json(data, what="bench report"))
        except (SpecbundleError, ValueError, KeyError, TypeError) as err:
            out.append(BenchAudit(run_id, "", "", digest, None, None, None, None, None, None,
                                  None, Link(f"bench {run_id}", "failed", f"unreadable: {err}")))
            continue
        named = [a for a, ev in typed if a in evidence and ev.report.sha256 == digest]
        if named and any(a.link.status == "ok" for a in named):
            link = Link(f"bench {run_id}", "ok", "report digest named by a verified statement")
        elif evidence and not named:
            link = Link(f"bench {run_id}", "failed",
                        f"report.json changed: digest {digest} is not the one signed")
        elif named:
            link = Link(f"bench {run_id}", named[0].link.status, named[0].link.detail)
        else:
            link = Link(f"bench {run_id}", "absent", "no signed bench-evidence statement yet")
        figs = _figures(report)
        out.append(BenchAudit(run_id, report.engine, report.created, digest,
                              figs.get("concurrency"), figs.get("throughput_ratio"),
                              figs.get("ratio_low"), figs.get("ratio_high"), figs.get("alpha"),
                              figs.get("c"), figs.get("acceptance_length"), link))
    return tuple(out)


def admissions(attestations: Sequence[AttestationAudit]) -> tuple[dict[str, Any], ...]:
    """Admission decisions (SLSA VSAs) with who signed them and whether they verify."""
    return tuple({"line": a.line, "result": a.summary.get("result"), "time": a.time,
                  "signers": list(a.signers), "signer_names": list(a.signer_names),
                  "policy": a.summary.get("policy"), "status": a.link.status,
                  "outcome": a.summary.get("outcome"), "reasons": a.summary.get("reasons"),
                  "detail": a.link.detail}
                 for a in attestations if a.predicate_type == SLSA_VSA_V1)


def _alias_links(mirror: Mirror, rec: BundleRecord) -> tuple[dict[str, Path], list[Link]]:
    """The neutral model aliases rendered manifests use, and whether each points right."""
    target, draft = model_aliases(mirror.root, rec.name, has_draft=rec.draft is not None)
    found: dict[str, Path] = {}
    links: list[Link] = []
    for role, link, art in (("target", target, rec.target), ("draft", draft, rec.draft)):
        if link is None or art is None or not link.is_symlink():
            continue
        found[role] = link
        snap = mirror.artifact_dir(art)
        if link.resolve() != snap.resolve():
            links.append(Link(f"{role} manifest alias", "failed",
                              f"{link} points to {link.resolve()}, not {art.repo}@{art.commit}"))
    return found, links


def render_audits(mirror: Mirror, rec: BundleRecord) -> tuple[tuple[RenderAudit, ...], list[Link]]:
    """Rendered manifests, whether they use this draft/target and pin the image; alias links."""
    base = mirror.bundle_dir(rec.name) / "render"
    images = {e: r.pinned_ref for e, r in _safe_images(mirror, rec.name).items()}
    aliases, links = _alias_links(mirror, rec)
    out: list[RenderAudit] = []
    for path in sorted(p for p in base.rglob("*") if p.is_file() and not p.is_symlink()):
        try:
            data = read_mirror_file(path)
        except (MalformedDocument, OSError):
            continue
        text = data.decode("utf-8", "replace")
        rel = path.relative_to(base).as_posix()

        def refers(role: str, repo: str, commit: str, text: str = text) -> bool:
            alias = aliases.get(role)
            return (commit in text or model_dir_name(repo) in text
                    or (alias is not None and str(alias) in text))

        engine = rel.split("/", 1)[0]
        out.append(RenderAudit(
            rel, sha256_bytes(data),
            references_draft=rec.draft is not None
            and refers("draft", rec.draft.repo, rec.draft.commit),
            references_target=refers("target", rec.target.repo, rec.target.commit),
            pinned_image=(images[engine] in text) if engine in images else None))
    return tuple(out), links


def _safe_images(mirror: Mirror, name: str) -> dict[str, Any]:
    try:
        return dict(read_image_records(mirror, name))
    except SpecbundleError:
        return {}


def image_audits(mirror: Mirror, rec: BundleRecord, *, rehash: bool) -> tuple[ImageAudit, ...]:
    """Engine images: archive present, hashing right, and bound to the bundle record."""
    try:
        records = read_image_records(mirror, rec.name)
    except SpecbundleError as err:
        return (ImageAudit("?", "", "", None, "", Link("images", "failed", err.message)),)
    out: list[ImageAudit] = []
    for engine, ir in sorted(records.items()):
        name = f"{engine} image"
        if not {ir.archive_sha256, ir.record_sha256} <= set(rec.extra_blobs):
            link = Link(name, "failed", "image record is not bound to the bundle record")
        elif not mirror.has_object(ir.archive_sha256, ir.archive_size):
            link = Link(name, "missing", f"archive {ir.archive_sha256} is not in the mirror")
        elif rehash and hash_file(mirror.object_path(ir.archive_sha256)) != ir.archive_sha256:
            link = Link(name, "failed", "the stored archive no longer hashes to its digest")
        else:
            link = Link(name, "ok", f"{ir.pinned_ref}")
        out.append(ImageAudit(engine, ir.reference, ir.image_id, ir.repo_digest,
                              ir.archive_sha256, link))
    return tuple(out)
