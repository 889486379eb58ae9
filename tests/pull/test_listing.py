"""A hub listing is attacker input: names, duplicates, digests and sizes are judged first.

Hostile names are never fetched, never become paths, reach the record only escaped and still
block the scan; a listing no git tree can have is refused with exit 3; a malformed answer is a
one-line error (exit 6), never a traceback. Each hostile case has a benign twin.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.pull.interface import RemoteFile
from specbundle.pull.listing import UNSAFE_NAME_REASON, ListingRejected, screen_listing
from specbundle.spec import load_spec
from tests.lib import corpus
from tests.lib.cli import run_cli
from tests.pull.fakehub import Behaviour, entry, fault_hub, lfs_entry

HOSTILE_NAMES = (
    "../../evil/config.json", "/etc/config.json", "a/./config.json", "a//config.json",
    "x\x1b[31m/config.json", "osc\x1b]8;;http://e\x1b\\.json", "bad\udcff.json",
    "c1\x9b/config.json", "back\\config.json", "nul\x00.json", "cr\rconfig.json",
    "a" * 256 + "/config.json", "d/" * 600 + "config.json",
)
# odd but harmless as paths: mirrored (or skipped by selection) under their real names
BENIGN_NAMES = ("sub/config.json", "caf\u00e9/config.json", "[bold red]x.json", "a:b.json",
                "deep/" * 20 + "config.json", "x" * 250 + ".json")


def _f(path: str, data: bytes = b"{}") -> RemoteFile:
    return RemoteFile(path, len(data), None, str(entry(path, data)["oid"]))


def test_hostile_names_are_skipped_escaped_and_benign_twins_kept() -> None:
    files = tuple(_f(n) for n in (*HOSTILE_NAMES, *BENIGN_NAMES))
    keep, unsafe = screen_listing("t org/x@c", files)
    assert {f.path for f in keep} == set(BENIGN_NAMES)
    assert len(unsafe) == len(HOSTILE_NAMES)
    for s in unsafe:
        assert s.reason.startswith(UNSAFE_NAME_REASON)
        assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or 0xD800 <= ord(c) <= 0xDFFF
                       for c in s.path), s.path
        s.path.encode("utf-8")  # storable and printable
    escaped = {s.path for s in unsafe}
    assert "x\\x1b[31m/config.json" in escaped and "bad\\udcff.json" in escaped
    assert "back\\\\config.json" in escaped and "../../evil/config.json" in escaped


@pytest.mark.parametrize(("files", "what"), [
    ((_f("config.json"), _f("config.json", b"[]")), "more than once"),
    ((_f("config.json"), _f("config.json/x.json")), "both a file and a folder"),
    ((RemoteFile("m.safetensors", 4, "../../x"),), "LFS sha256"),
    ((RemoteFile("m.safetensors", 4, "A" * 64),), "LFS sha256"),
    ((RemoteFile("c.json", 4, None, "zz"),), "git blob id"),
    ((RemoteFile("c.json", -1, None, "0" * 40),), "byte count"),
    ((RemoteFile("c.json", "4", None, "0" * 40),), "byte count"),  # type: ignore[arg-type]
    ((RemoteFile(7, 4),), "not a string"),  # type: ignore[arg-type]
])
def test_lying_listings_are_refused(files: tuple[RemoteFile, ...], what: str) -> None:
    with pytest.raises(ListingRejected, match=what) as exc:
        screen_listing("target org/x@c", files)
    assert exc.value.exit_code == 3 and "\n" not in exc.value.message


def test_benign_twins_of_lying_listings_pass() -> None:
    files = (_f("config.json"), _f("sub/config.json"), _f("sub/x.json"),
             RemoteFile("m.safetensors", 4, "a" * 64), RemoteFile("c.json", 0, None, "0" * 40))
    keep, unsafe = screen_listing("target org/x@c", files)
    assert len(keep) == len(files) and unsafe == ()


# -- end to end through a hub that lies, the CLI and the scan ------------------------------

def _model(tmp: Path) -> dict[str, bytes]:
    base = corpus.hf_model(tmp / "base")
    return {p.name: p.read_bytes() for p in sorted(base.iterdir())}


def _spec(tmp: Path, name: str, draft: Path) -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(f"""apiVersion: specbundle/v1
metadata: {{name: {name}}}
target: {{repo: org/faulty, revision: main}}
draft: {{repo: org/draft, source: "dir:{draft}"}}
speculative: {{method: draft_model, num_speculative_tokens: 4}}
engines: {{vllm: {{}}}}
deployment: {{p95_concurrency: 8}}
""")
    return p


def _no_raw_controls(text: str) -> bool:
    return not any(c in text for c in ("\x1b", "\x9b", "\r", "\x00", "\x07"))


@pytest.mark.parametrize("hostile", [True, False])
def test_hostile_names_through_pull_scan_and_show(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], hostile: bool) -> None:
    files = _model(tmp_path)
    cfg = files["config.json"]
    tree = [entry(p, d) for p, d in files.items()]
    served = dict(files)
    if hostile:
        tree += [entry(n, cfg) for n in HOSTILE_NAMES]
        served.update(dict.fromkeys(HOSTILE_NAMES, cfg))
    behaviour = Behaviour(files=served, tree=tree)
    mirror = tmp_path / "m"
    with fault_hub(behaviour) as url:
        code, out, err = run_cli(capsys, "pull", str(_spec(tmp_path, "b", tmp_path / "base")),
                                 "--mirror", str(mirror), "--endpoint", url, "--json")
    assert code == 0, err
    fetched = [r for r in behaviour.requests if "/resolve/" in r]
    assert len(fetched) == len(files)  # never a request for a hostile name
    skipped = json.loads(out)["bundle"]["artifacts"]["target"]["skipped"]
    assert len(skipped) == (len(HOSTILE_NAMES) if hostile else 0)
    raw = (mirror / "bundles" / "b" / "bundle.json").read_bytes().decode("utf-8")  # UTF-8
    assert "\\u001b" not in raw and "\\u009b" not in raw  # escaped before the record
    assert "\\ud" not in raw.replace("\\\\ud", "")  # no lone surrogate as a JSON escape
    # the scan still sees every hostile name, in every output format
    code, out, err = run_cli(capsys, "scan", "b", "--mirror", str(mirror),
                             "--no-second-opinions", "--json")
    unsafe = {f["file"] for f in json.loads(out)["findings"]
              if f["check_id"] == "files.unsafe-name"}
    if hostile:
        assert code == 4 and len(unsafe) == len(HOSTILE_NAMES)
    else:
        assert code == 0 and not unsafe
    code_t, out, err = run_cli(capsys, "scan", "b", "--mirror", str(mirror),
                               "--no-second-opinions")
    assert code_t == code and _no_raw_controls(out + err) and "Traceback" not in err
    code_s, out, _ = run_cli(capsys, "scan", "b", "--mirror", str(mirror),
                             "--no-second-opinions", "--format", "sarif")
    assert code_s == code and json.loads(out)["version"] == "2.1.0"
    code, out, err = run_cli(capsys, "mirror", "show", "b", "--mirror", str(mirror))
    assert code == 0 and _no_raw_controls(out + err)
    if hostile:
        assert "x\\x1b[31m/config.json" in out


@pytest.mark.parametrize("lie", ["duplicate", "file-and-folder", "bad-lfs-digest"])
def test_lying_hub_fails_pull_with_exit_3_and_nothing_mirrored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], lie: str) -> None:
    files = _model(tmp_path)
    tree = [entry(p, d) for p, d in files.items() if p != "model.safetensors"]
    st = files["model.safetensors"]
    if lie == "duplicate":
        tree += [lfs_entry("model.safetensors", st), entry("model.safetensors", b"\x7fELF")]
    elif lie == "file-and-folder":
        tree += [lfs_entry("model.safetensors", st), entry("model.safetensors/x.json", b"{}")]
    else:
        tree += [lfs_entry("model.safetensors", st,
                           lfs={"oid": "../../" + "a" * 58, "size": len(st), "pointerSize": 1})]
    behaviour = Behaviour(files=files, tree=tree)
    with fault_hub(behaviour) as url:
        code, out, err = run_cli(capsys, "pull", str(_spec(tmp_path, "b", tmp_path / "base")),
                                 "--mirror", str(tmp_path / "m"), "--endpoint", url, "--json")
    assert code == 3 and json.loads(out)["error"]["kind"] == "listing"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not [r for r in behaviour.requests if "/resolve/" in r]
    assert Mirror.open(tmp_path / "m").bundle_names() == []


def test_malformed_listing_is_an_environment_error_not_a_crash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _model(tmp_path)
    tree = [entry(p, d) for p, d in files.items() if p != "model.safetensors"]
    tree.append(lfs_entry("model.safetensors", files["model.safetensors"], lfs={"oid": "x"}))
    with fault_hub(Behaviour(files=files, tree=tree)) as url:
        code, _, err = run_cli(capsys, "pull", str(_spec(tmp_path, "b", tmp_path / "base")),
                               "--mirror", str(tmp_path / "m"), "--endpoint", url)
    assert code == 6 and "malformed file listing" in err and "Traceback" not in err


def test_git_folders_inside_a_repo_are_not_mirrored(tmp_path: Path) -> None:
    files = _model(tmp_path)
    cfg = files["config.json"]
    tree = [entry(p, d) for p, d in files.items()]
    tree += [entry(".git/hooks/config.json", cfg), entry("sub/.git/config.json", cfg)]
    served = {**files, ".git/hooks/config.json": cfg, "sub/.git/config.json": cfg}
    with fault_hub(Behaviour(files=served, tree=tree)) as url:
        rec = pull_bundle(load_spec(_spec(tmp_path, "b", tmp_path / "base")),
                          Mirror.open(tmp_path / "m", create=True), endpoint=url).record
    assert {s.path for s in rec.target.skipped} == {".git/hooks/config.json",
                                                    "sub/.git/config.json"}
    assert {f.path for f in rec.target.files} == set(files)


def test_journal_is_written_once_per_batch_not_per_file(tmp_path: Path) -> None:
    """A 30 000-file repo rewrote the whole journal per file: quadratic disk writes."""
    files = _model(tmp_path)
    files.update({f"shard{i:04d}/config.json": b'{"i": %d}' % i for i in range(300)})
    with fault_hub(Behaviour(files=files)) as url:
        mirror = Mirror.open(tmp_path / "m", create=True)
        res = pull_bundle(load_spec(_spec(tmp_path, "b", tmp_path / "base")), mirror,
                          endpoint=url)
        [journal] = (tmp_path / "m" / "journal").rglob("*.json")
        assert set(json.loads(journal.read_text())) == {f.path for f in res.record.target.files}
        # a rerun finds every small (non-LFS) file through the journal: nothing moves
        again = pull_bundle(load_spec(_spec(tmp_path, "b", tmp_path / "base")), mirror,
                            endpoint=url)
    assert again.unchanged and not again.artifacts[0].downloaded


def test_default_selection_takes_what_mistral_and_processor_configs_need() -> None:
    """mistral-common's tokenizers and the processor configs transformers reads are mirrored
    by default (so the scan sees them); look-alike suffixes and stray files are not."""
    from specbundle.pull.selection import select_files
    from specbundle.spec import ArtifactSpec

    wanted = ("tekken.json", "tokenizer.model.v3", "tokenizer.mm.model.v7m1",
              "processor_config.json", "video_preprocessor_config.json")
    stray = ("tokenizer.model.v3.bak", "notes/tekken.txt", "flax_model.msgpack")
    keep, skipped = select_files(ArtifactSpec(repo="org/m"),
                                 tuple(_f(n) for n in (*wanted, *stray)))
    assert sorted(f.path for f in keep) == sorted(wanted)
    assert {s.path: s.reason for s in skipped} == dict.fromkeys(
        stray, "not needed by the serving engines")
