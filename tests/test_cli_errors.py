"""Bad input across the CLI: a specific message, the right exit code, JSON on stdout with --json.

Pins the fixes of the end-to-end bad-input review; fast, in-process, no engine, loopback only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specbundle.bench.servers import free_port
from specbundle.mirror import Mirror
from tests.lib.bundles import make_bundle
from tests.lib.cli import run_cli
from tests.lib.specs import spec_dict


@pytest.fixture
def mirror(tmp_path: Path) -> Mirror:
    """A mirror holding the placeholder bundle ``llama-pair`` (no model bytes)."""
    m = Mirror.open(tmp_path / "mirror", create=True)
    make_bundle(m, spec_dict())
    return m


def _error_doc(out: str) -> dict[str, object]:
    doc = json.loads(out)
    assert isinstance(doc, dict) and isinstance(doc["error"], dict)
    return doc["error"]


def _closed_port() -> int:
    return free_port()  # free a moment ago, so nothing listens there


def _spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "bundle.yaml"
    path.write_text(yaml.safe_dump(spec_dict()))
    return path


def test_not_a_mirror_is_a_usage_error_with_json_on_stdout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plain").mkdir()
    code, out, err = run_cli(capsys, "mirror", "ls", "--mirror", str(tmp_path / "plain"),
                             "--json")
    assert code == 2 and "is not a specbundle mirror" in err
    doc = _error_doc(out)
    assert doc["exit_code"] == 2 and doc["kind"] == "mirror"
    assert "is not a specbundle mirror" in str(doc["message"])
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli(capsys, "mirror", "ls", "--mirror", str(tmp_path / "file"))
    assert code == 2 and "Directory" in err and "is a file" in err


def test_usage_errors_are_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "keys", "generate", "--json")
    assert code == 2 and "--out" in err
    assert _error_doc(out)["kind"] == "usage"


def test_messages_with_brackets_are_printed_verbatim(
        mirror: Mirror, capsys: pytest.CaptureFixture[str]) -> None:
    """Error text is not rich markup: '[/]' used to crash the handler with a traceback."""
    code, _, err = run_cli(capsys, "mirror", "show", "x[/]", "--mirror", str(mirror.root))
    assert code == 2 and "x[/]" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "mirror", "show", "[bold]x", "--mirror", str(mirror.root))
    assert code == 2 and "'[bold]x'" in err


def test_malformed_bundle_record_names_file_and_field(
        mirror: Mirror, capsys: pytest.CaptureFixture[str]) -> None:
    path = mirror.root / "bundles" / "llama-pair" / "bundle.json"
    doc = json.loads(path.read_text())
    del doc["artifacts"]["target"]["files"]
    path.write_text(json.dumps(doc))
    code, out, err = run_cli(capsys, "mirror", "show", "llama-pair", "--mirror",
                             str(mirror.root), "--json")
    # a corrupt mirror record is "verification failed" (3), not an internal error
    assert code == 3 and "is malformed: missing field 'files'" in err and "internal" not in err
    assert str(path) in str(_error_doc(out)["message"])


def test_pull_unreachable_endpoint_is_environment(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec_file(tmp_path)
    url = f"http://127.0.0.1:{_closed_port()}"
    code, out, err = run_cli(capsys, "pull", str(spec), "--mirror", str(tmp_path / "m"),
                             "--endpoint", url, "--json")
    assert code == 6 and f"{url} unavailable resolving acme/llama-target" in err
    assert "internal error" not in err and _error_doc(out)["exit_code"] == 6
    code, _, err = run_cli(capsys, "pull", str(spec), "--mirror", str(tmp_path / "m"),
                           "--endpoint", "hub.example")
    assert code == 2 and "'hub.example' is not an http(s) URL" in err
    secret = url.replace("http://", "http://alice:s3cret-pw@")
    code, out, err = run_cli(capsys, "pull", str(spec), "--mirror", str(tmp_path / "m"),
                             "--endpoint", secret, "--json")
    # credentials never reach a library as part of the URL, so no message can carry them
    assert code == 6 and "s3cret-pw" not in err + out and "alice" not in err + out
    assert f"{url} unavailable" in err


def test_pull_mirror_that_cannot_be_created(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec_file(tmp_path)
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("SPECBUNDLE_MIRROR", str(tmp_path / "file"))
    code, _, err = run_cli(capsys, "pull", str(spec))
    assert code == 2 and "is not a specbundle mirror (not a directory)" in err
    code, _, err = run_cli(capsys, "pull", str(spec), "--mirror",
                           str(tmp_path / "file" / "sub"))
    assert code == 6 and "cannot create the mirror at" in err


def test_spec_errors_are_one_line_and_complete(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("foo: [unclosed\n")
    code, _, err = run_cli(capsys, "lint", str(bad))
    assert code == 2 and "not valid YAML: line 2, column 1: expected ',' or ']'" in err
    partial = tmp_path / "partial.yaml"
    partial.write_text("apiVersion: specbundle/v1\nmetadata: {name: x}\n")
    code, _, err = run_cli(capsys, "lint", str(partial))
    assert code == 2 and "target: Field required (also: speculative: Field required" in err
    doc = spec_dict()
    doc["bench"] = {"prompts_file": "prompts/missing.jsonl"}
    spec = tmp_path / "spec" / "bundle.yaml"
    spec.parent.mkdir()
    spec.write_text(yaml.safe_dump(doc))
    code, _, err = run_cli(capsys, "pull", str(spec), "--mirror", str(tmp_path / "m"))
    assert code == 2 and str(tmp_path / "spec" / "prompts" / "missing.jsonl") in err


def test_keys_public_key_and_passphrase(
        tmp_path: Path, mirror: Mirror, capsys: pytest.CaptureFixture[str]) -> None:
    pw = tmp_path / "pw.txt"
    pw.write_text("secret\n")
    key = tmp_path / "k.pem"
    code, out, err = run_cli(capsys, "keys", "generate", "--out", str(key), "--encrypt",
                             "--passphrase-file", str(pw), "--json")
    assert code == 0, err
    generated = json.loads(out)
    pub = Path(generated["public_key"])
    code, _, err = run_cli(capsys, "sign", "llama-pair", "--mirror", str(mirror.root),
                           "--key", str(pub))
    assert code == 2 and "holds a public key; --key needs the private key" in err
    trust = tmp_path / "trust.yaml"
    trust.write_text(yaml.safe_dump({"apiVersion": "specbundle/v1", "kind": "TrustPolicy",
                                     "keys": [{"name": "k", "public_key": pub.read_text(),
                                               "fingerprint": generated["fingerprint"],
                                               "repos": ["*"], "bundles": ["*"]}]}))
    # admit reads encrypted keys like sign does; a missing bundle stops it before any stage
    code, _, err = run_cli(capsys, "admit", "nope", "--mirror", str(mirror.root), "--trust",
                           str(trust), "--key", str(key), "--passphrase-file", str(pw))
    assert code == 2 and "no bundle named 'nope'" in err and "admit: verify" not in err


@pytest.mark.parametrize(("args", "message"), [
    (("--base-url", "http://127.0.0.1:1"), "--base-url needs --baseline-url"),
    (("--baseline-url", "http://127.0.0.1:1"), "go with --base-url"),
    (("--base-url", "localhost:8080", "--baseline-url", "http://127.0.0.1:1"),
     "'localhost:8080' is not an http(s) URL"),
    (("--base-url", "http://127.0.0.1:1", "--baseline-url", "http://127.0.0.1:2",
      "--binary", "/bin/true"), "servers given by --base-url are already running"),
    (("--rounds", "8", "--max-rounds", "4"), "--max-rounds 4 is below --rounds 8"),
])
def test_bench_contradictory_options_are_usage_errors(
        mirror: Mirror, capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
        message: str) -> None:
    code, out, err = run_cli(capsys, "bench", "llama-pair", "--mirror", str(mirror.root),
                             *args, "--json")
    assert code == 2 and message in err
    assert _error_doc(out)["exit_code"] == 2


def test_bench_missing_engine_binary_fails_before_launch(
        mirror: Mirror, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LLAMA_SERVER", "/nonexistent/llama-server")
    code, _, err = run_cli(capsys, "bench", "llama-pair", "--mirror", str(mirror.root),
                           "--unsigned")
    assert code == 6
    assert "engine binary /nonexistent/llama-server (LLAMA_SERVER / --binary) is not an " \
           "executable file" in err


def test_unwritable_output_is_environment_not_internal(
        tmp_path: Path, mirror: Mirror, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    out_dir = tmp_path / "file" / "render"
    code, out, err = run_cli(capsys, "render", "llama-pair", "--engine", "llamacpp",
                             "--target", "shell", "--mirror", str(mirror.root), "--out",
                             str(out_dir), "--json", "--unsigned")
    assert code == 6 and f"cannot write rendered manifests to {out_dir}" in err
    assert _error_doc(out)["kind"] == "environment"


def test_scan_json_failure_keeps_a_single_document(
        mirror: Mirror, capsys: pytest.CaptureFixture[str]) -> None:
    """A command that printed its own JSON before failing gets no second document."""
    code, out, err = run_cli(capsys, "scan", "llama-pair", "--mirror", str(mirror.root),
                             "--json", "--no-second-opinions")
    assert code == 4 and "error (scan-blocked)" in err  # placeholder GGUF bytes block
    report = json.loads(out)
    assert "error" not in report and report["blocked"] is True


def test_bad_public_key_file_and_unknown_bundle_images(
        tmp_path: Path, mirror: Mirror, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    junk = tmp_path / "junk.pub"
    junk.write_text("not a key\n")
    code, out, err = run_cli(capsys, "verify-model", str(model), "--public-key", str(junk),
                             "--json")
    assert code == 6 and f"{junk} is not a readable PEM public key" in err
    assert _error_doc(out)["kind"] == "environment"
    code, _, err = run_cli(capsys, "images", "ls", "nope", "--mirror", str(mirror.root))
    assert code == 2 and "no bundle named 'nope'" in err
    code, out, _ = run_cli(capsys, "images", "ls", "llama-pair", "--mirror", str(mirror.root))
    assert code == 0 and "carries no engine images" in out


def test_mirror_ls_lists_the_readable_and_names_the_broken(
        mirror: Mirror, capsys: pytest.CaptureFixture[str]) -> None:
    make_bundle(mirror, spec_dict(**{"metadata.name": "other"}))
    broken = mirror.root / "bundles" / "other" / "bundle.json"
    broken.write_text("{broken")
    code, out, err = run_cli(capsys, "mirror", "ls", "--mirror", str(mirror.root), "--json")
    doc = json.loads(out)
    assert code == 3 and [b["name"] for b in doc["bundles"]] == ["llama-pair"]
    assert list(doc["unreadable"]) == ["other"] and str(broken) in err


def test_render_refuses_an_image_reference_that_would_break_the_manifest(
        mirror: Mirror, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "render", "llama-pair", "--engine", "vllm", "--target",
                           "shell", "--mirror", str(mirror.root), "--image", "vllm:1 --x",
                           "--unsigned")
    assert code == 2 and "image reference 'vllm:1 --x' is not valid" in err


# -- terminal output: names and values from model files are text, never commands -----------

_TERMINAL_ACTS = ("\x1b", "\x9b", "\x07", "\r", "\u202e")


def _inert(text: str) -> bool:
    return not any(c in text for c in _TERMINAL_ACTS)


@pytest.mark.parametrize("hostile", [True, False])
def test_scan_table_shows_hostile_names_literally(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], hostile: bool) -> None:
    d = tmp_path / "model"
    d.mkdir()
    # short names of an unknown type: each gets a (medium) finding, so a table row
    names = (["[red]p.w", "[link=x]y.w", "e\x1b]8;;h\x1b\\.w", "b\x07\r.w", "r\u202ew.w"]
             if hostile else ["notes.w"])
    for n in names:
        (d / n).write_text("x")
    code, out, err = run_cli(capsys, "scan", "--path", str(d), "--no-second-opinions",
                             "--fail-on", "critical")
    assert _inert(out + err) and "Traceback" not in err
    if hostile:
        assert code == 4
        assert "[red]p.w" in out and "[link=x]y.w" in out and "e\\x1b]8;;h\\x1b\\.w" in out
    else:
        assert code == 0 and "notes.w" in out


@pytest.mark.parametrize("hostile", [True, False])
def test_mirror_show_prints_record_values_literally(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], hostile: bool) -> None:
    from specbundle.pull import pull_bundle
    from specbundle.spec import load_spec
    from tests.lib import corpus

    src = corpus.hf_model(tmp_path / "src")
    extra = (["[bold red]x[.txt", "y\x1b[2J.py", "[link=https:e]z.txt"] if hostile
             else ["notes.txt"])
    for n in extra:
        (src / n).write_text("x")
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({
        "apiVersion": "specbundle/v1", "metadata": {"name": "b"},
        "target": {"repo": "org/t", "source": f"dir:{src}"},
        "draft": {"repo": "org/d", "source": f"dir:{src}"},
        "speculative": {"method": "draft_model", "num_speculative_tokens": 2},
        "engines": {"vllm": {}}, "deployment": {"p95_concurrency": 2}}))
    mirror = Mirror.open(tmp_path / "m", create=True)
    pull_bundle(load_spec(spec), mirror)
    code, out, err = run_cli(capsys, "mirror", "show", "b", "--mirror", str(mirror.root))
    assert code == 0 and _inert(out + err)
    if hostile:
        assert "skipped [bold red]x[.txt" in out and "skipped [link=https:e]z.txt" in out
        assert "y\\x1b[2J.py" in out
    else:
        assert "skipped notes.txt" in out


def test_error_messages_never_carry_terminal_controls(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "no\x1b]0;pwned\x07such\udcffdir"
    code, out, err = run_cli(capsys, "scan", "--path", str(bad), "--no-second-opinions",
                             "--json")
    assert code == 2 and _inert(err) and "\\x1b]0;pwned" in err and "\\udcff" in err
    assert len(err.strip().splitlines()) == 1
    assert _error_doc(out)["exit_code"] == 2
    good = tmp_path / "plain-missing-dir"
    code, _, err = run_cli(capsys, "scan", "--path", str(good), "--no-second-opinions")
    assert code == 2 and f"{good} is not a directory" in err


@pytest.mark.parametrize("stage", ["bench", "tune"])
def test_isolated_stages_need_trust_or_an_explicit_unsigned(
        tmp_path: Path, mirror: Mirror, capsys: pytest.CaptureFixture[str], stage: str) -> None:
    """No stage acts on a bundle by name alone: --trust (verified) or --unsigned (said so)."""
    from specbundle.attest import generate_key
    from tests.lib.policy import key_files

    extra = ["--key", str(key_files(tmp_path, generate_key("ecdsa-p256"), "k")[0])] \
        if stage == "tune" else []
    code, out, err = run_cli(capsys, stage, "llama-pair", "--mirror", str(mirror.root),
                             *extra, "--json")
    assert code == 2 and "pass --trust" in err and "--unsigned" in err
    assert _error_doc(out)["exit_code"] == 2
    code, _, err = run_cli(capsys, stage, "llama-pair", "--mirror", str(mirror.root), *extra,
                           "--trust", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read trust policy" in err
