"""Builders shared by the sign and verify tests: tiny model folders, pulled bundles, policies."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml
from safetensors.numpy import save_file

from specbundle.attest import SigningKey, write_private_key, write_public_key
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.record import BundleRecord
from specbundle.scan.findings import ScanReport, Severity
from specbundle.spec import load_spec


def make_model(path: Path, *, seed: int = 0, vocab: int = 64) -> Path:
    """A tiny model folder with weights, a nested file and a shared tokenizer."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    save_file({"embed.weight": rng.standard_normal((vocab, 16)).astype(np.float16)},
              str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                  "vocab_size": vocab, "hidden_size": 16}))
    (path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    (path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 128}))
    (path / "generation_config.json").write_text(json.dumps({"seed": seed}))
    return path


def spec_file(tmp: Path, name: str, target: Path, draft: Path, *,
              target_repo: str = "org/target", draft_repo: str = "org/draft") -> Path:
    """A bundle.yaml with ``dir:`` sources."""
    p = tmp / f"{name}.yaml"
    p.write_text(f"""apiVersion: specbundle/v1
metadata: {{name: {name}}}
target: {{repo: {target_repo}, source: "dir:{target}"}}
draft: {{repo: {draft_repo}, source: "dir:{draft}"}}
speculative: {{method: draft_model, num_speculative_tokens: 4, temperature: 0.0}}
engines: {{vllm: {{}}}}
deployment: {{p95_concurrency: 8}}
""")
    return p


def pulled_bundle(tmp: Path, mirror: Mirror, name: str = "pair", *, seed: int = 1,
                  draft_repo: str = "org/draft") -> BundleRecord:
    """Pull a fresh target/draft pair from folders into ``mirror`` (real pull stage)."""
    t = make_model(tmp / f"{name}-src" / "target", seed=seed)
    d = make_model(tmp / f"{name}-src" / "draft", seed=seed + 100)
    spec = load_spec(spec_file(tmp, name, t, d, draft_repo=draft_repo))
    return pull_bundle(spec, mirror).record


def write_scan_report(mirror: Mirror, name: str, *, blocked: bool = False) -> None:
    """Store a real (empty, or blocking) scan report where the scan stage puts it."""
    from specbundle.scan.findings import Finding

    findings = (Finding("pickle.import", Severity.CRITICAL, "os.system", "x.bin", "target"),) \
        if blocked else ()
    rec = mirror.load_bundle(name)
    rep = ScanReport(subject=name, fail_on=Severity.HIGH, findings=findings,
                     scanned_at="2026-01-01T00:00:00Z", tool_version="test",
                     artifacts=tuple((a.role, f"{a.repo}@{a.commit}") for a in rec.artifacts))
    mirror.write_bundle_file(name, "scan/report.json", rep.canonical_bytes())


def key_files(tmp: Path, key: SigningKey, stem: str) -> tuple[Path, Path]:
    """Write KEY.pem (0600) and KEY.pub; return both paths."""
    priv, pub = tmp / f"{stem}.pem", tmp / f"{stem}.pub"
    write_private_key(key, priv)
    write_public_key(key.public, pub)
    return priv, pub


def policy_doc(keys: dict[str, SigningKey], *, require: dict[str, object] | None = None,
               repos: tuple[str, ...] = ("org/*",), max_age: str | None = None,
               model_signers: list[str] | None = None) -> dict[str, object]:
    """A trust.yaml document trusting ``keys`` (by name) for ``repos``."""
    doc: dict[str, object] = {
        "apiVersion": "specbundle/v1", "kind": "TrustPolicy",
        "keys": [{"name": n, "fingerprint": k.fingerprint, "public_key": k.public.pem.decode(),
                  "repos": list(repos), "bundles": ["*"]} for n, k in keys.items()],
    }
    if require is not None:
        doc["require"] = require
    if max_age:
        doc["max_age"] = max_age
    if model_signers is not None:
        doc["model_signers"] = model_signers
    return doc


def write_policy(path: Path, doc: dict[str, object]) -> Path:
    """Write a policy document as YAML."""
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
