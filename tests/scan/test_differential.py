"""Property test: random mutations of valid files never crash the scan, and never pass a file
that a second reader interprets differently.

Seeded, bounded (a few seconds). The second readers are the ones an engine may use: Python's
``zipfile`` against a miniz-style reading (last end record, offsets as written), ``gguf-py``'s
``GGUFReader``, and the ``safetensors`` library plus Python's lenient ``json``.
"""

from __future__ import annotations

import json
import random
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from specbundle.scan import ScanReport, Severity, scan_tree, to_sarif
from specbundle.scan.formats.gguf_reader import StringArray, read_gguf
from tests.lib import corpus
from tests.scan import zipcraft
from tests.scan.conftest import FAST
from tests.scan.pickles.builds import use_build
from tests.scan.test_robustness import _mutate

ROUNDS = 150


def _miniz_view(data: bytes) -> dict[str, bytes]:
    """Members as a reader that trusts the last end record and the offsets it finds."""
    eocd = data.rfind(b"PK\x05\x06")
    n, _cd_size, cd_off = struct.unpack_from("<HII", data, eocd + 10)
    if cd_off == 0xFFFFFFFF and data[eocd - 20:eocd - 16] == b"PK\x06\x07":
        (rec,) = struct.unpack_from("<Q", data, eocd - 12)
        n, _cd_size, cd_off = struct.unpack_from("<QQQ", data, rec + 32)
    out: dict[str, bytes] = {}
    pos = cd_off
    for _ in range(n):
        method, = struct.unpack_from("<H", data, pos + 10)
        csize, _usize, nlen, xlen, clen = struct.unpack_from("<IIHHH", data, pos + 20)
        (off,) = struct.unpack_from("<I", data, pos + 42)
        name = data[pos + 46:pos + 46 + nlen].decode("cp437")
        lnlen, lxlen = struct.unpack_from("<HH", data, off + 26)
        raw = data[off + 30 + lnlen + lxlen:off + 30 + lnlen + lxlen + csize]
        out[name] = zlib.decompress(raw, -15) if method == 8 else raw
        pos += 46 + nlen + xlen + clen
    return out


