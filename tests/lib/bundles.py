"""Bundles in a real mirror: pulled, scan-reported and signed, or stored from placeholders."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specbundle import attest
from specbundle.digest import sha256_bytes
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.record import ArtifactRecord, BundleRecord, FileEntry
from specbundle.scan import scan_bundle
from specbundle.scan.findings import Finding, ScanReport, Severity
from specbundle.sign import sign_bundle
from specbundle.spec import dump_spec, load_spec, parse_spec
from specbundle.synth import SynthPair
from specbundle.verify import TrustPolicy, VerifiedBundle, load_policy, verify_bundle
from tests.lib.models import make_model, make_model_dir, small_pair
from tests.lib.policy import policy_doc, write_policy
from tests.lib.specs import (
    PROMPTS_FILE,
    SHORT_PROMPTS,
    bundle_doc,
    bundle_spec,
    spec_file,
    spec_text,
)


def pulled_bundle(tmp: Path, mirror: Mirror, name: str = "pair", *, seed: int = 1,
                  draft_repo: str = "org/draft", vocab: int = 64, draft_dir: Path | None = None,
                  synth: bool = False, image: str | None = None) -> BundleRecord:
    """Pull a fresh target/draft pair from folders under ``tmp`` into ``mirror`` (real pull).

    Tiny safetensors folders (draft seed ``seed + 100``; a given ``draft_dir`` is pulled
    as the draft instead); ``synth``: a small synthetic GGUF pair under a llama.cpp spec
    whose engine image is ``image``, for the tests that run it.
    """
    if synth:
        pair = small_pair(tmp / f"models-{name}", seed=seed)
        return pull_bundle(bundle_spec(pair, name, image=image), mirror, workers=2).record
    t = make_model(tmp / f"{name}-src" / "target", seed=seed, vocab=vocab)
    d = draft_dir or make_model(tmp / f"{name}-src" / "draft", seed=seed + 100)
    return pull_bundle(load_spec(spec_file(tmp, name, t, d, draft_repo=draft_repo)),
                       mirror).record


def write_scan_report(mirror: Mirror, name: str, *, blocked: bool = False) -> None:
    """Store a real (empty, or blocking) scan report where the scan stage puts it."""
    findings = (Finding("pickle.import", Severity.CRITICAL, "os.system", "x.bin", "target"),) \
        if blocked else ()
    rec = mirror.load_bundle(name)
    rep = ScanReport(subject=name, fail_on=Severity.HIGH, findings=findings,
                     scanned_at="2026-01-01T00:00:00Z", tool_version="test",
                     artifacts=tuple((a.role, f"{a.repo}@{a.commit}") for a in rec.artifacts))
    mirror.write_bundle_file(name, "scan/report.json", rep.canonical_bytes())


def pull_synth(mirror_root: Path, doc: dict[str, Any]) -> Mirror:
    """Pull a spec with ``dir:`` sources into the mirror (no hub, no network)."""
    mirror = Mirror.open(mirror_root, create=True)
    # the prompts ship beside the spec: pull copies them and the record names their digest
    spec_dir = mirror_root.parent / f"spec-{doc['metadata']['name']}"
    (spec_dir / PROMPTS_FILE).parent.mkdir(parents=True, exist_ok=True)
    (spec_dir / PROMPTS_FILE).write_bytes(SHORT_PROMPTS.encode())
    pull_bundle(parse_spec(doc), mirror, spec_dir=spec_dir)
    return mirror


@dataclass(frozen=True)
class Signed:
    """A mirror with one signed bundle, the key that signed it and a policy trusting it."""

    tmp: Path
    mirror: Mirror
    record: BundleRecord
    key: attest.SigningKey
    policy_path: Path

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def policy(self) -> TrustPolicy:
        return load_policy(self.policy_path)


def make_signed(tmp: Path, *, name: str = "pair", seed: int = 1,
                mirror: Mirror | None = None, key: attest.SigningKey | None = None,
                draft_repo: str = "org/draft", doc: dict[str, Any] | None = None) -> Signed:
    """Pull, scan and sign bundle ``name`` under ``tmp``; the policy is ``tmp/trust.yaml``.

    Tiny model folders with a written clean scan report by default; ``doc``: pull that spec
    (``dir:`` sources, the bench prompts beside it) into ``tmp/mirror`` and run the real
    scanner, trusting the key for every repo.
    """
    if doc is None:
        mirror = mirror or Mirror.open(tmp / "mirror", create=True)
        rec = pulled_bundle(tmp, mirror, name, seed=seed, draft_repo=draft_repo)
        write_scan_report(mirror, name)
        repos: tuple[str, ...] = ("org/*",)
    else:
        mirror = pull_synth(tmp / "mirror", doc)
        rec = mirror.load_bundle(name)
        scan_bundle(mirror, rec, parse_spec(doc))
        repos = ("*",)
    key = key or attest.generate_key("ecdsa-p256")
    sign_bundle(mirror, name, [key])
    path = write_policy(tmp / "trust.yaml", policy_doc({"release": key}, repos=repos))
    return Signed(tmp, mirror, rec, key, path)


def signed_bundle(root: Path, name: str, pair: SynthPair, *, levels: list[int],
                  admission: dict[str, float] | None = None) -> Signed:
    """A signed llama.cpp bench bundle over ``pair``, ready for ``admit``."""
    return make_signed(root, name=name,
                       doc=bundle_doc(name, pair, levels=levels, admission=admission))


def signed_pair(tmp: Path, mirror: Mirror, key: attest.SigningKey, name: str, *,
                target_seed: int, draft_dir: Path | None = None, vocab: int = 64) -> Path:
    """Pull, scan-report and sign bundle ``name``; a given ``draft_dir`` is shared.

    Returns the draft folder, so a second bundle can reuse the very same draft.
    """
    pulled_bundle(tmp, mirror, name, seed=target_seed, vocab=vocab, draft_dir=draft_dir)
    write_scan_report(mirror, name)
    sign_bundle(mirror, name, [key])
    return draft_dir or tmp / f"{name}-src" / "draft"


@pytest.fixture
def signed(tmp_path: Path) -> Signed:
    return make_signed(tmp_path)


# -- bundles stored with the Mirror API from placeholder files (no pull) ---------------------

GOLDEN_ROOT = "/srv/specbundle/mirror"
DIGEST = "sha256:" + "ab" * 32
TARGET_COMMIT = "1" * 40
DRAFT_COMMIT = "2" * 40

BundleFactory = Callable[..., BundleRecord]


def make_artifact(mirror: Mirror, role: str, repo: str, commit: str,
                  files: dict[str, bytes]) -> ArtifactRecord:
    """Store ``files`` as one pulled artifact at a fixed commit and date."""
    entries = []
    for path, data in sorted(files.items()):
        entries.append(FileEntry(path, len(data), mirror.put_bytes(data)))
        assert entries[-1].sha256 == sha256_bytes(data)
    art = ArtifactRecord(role=role, repo=repo, source="hf",  # type: ignore[arg-type]
                         endpoint="https://hub.example", requested_revision="main",
                         commit=commit, commit_kind="git", files=tuple(entries),
                         pulled_at="2026-11-29T00:00:00Z")
    mirror.link_snapshot(art)
    return art


def make_bundle(mirror: Mirror, doc: dict[str, Any],
                draft_config: dict[str, Any] | None = None) -> BundleRecord:
    """Store a bundle whose artifacts are tiny placeholder files (byte-stable records)."""
    spec = parse_spec(doc)
    target = make_artifact(mirror, "target", spec.target.repo, TARGET_COMMIT, {
        "config.json": json.dumps({"architectures": ["LlamaForCausalLM"]}).encode(),
        "model.gguf": b"GGUF-target", "model.safetensors": b"target-weights",
    })
    draft = None
    if spec.draft is not None:
        cfg = draft_config or {"architectures": ["LlamaForCausalLM"]}
        draft = make_artifact(mirror, "draft", spec.draft.repo, DRAFT_COMMIT, {
            "config.json": json.dumps(cfg).encode(),
            "model.gguf": b"GGUF-draft", "model.safetensors": b"draft-weights",
        })
    rec = BundleRecord(name=spec.name, spec=dump_spec(spec), target=target, draft=draft,
                       created="2026-11-29T00:00:00Z", tool_version="0.1.0")
    with mirror.lock():
        mirror.save_bundle(rec)
    return rec


PROMPTS = b'{"prompt": "one"}\n{"prompt": "two"}\n'


def pulled_with_prompts(tmp_path: Path) -> Mirror:
    """A local-dir pair pulled with a signed-to-be prompts file (bench reads those bytes)."""
    make_model_dir(tmp_path / "t", seed=1)
    make_model_dir(tmp_path / "d", seed=2)
    spec = tmp_path / "bundle.yaml"
    spec.write_text(spec_text("local", "local/target", "local/draft", source="dir:PLACEHOLDER")
                    .replace('source: "dir:PLACEHOLDER"}\ndraft', 'source: "dir:t"}\ndraft')
                    .replace('source: "dir:PLACEHOLDER"}', 'source: "dir:d"}')
                    + "bench: {prompts_file: prompts/p.jsonl}\n")
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "p.jsonl").write_bytes(PROMPTS)
    m = Mirror(tmp_path / "m")
    pull_bundle(load_spec(spec), m, spec_dir=tmp_path)
    return m


def verified_local(tmp_path: Path, m: Mirror) -> VerifiedBundle:
    """Scan, sign and verify the pulled bundle: the isolated side's value."""
    write_scan_report(m, "local")
    key = attest.generate_key("ecdsa-p256")
    sign_bundle(m, "local", [key])
    doc = policy_doc({"release": key}, repos=("local/*",))
    return verify_bundle(m, "local", load_policy(write_policy(tmp_path / "trust.yaml", doc)))
