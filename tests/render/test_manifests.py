"""Rendered manifests are valid for their consumers and keep the offline promises.

Kubernetes objects are validated against the Kubernetes OpenAPI schemas shipped in
``kubernetes-validate`` (offline, strict: unknown fields fail); compose files against the
compose-spec JSON schema in ``data/``; units with ``systemd-analyze verify`` where present;
shell scripts are run with a stand-in engine binary that records its argv and environment.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from specbundle.bundle import read_unsigned
from specbundle.errors import RenderError
from specbundle.mirror import Mirror
from specbundle.render import OFFLINE_ENV, ServeCommand, build_serve_command, render_bundle
from specbundle.render.paths import method_words_in
from tests.lib.bundles import DIGEST, BundleFactory

ENGINES = ("vllm", "sglang", "llamacpp")
K8S_VERSION = "1.33"
COMPOSE_SCHEMA = json.loads((Path(__file__).parent / "data" / "compose-spec.json").read_text())
COMPOSE = jsonschema.Draft7Validator(COMPOSE_SCHEMA)  # the schema declares draft-07
OFFLINE = dict(OFFLINE_ENV)


def _render(mirror: Mirror, engine: str, target: str, **kw: Any) -> Path:
    return render_bundle(read_unsigned(mirror, "llama-pair"), engine, target, image_digest=DIGEST, **kw).files[0]


@pytest.mark.parametrize("engine", ENGINES)
def test_kubernetes_objects_validate_offline(mirror: Mirror, bundle: BundleFactory,
                                             engine: str) -> None:
    bundle()
    docs = list(yaml.safe_load_all(_render(mirror, engine, "kubernetes").read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"Deployment", "Service", "NetworkPolicy"}
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"].endswith("@" + DIGEST)
    assert c["imagePullPolicy"] in ("Never", "IfNotPresent")
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert {e["name"]: e["value"] for e in c["env"]} == OFFLINE
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["mirror0"]["readOnly"] is True
    assert mounts["mirror0"]["mountPath"] == str(mirror.root)
    policy = kinds["NetworkPolicy"]["spec"]
    assert "Egress" in policy["policyTypes"] and policy["egress"] == []
    labels = pod and kinds["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in policy["podSelector"]["matchLabels"].items())
    assert kinds["Service"]["spec"]["selector"] == policy["podSelector"]["matchLabels"]


def test_kubernetes_schema_rejects_a_broken_object(mirror: Mirror, bundle: BundleFactory) -> None:
    bundle()
    doc = next(yaml.safe_load_all(_render(mirror, "vllm", "kubernetes").read_text()))
    doc["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("engine", ENGINES)
def test_compose_validates_against_compose_spec(mirror: Mirror, bundle: BundleFactory,
                                                engine: str) -> None:
    bundle()
    doc = yaml.safe_load(_render(mirror, engine, "compose").read_text())
    COMPOSE.validate(doc)
    svc = doc["services"]["engine"]
    cmd = build_serve_command(
        mirror.load_bundle("llama-pair"), engine, mirror=mirror)
    assert svc["entrypoint"] == [*cmd.container_program, *cmd.args, *cmd.listen_args]
    assert svc["image"].endswith("@" + DIGEST) and svc["pull_policy"] == "missing"
    assert svc["environment"] == OFFLINE
    assert svc["volumes"] == [{"type": "bind", "source": str(mirror.root),
                               "target": str(mirror.root), "read_only": True}]
    (net,) = svc["networks"]
    assert doc["networks"][net] == {"internal": True}
    dev = svc["deploy"]["resources"]["reservations"]["devices"][0]
    assert dev["capabilities"] == ["gpu"] and dev["count"] == 1
    bad = {**doc, "services": {"engine": {**svc, "read_only_mirror": True}}}
    with pytest.raises(jsonschema.ValidationError):
        COMPOSE.validate(bad)


def _systemd_argv(exec_start: str) -> list[str]:
    # Our quoting is shell-compatible double quoting plus systemd's %% and $$ escapes.
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(exec_start)]


@pytest.mark.parametrize("engine", ENGINES)
def test_systemd_unit_round_trips_and_verifies(mirror: Mirror, bundle: BundleFactory,
                                               engine: str, tmp_path: Path) -> None:
    extra = ["--chat-template", "/srv/t/100%$HOME\"x"] if engine == "vllm" else []
    bundle(**({"engines.vllm.extra_args": extra} if extra else {}))
    unit = _render(mirror, engine, "systemd")
    text = unit.read_text()
    lines = dict(ln.split("=", 1) for ln in text.splitlines() if ln.startswith("ExecStart="))
    cmd = build_serve_command(mirror.load_bundle("llama-pair"), engine, mirror=mirror)
    assert _systemd_argv(lines["ExecStart"]) == list(cmd.argv)
    for key in ("IPAddressDeny=any", f'ReadOnlyPaths="{mirror.root}"', "NoNewPrivileges=yes",
                "ProtectSystem=strict"):
        assert key in text.splitlines()
    assert "PrivateNetwork=yes" not in text and "PrivateDevices=yes" not in text
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed; round-trip checked above")
    probe = tmp_path / unit.name
    exec_line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    probe.write_text(text.replace(exec_line, 'ExecStart="/bin/true" ' +
                                  exec_line.split(" ", 1)[1]))
    res = subprocess.run([analyze, "verify", str(probe)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stderr


FAKE_ENGINE = """#!/bin/sh
python3 - "$@" <<'PY'
import json, os, sys
json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, open(os.environ["FAKE_OUT"], "w"))
PY
"""


def _run_script(script: Path, cmd: ServeCommand, tmp_path: Path, **env: str) -> dict[str, Any]:
    fake = tmp_path / "fake-engine"
    fake.write_text(FAKE_ENGINE)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "fake.json"
    run_env = {"PATH": os.environ["PATH"], "FAKE_OUT": str(out), cmd.binary_env: str(fake),
               **env}
    res = subprocess.run(["sh", str(script), "--extra-flag"], env=run_env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.parametrize("engine", ENGINES)
def test_shell_script_runs_both_arms_with_overrides(mirror: Mirror, bundle: BundleFactory,
                                                    engine: str, tmp_path: Path) -> None:
    rec = bundle()
    script = _render(mirror, engine, "shell")
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0
    assert os.access(script, os.X_OK)
    spec_cmd = build_serve_command(rec, engine, mirror=mirror)
    base_cmd = build_serve_command(rec, engine, mirror=mirror, speculation=False)
    env = {"SPECBUNDLE_HOST": "127.0.0.9", "SPECBUNDLE_PORT": "18123"}
    listen = [spec_cmd.host_flag, "127.0.0.9", spec_cmd.port_flag, "18123", "--extra-flag"]
    got = _run_script(script, spec_cmd, tmp_path, **env)
    assert got["argv"] == [*spec_cmd.program[1:], *spec_cmd.args, *listen]
    assert all(got["env"][k] == v for k, v in OFFLINE.items())
    got = _run_script(script, spec_cmd, tmp_path, SPECBUNDLE_SPECULATION="0", **env)
    assert got["argv"] == [*base_cmd.program[1:], *base_cmd.args, *listen]


def test_shell_script_refuses_a_missing_mirror(mirror: Mirror, bundle: BundleFactory,
                                               tmp_path: Path) -> None:
    bundle()
    script = _render(mirror, "llamacpp", "shell")
    (mirror.bundle_dir("llama-pair") / "render" / "models" / "draft").unlink()
    res = subprocess.run(["sh", str(script)], env={"PATH": os.environ["PATH"],
                         "LLAMA_SERVER": "/bin/true"}, capture_output=True, text=True,
                         check=False, timeout=60)
    assert res.returncode == 66 and "missing" in res.stderr


def test_model_paths_are_neutral_aliases_of_the_snapshots(mirror: Mirror,
                                                          bundle: BundleFactory) -> None:
    rec = bundle(**{"draft.repo": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                    "speculative.method": "eagle3", "engines.llamacpp.spec_type": "draft-eagle3"})
    assert rec.draft is not None
    snap = mirror.snapshot_dir(rec.draft.repo, rec.draft.commit)
    assert method_words_in(snap) == ["eagle"]
    for engine in ENGINES:
        cmd = build_serve_command(rec, engine, mirror=mirror)
        assert cmd.draft_path is not None and cmd.draft_path.is_absolute()
        assert not method_words_in(cmd.draft_path) and not method_words_in(cmd.target_path)
        assert cmd.draft_path.resolve() == snap.resolve()
        assert not any(rec.draft.repo in a for a in cmd.argv)
        assert not cmd.draft_path.readlink().is_absolute()  # survives a relocated mount
    res = render_bundle(read_unsigned(mirror, "llama-pair"), "vllm", "shell")
    assert res.lint.ok and not res.lint.findings


def test_render_output_layout_and_atomic_replace(mirror: Mirror, bundle: BundleFactory,
                                                 tmp_path: Path) -> None:
    bundle()
    first = render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell")
    assert first.out_dir == mirror.bundle_dir("llama-pair") / "render" / "llamacpp" / "shell"
    assert [p.name for p in first.files] == ["serve.sh", "command.json", "lint.json"]
    doc = json.loads((first.out_dir / "command.json").read_text())
    assert doc["speculative"]["argv"] == list(first.command.argv)
    assert doc["baseline"]["argv"] == list(first.baseline.argv)
    again = render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell")
    assert again.files == first.files
    leftovers = [p.name for p in again.out_dir.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []
    custom = render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell", tmp_path / "out")
    assert custom.out_dir == (tmp_path / "out").resolve() and custom.files[0].is_file()
    events = [e for e in mirror.read_events() if e["type"] == "render"]
    # output elsewhere writes nothing to the mirror (it may be mounted read-only)
    assert len(events) == 2 and events[-1]["data"]["target"] == "shell"
    assert custom.notes and "nothing written" in custom.notes[0]


def _image_record(engine: str, repo_digest: str | None) -> bytes:
    return json.dumps({
        "schema": "https://specbundle.dev/image-record/v1", "engine": engine,
        "reference": "vllm/vllm-openai:v0.32.0", "image_id": "sha256:" + "c" * 64,
        "archive_sha256": "d" * 64, "archive_size": 1, "repo_digest": repo_digest,
    }).encode()


def test_image_pinned_from_the_images_record(mirror: Mirror, bundle: BundleFactory) -> None:
    bundle()
    pinned = "vllm/vllm-openai@sha256:" + "e" * 64
    mirror.write_bundle_file("llama-pair", "images/vllm.json", _image_record("vllm", pinned))
    res = render_bundle(read_unsigned(mirror, "llama-pair"), "vllm", "compose")
    assert res.command.image == pinned and res.lint.ok
    assert yaml.safe_load(res.files[0].read_text())["services"]["engine"]["image"] == pinned
    # An explicit digest wins over the record; a loaded image without a registry digest is
    # pinned by its image ID.
    override = render_bundle(read_unsigned(mirror, "llama-pair"), "vllm", "compose", image_digest=DIGEST)
    assert override.command.image == "vllm/vllm-openai:v0.32.0@" + DIGEST
    mirror.write_bundle_file("llama-pair", "images/vllm.json", _image_record("vllm", None))
    by_id = render_bundle(read_unsigned(mirror, "llama-pair"), "vllm", "compose")
    assert by_id.command.image == "sha256:" + "c" * 64 and by_id.lint.ok
    mirror.write_bundle_file("llama-pair", "images/vllm.json", b"{not json")
    with pytest.raises(RenderError, match="image record"):
        render_bundle(read_unsigned(mirror, "llama-pair"), "vllm", "compose")


def test_compose_escapes_interpolation(mirror: Mirror, bundle: BundleFactory) -> None:
    bundle(**{"engines.vllm.extra_args": ["--chat-template", "/srv/t/$HOME.jinja"]})
    doc = yaml.safe_load(_render(mirror, "vllm", "compose").read_text())
    assert "/srv/t/$$HOME.jinja" in doc["services"]["engine"]["entrypoint"]