def _zipfile_view(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def _accepted(rep: ScanReport, prefix: str) -> bool:
    return not any(f.check_id.startswith(prefix) and f.severity.rank >= Severity.HIGH.rank
                   for f in rep.findings)


def _serialisable(rep: ScanReport) -> None:
    assert not rep.crashed_checks, [f.message for f in rep.findings if "crashed" in f.message]
    rep.canonical_bytes().decode("utf-8")
    json.dumps(to_sarif(rep), ensure_ascii=False).encode("utf-8")


def _seeds(tmp: Path) -> dict[str, bytes]:
    members = zipcraft.torch_members(corpus._state_dict())
    members[1].method = 8
    corpus.gguf_model(tmp / "seed.gguf", template="{{ messages[0]['content'] }}",
                      tokens=[f"t{i}" for i in range(40)])
    corpus.st_tensors(tmp / "seed.safetensors", {"a": np.zeros((2, 3), np.float16),
                                                 "b": np.arange(4, dtype=np.int64)})
    return {"pytorch_model.bin": zipcraft.build(members),
            "model.gguf": (tmp / "seed.gguf").read_bytes(),
            "model.safetensors": (tmp / "seed.safetensors").read_bytes()}


def _check_zip(path: Path, rep: ScanReport) -> None:
    if path.read_bytes()[:4] != b"PK\x03\x04" or not _accepted(rep, "pickle.zip"):
        return
    data = path.read_bytes()
    assert _zipfile_view(path) == _miniz_view(data), "accepted zip read two ways"


def _check_gguf(path: Path, rep: ScanReport) -> None:
    if not _accepted(rep, "gguf."):
        return
    import gguf

    reader = gguf.GGUFReader(str(path))  # an accepted file must parse in gguf-py too
    ours = read_gguf(path)
    assert {k for k in reader.fields if not k.startswith("GGUF.")} == set(ours.kv)
    assert [(t.name, int(t.data_offset) - ours.data_start) for t in reader.tensors] == [
        (t.name, t.offset) for t in ours.tensors]
    for key, value in ours.kv.items():
        if isinstance(value, StringArray):
            field = reader.fields[key]
            assert [bytes(field.parts[i]) for i in field.data] == [
                value.raw(i) for i in range(len(value))]


def _check_safetensors(path: Path, rep: ScanReport) -> None:
    if not _accepted(rep, "safetensors."):
        return
    from safetensors import safe_open

    data = path.read_bytes()
    (n,) = struct.unpack_from("<Q", data)
    lenient = json.loads(data[8:8 + n])
    with safe_open(str(path), framework="numpy") as fh:
        assert set(fh.keys()) == set(lenient) - {"__metadata__"}


_ORACLES = {"pytorch_model.bin": _check_zip, "model.gguf": _check_gguf,
            "model.safetensors": _check_safetensors}


@pytest.mark.parametrize("name", sorted(_ORACLES))
def test_mutations_never_crash_nor_pass_a_differential(tmp_path: Path, name: str) -> None:
    rng = random.Random(f"issue-11-{name}")
    seed = _seeds(tmp_path)[name]
    accepted = 0
    for i in range(ROUNDS):
        d = tmp_path / f"m{i}"
        d.mkdir()
        data = seed if i == 0 else _mutate(rng, seed)
        (d / name).write_bytes(data)
        rep = scan_tree(d, allow_pickle=True, options=FAST)
        _serialisable(rep)
        _ORACLES[name](d / name, rep)
        accepted += not rep.blocked
    assert accepted >= 1  # the unmutated seed passes: the oracle really ran


def test_fast_opcode_decoder_agrees_with_genops() -> None:
    """The walker's decoder yields genops' exact stream, and breaks where genops breaks."""
    import io
    import pickle
    import pickletools

    from specbundle.scan.pickles.ops import fast_ops

    rng = random.Random(11)
    objs: list[object] = [{"a": [1, 2.5, "x", b"y", None, True, (1, 2)], "b": {1, 2}},
                          list(range(300)), "s" * 300, 10 ** 40, bytearray(b"q"),
                          frozenset({1}), {"k": [{"n": i} for i in range(20)]}]
    seeds = [pickle.dumps(o, protocol=p) for p in range(6) for o in objs]
    seeds += [corpus._state_dict(), corpus.text_pickle(), corpus.importlib_chain()]
    for seed in seeds:
        for i in range(25):
            data = seed if i == 0 else _mutate(rng, seed)

            def run(decoder: object, data: bytes = data) -> tuple[list[object], bool]:
                out: list[object] = []
                try:
                    for op, arg, pos in decoder(io.BytesIO(data)):  # type: ignore[operator]
                        out.append((op.name, arg, pos))
                except (ValueError, UnicodeError, EOFError, OverflowError, struct.error):
                    return out, False
                return out, True

            ours = run(lambda f: fast_ops(f, 1 << 20))
            theirs = run(pickletools.genops)
            assert ours == theirs, data


def _reference_walk(data: bytes) -> tuple[object, ...]:
    """The walker's semantics one opcode at a time: ``fast_ops`` into ``_step``."""
    import io

    from specbundle.scan.pickles import semantics as pw
    from specbundle.scan.pickles.ops import fast_ops
    from specbundle.scan.pickles.walker import TORCH_ALLOWED

    st = pw._State(TORCH_ALLOWED)
    complete, root, broken = False, None, False
    try:
        for op, arg, pos in fast_ops(io.BytesIO(data), 1 << 20):
            st.pos = pos
            if op.name == "STOP":
                top = st.pop()
                complete, root = True, top if isinstance(top, (int, str)) else None
                break
            pw._step(st, op, arg)
    except pw._TooManyProblems:
        broken = True
    except (ValueError, UnicodeError, EOFError, OverflowError, struct.error, IndexError):
        broken = True
    problems = [(p.check_id, p.pos) for p in st.problems]
    return tuple(st.globals), problems, tuple(st.pids), complete, root, broken


def _loops() -> list[object]:
    """The hot loop's builds on this install: pure Python, and the compiled twin when built."""
    from specbundle.scan.pickles import loop as pickle_loop
    from specbundle.scan.pickles import walker as pickle_walker

    return [pickle_loop] + ([pickle_walker._LOOP] if pickle_walker.NATIVE else [])


@pytest.mark.parametrize("loop", _loops(), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_walker_hot_loop_agrees_with_its_reference_semantics(
        loop: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inlined opcodes of the walker's hot loop do exactly what ``_step`` does, in the pure
    loop and in its compiled twin alike."""
    import io
    import pickle

    from specbundle.scan.pickles.walker import TORCH_ALLOWED, walk_pickle

    use_build(loop, monkeypatch)

    rng = random.Random(23)
    objs: list[object] = [{"a": [1, 2.5, "x", b"y", None, True, (1, 2)], "b": {1, 2}},
                          {f"k{i}": i * 1000 for i in range(200)}, [[i] * 3 for i in range(50)],
                          frozenset({1}), {"k": [{"n": (i, -i, 2 ** 20 + i)} for i in range(20)]}]
    seeds = [pickle.dumps(o, protocol=p) for p in range(6) for o in objs]
    seeds += [corpus._state_dict(), corpus.text_pickle(), corpus.importlib_chain()]
    seen_problem = seen_clean = 0
    for seed in seeds:
        for i in range(40):
            data = seed if i == 0 else _mutate(rng, seed)
            globs, problems, pids, complete, root, broken = _reference_walk(data)
            walk = walk_pickle(io.BytesIO(data), TORCH_ALLOWED, max_bytes=1 << 20)
            assert walk.globals == globs, data
            assert walk.persistent_ids == pids, data
            assert (walk.complete, walk.root) == (complete, root), data
            assert broken == (not complete), data
            ours = [(p.check_id, p.pos) for p in walk.problems]
            # the walker adds one closing problem for a broken or unfinished stream
            assert ours[:len(problems)] == problems, data
            assert len(ours) - len(problems) == (0 if complete else 1), data
            seen_problem += bool(problems)
            seen_clean += not walk.problems
    assert seen_problem and seen_clean
