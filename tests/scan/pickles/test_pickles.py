"""Pickle corpus: every malicious stream is blocked by the allow-list walk; benign passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from specbundle.scan import ScanReport, Severity, scan_tree
from specbundle.scan.pickles.walker import TORCH_ALLOWED, looks_like_pickle, walk_pickle
from tests.lib import corpus
from tests.scan.conftest import FAST, ids

Scan = Callable[..., ScanReport]


def _globals(report: ScanReport) -> set[str]:
    return {f.message.split()[1] for f in report.findings
            if f.check_id == "pickle.global-not-allowed"}


@pytest.mark.parametrize(("module", "name", "proto"), [
    ("posix", "system", 2),
    ("posix", "system", 4),
    ("_posixsubprocess", "fork_exec", 4),
    ("importlib", "import_module", 4),
    ("builtins", "__import__", 2),
    ("torch.hub", "load", 4),
    ("numpy", "load", 2),
])
def test_malicious_reduce_is_blocked(scan_one: Scan, module: str, name: str, proto: int) -> None:
    rep = scan_one("evil.pkl", corpus.reduce_pickle(module, name, proto=proto),
                   allow_pickle=True)
    assert rep.blocked
    assert _globals(rep) == {f"{module}.{name}"}
    f = next(f for f in rep.findings if f.check_id == "pickle.global-not-allowed")
    assert f.severity is Severity.CRITICAL and f.file == "evil.pkl"


def test_importlib_inspect_chain_blocked(scan_one: Scan) -> None:
    rep = scan_one("chain.pkl", corpus.importlib_chain(), allow_pickle=True)
    assert _globals(rep) == {"inspect.getattr_static", "importlib.import_module"}
    assert "pickle.unresolved-call" in ids(rep)


def test_broken_stream_after_payload(scan_one: Scan) -> None:
    rep = scan_one("broken.pkl", corpus.broken_after_payload(), allow_pickle=True)
    assert {"pickle.global-not-allowed", "pickle.malformed"} <= ids(rep)
    assert rep.blocked


def test_benign_torch_zip_checkpoint_passes(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    corpus.torch_zip(d / "pytorch_model.bin")
    rep = scan_tree(d, allow_pickle=True, options=FAST)
    assert ids(rep) == set()
    assert not rep.blocked
    assert [f.check_id for f in rep.findings] == ["pickle.allowed"]


def test_benign_checkpoint_walk_sees_only_allowed_globals(tmp_path: Path) -> None:
    path = corpus.torch_zip(tmp_path / "x.bin")
    import zipfile

    with zipfile.ZipFile(path) as zf:
        import io

        walk = walk_pickle(io.BytesIO(zf.read("archive/data.pkl")), TORCH_ALLOWED,
                           max_bytes=1 << 20)
    assert walk.complete and not walk.problems
    assert {g for g, _ in walk.globals} == {"collections.OrderedDict",
                                            "torch._utils._rebuild_tensor_v2",
                                            "torch.FloatStorage"}
    assert len(walk.persistent_ids) == 1


def test_pickles_blocked_by_policy_and_next_to_safetensors(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    corpus.torch_zip(d / "pytorch_model.bin")
    assert "pickle.not-allowed" in ids(scan_tree(d, options=FAST))
    corpus.st_tensors(d / "model.safetensors", {"w": np.zeros(2, np.float16)})
    assert "pickle.redundant" in ids(scan_tree(d, allow_pickle=True, options=FAST))


def test_malicious_zip_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    corpus.torch_zip(d / "pytorch_model.bin", corpus.reduce_pickle("posix", "system"),
                     storages=())
    assert _globals(scan_tree(d, allow_pickle=True, options=FAST)) == {"posix.system"}


def test_zip_with_extra_member_and_missing_storage(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    corpus.torch_zip(d / "model.pt", extra={"archive/code/evil.pkl": b"x"}, storages=())
    got = ids(scan_tree(d, allow_pickle=True, options=FAST))
    assert {"pickle.zip-member", "pickle.zip-storage"} <= got


def test_prefixed_zip_is_malformed(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    z = corpus.torch_zip(tmp_path / "z.bin").read_bytes()
    decoy = corpus.torch_zip(tmp_path / "decoy.bin").read_bytes()
    (d / "model.bin").write_bytes(decoy + z)
    assert "pickle.zip-malformed" in ids(scan_tree(d, allow_pickle=True, options=FAST))


def test_junk_prefixed_zip_is_read_as_torch_reads_it(tmp_path: Path) -> None:
    # torch.load decides "zip" from the first bytes only; otherwise it unpickles from byte 0.
    d = tmp_path / "m"
    d.mkdir()
    z = corpus.torch_zip(tmp_path / "z.bin").read_bytes()
    (d / "model.bin").write_bytes(b"JUNKJUNK" + z)
    rep = scan_tree(d, allow_pickle=True, options=FAST)
    assert rep.blocked
    assert "pickle.malformed" in ids(rep) or "pickle.trailing-data" in ids(rep)


def test_legacy_checkpoint_with_payload(scan_one: Scan) -> None:
    data = corpus.legacy_checkpoint(corpus.reduce_pickle("posix", "system"))
    rep = scan_one("pytorch_model.bin", data, allow_pickle=True)
    assert _globals(rep) == {"posix.system"}
    assert any("legacy pickle" in f.message for f in rep.findings)


def test_legacy_checkpoint_benign(scan_one: Scan) -> None:
    rep = scan_one("pytorch_model.bin", corpus.legacy_checkpoint(corpus._state_dict()),
                   allow_pickle=True)
    assert ids(rep) == set()


def test_pickle_renamed_msgpack(scan_one: Scan) -> None:
    rep = scan_one("weights.msgpack", corpus.reduce_pickle("posix", "system"))
    assert {"pickle.global-not-allowed", "pickle.not-allowed", "files.unknown-type"} <= ids(rep)


def test_protocol0_text_pickle_with_text_name(scan_one: Scan) -> None:
    assert looks_like_pickle(corpus.text_pickle())
    rep = scan_one("notes.txt", corpus.text_pickle())
    assert "pickle.global-not-allowed" in ids(rep)
    assert "files.magic-mismatch" in ids(rep)


def test_stacked_pickle_after_benign_one(scan_one: Scan) -> None:
    data = b"\x80\x02}q\x00." + corpus.reduce_pickle("posix", "system")
    rep = scan_one("data.pkl", data, allow_pickle=True)
    assert {"pickle.trailing-data", "pickle.global-not-allowed"} <= ids(rep)


def test_npy_object_payload(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    corpus.npy_object(d / "x.npy", corpus.reduce_pickle("posix", "system"))
    np.save(d / "plain.npy", np.arange(4))
    rep = scan_tree(d, allow_pickle=True, options=FAST)
    assert {"pickle.npy-object", "pickle.global-not-allowed"} <= ids(rep)
    assert all(f.file != "plain.npy" for f in rep.findings)


@pytest.mark.parametrize("data", [b"\x80\x05\x8e", b"\x80\x02\xee.", b"\x80\x02h\x05."])
def test_malformed_streams(scan_one: Scan, data: bytes) -> None:
    rep = scan_one("bad.pkl", data, allow_pickle=True)
    assert "pickle.malformed" in ids(rep)


def test_ext_opcode_is_not_allowed(scan_one: Scan) -> None:
    rep = scan_one("ext.pkl", b"\x80\x02\x82\x01.", allow_pickle=True)
    assert "pickle.opcode-not-allowed" in ids(rep)


def test_build_on_a_global_is_not_allowed(scan_one: Scan) -> None:
    data = b"\x80\x02ccollections\nOrderedDict\n}X\x01\x00\x00\x00aK\x01sb."
    rep = scan_one("state.pkl", data, allow_pickle=True)
    assert "pickle.opcode-not-allowed" in ids(rep)


def test_stack_limit_is_enforced() -> None:
    import io

    from specbundle.scan.pickles import ops as pickle_ops
    from specbundle.scan.pickles import walker as pickle_walker

    # the hot loop checks its limits once per window of bytes: a stack past the limit is
    # reported within one window (a real stack past the real limit: ~1 MB of NONEs, < 1 s)
    pushes = pickle_walker._MAX_STACK + pickle_ops._WINDOW + 100
    walk = walk_pickle(io.BytesIO(b"\x80\x02" + b"N" * pushes + b"."),
                       TORCH_ALLOWED, max_bytes=1 << 30)
    assert [p.check_id for p in walk.problems] == ["pickle.budget"]


def test_budget_is_enforced(tmp_path: Path) -> None:
    import io

    data = b"\x80\x02X" + (10_000).to_bytes(4, "little") + b"a" * 10_000 + b"."
    walk = walk_pickle(io.BytesIO(data), TORCH_ALLOWED, max_bytes=1000)
    assert [p.check_id for p in walk.problems] == ["pickle.budget"]


def test_persistent_id_evidence_is_reproducible(scan_one: Scan) -> None:
    """A persistent id holding values the walker does not model is quoted by their labels, never
    by a memory address: two scans of the same bytes must give the same report (and digest)."""
    rep = scan_one("model.pkl", b"\x80\x02(C\x03abcK\x01tQ.")
    (finding,) = [f for f in rep.findings if f.check_id == "pickle.persistent-id"]
    assert dict(finding.evidence)["pid"] == "(<bytes>, 1)"
