"""Every mirror writer refuses a link, FIFO or folder planted on its path (issue 22 item 1).

Each case plants something in place of a folder or file a writer is about to write (model
trees, the HF view, refs, a writer lease, pull's partial download), pointing at a victim
folder outside the mirror: the writer stops with exit 3 and a one-line message, and the
victim is untouched. The benign twin (nothing planted) writes as before.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from specbundle import _faults
from specbundle._locks import LockTimeout, hold
from specbundle.errors import CorruptMirror
from specbundle.mirror import Mirror, trees
from specbundle.pull import pull_bundle
from specbundle.record import ArtifactRecord
from specbundle.spec import load_spec
from specbundle.transfer.staging import staging_lock
from tests.lib.models import make_model_dir
from tests.lib.specs import spec_text


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.mkdir()
    (v / "keep").write_text("precious")
    return v


def _untouched(victim: Path) -> None:
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]
    assert (victim / "keep").read_text() == "precious"


def _refused(err: pytest.ExceptionInfo[CorruptMirror], kind: str) -> None:
    assert err.value.exit_code == 3
    assert kind in err.value.message and "\n" not in err.value.message


def _plant(path: Path, what: str, victim: Path) -> None:
    """Put a link to ``victim`` (or a FIFO, or a folder) at ``path``, moving what is there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        path.rename(path.with_name(path.name + ".aside"))
    if what == "link":
        path.symlink_to(victim, target_is_directory=True)
    elif what == "file-link":
        path.symlink_to(victim / "keep")
    elif what == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def _pull(tmp_path: Path, m: Mirror) -> None:
    make_model_dir(tmp_path / "t", seed=1)
    make_model_dir(tmp_path / "d", seed=2)
    text = spec_text("one", "local/t", "local/d", source="dir:X")
    text = text.replace('source: "dir:X"}\ndraft', 'source: "dir:t"}\ndraft', 1)
    text = text.replace('source: "dir:X"}', 'source: "dir:d"}')
    (tmp_path / "one.yaml").write_text(text)
    pull_bundle(load_spec(tmp_path / "one.yaml"), m)


@pytest.fixture
def pulled(tmp_path: Path) -> tuple[Mirror, ArtifactRecord]:
    m = Mirror.open(tmp_path / "m", create=True)
    _pull(tmp_path, m)
    return m, m.load_bundle("one").target


def test_twin_trees_view_and_refs_are_rebuilt_in_place(pulled: tuple[Mirror, ArtifactRecord]
                                                       ) -> None:
    m, art = pulled
    git = dataclasses.replace(art, commit_kind="git", requested_revision="release/v1")
    with m.lock():
        tree = m.link_snapshot(art)
        m.publish(m.load_bundle("one"))
        trees.write_ref(m, git)
    ref = m.model_dir(art.repo) / "refs" / "release" / "v1"
    assert tree.is_dir() and not tree.is_symlink() and ref.read_text() == art.commit
    assert m.snapshot_dir(art.repo, art.commit).resolve() == tree.resolve()


@pytest.mark.parametrize("planted", ["blobs", "trees", "tree"])
def test_a_link_planted_in_the_model_tree_path_is_refused(
        pulled: tuple[Mirror, ArtifactRecord], victim: Path, planted: str) -> None:
    m, art = pulled
    tree = m.artifact_dir(art)
    where = {"blobs": m.model_dir(art.repo) / "blobs", "trees": tree.parent,
             "tree": tree}[planted]
    _plant(where, "link", victim)
    with pytest.raises(CorruptMirror) as err, m.lock():
        m.link_snapshot(art)
    _refused(err, "symbolic link")
    _untouched(victim)


@pytest.mark.parametrize("what", ["link", "file-link", "fifo", "folder"])
def test_a_ref_planted_as_a_link_fifo_or_folder_is_refused(
        pulled: tuple[Mirror, ArtifactRecord], victim: Path, what: str) -> None:
    m, art = pulled
    git = dataclasses.replace(art, commit_kind="git", requested_revision="main")
    _plant(m.model_dir(art.repo) / "refs" / "main", what, victim)
    with pytest.raises(CorruptMirror) as err:
        trees.write_ref(m, git)
    _refused(err, "symbolic link" if "link" in what else "not a regular file")
    _untouched(victim)


def test_the_snapshots_folder_as_a_link_is_refused(pulled: tuple[Mirror, ArtifactRecord],
                                                   victim: Path) -> None:
    m, art = pulled
    _plant(m.model_dir(art.repo) / "snapshots", "link", victim)
    with pytest.raises(CorruptMirror) as err, m.lock():
        m.publish(m.load_bundle("one"))
    _refused(err, "symbolic link")
    _untouched(victim)


@pytest.mark.parametrize("what", ["link", "fifo"])
def test_a_lease_folder_planted_is_refused(tmp_path: Path, victim: Path, what: str) -> None:
    m = Mirror.open(tmp_path / "m", create=True)
    m.lease().close()  # twin
    _plant(m.root / "leases", what, victim)
    with pytest.raises(CorruptMirror) as err:
        m.lease()
    _refused(err, "symbolic link" if what == "link" else "not a folder")
    _untouched(victim)


@pytest.mark.parametrize("planted", ["tmp", "tmp/partial"])
def test_pull_never_downloads_through_a_planted_partial_folder(tmp_path: Path, victim: Path,
                                                               planted: str) -> None:
    m = Mirror.open(tmp_path / "m", create=True)
    _plant(m.root / planted, "link", victim)
    with pytest.raises(CorruptMirror) as err:
        _pull(tmp_path, m)
    _refused(err, "symbolic link")
    _untouched(victim)


def test_pull_never_writes_its_journal_through_a_planted_link(tmp_path: Path,
                                                              victim: Path) -> None:
    """The journal is a cache (a refused write costs re-downloads only): the pull completes
    and nothing lands in the folder the link names."""
    m = Mirror.open(tmp_path / "m", create=True)
    _plant(m.root / "journal", "link", victim)
    _pull(tmp_path, m)
    assert m.bundle_names() == ["one"]
    _untouched(victim)


@pytest.mark.parametrize("planted", ["tmp", "objects"])
def test_small_objects_are_never_stored_through_a_planted_link(tmp_path: Path, victim: Path,
                                                               planted: str) -> None:
    m = Mirror.open(tmp_path / "m", create=True)
    assert m.has_object(m.put_bytes(b"twin"))
    _plant(m.root / planted, "link", victim)
    with pytest.raises(CorruptMirror) as err:
        m.put_bytes(b"record")
    _refused(err, "symbolic link")
    _untouched(victim)


@pytest.mark.parametrize("what", ["link", "file-link", "fifo"])
def test_mirror_files_outside_bundles_refuse_a_planted_path(tmp_path: Path, victim: Path,
                                                            what: str) -> None:
    """``Mirror.write_file`` (OCI pull state, and any writer outside ``bundles/``): a folder
    link on the way is refused; a link or FIFO as the file itself is replaced by the rename,
    never written through."""
    m = Mirror.open(tmp_path / "m", create=True)
    m.write_file("oci/pulls.json", b"{}")  # twin
    target = m.root / "oci" / "pulls.json"
    _plant(m.root / "oci" if what == "link" else target, what, victim)
    if what == "link":
        with pytest.raises(CorruptMirror) as err:
            m.write_file("oci/pulls.json", b"{}")
        _refused(err, "symbolic link")
    else:
        m.write_file("oci/pulls.json", b"{}")
        assert target.is_file() and not target.is_symlink() and target.read_bytes() == b"{}"
    _untouched(victim)


@pytest.mark.parametrize("name", [".lock", ".import.lock"])
@pytest.mark.parametrize("what", ["file-link", "link", "fifo", "folder"])
def test_a_lock_file_planted_as_a_link_fifo_or_folder_is_refused(tmp_path: Path, victim: Path,
                                                            name: str, what: str) -> None:
    """A writer opens its lock file through the mirror folder's fd, no-follow: a link there
    is never opened (an ``O_TRUNC`` open through it would empty the file it names), a FIFO
    opens non-blocking and is refused (the writer never waits on it)."""
    m = Mirror.open(tmp_path / "m", create=True)
    lock = (lambda: m.lock()) if name == ".lock" else (lambda: staging_lock(m))
    with lock():  # twin
        pass
    _plant(m.root / name, what, victim)
    with pytest.raises(CorruptMirror) as err, lock():
        pass
    _refused(err, "not a regular file")
    _untouched(victim)


def test_the_mirror_lock_excludes_a_second_holder_and_is_released(tmp_path: Path) -> None:
    m = Mirror.open(tmp_path / "m", create=True)
    with m.lock(), pytest.raises(LockTimeout), hold(m.root, ".lock", timeout=0.2):
        pass
    with hold(m.root, ".lock", timeout=0):  # released when the first holder left
        pass



@pytest.mark.parametrize("what", ["file-link", "fifo", "folder"])
def test_put_object_never_stores_or_chmods_through_a_planted_temp_file(
        tmp_path: Path, victim: Path, what: str) -> None:
    """A temp file swapped for a link (to a file outside the mirror), a FIFO or a folder
    before it is moved into the store: refused at once, the victim keeps its mode, and no
    object of that digest appears."""
    m = Mirror.open(tmp_path / "m", create=True)
    sha = "ab" * 32
    tmp = m.new_temp_path()
    tmp.unlink()
    _plant(tmp, what, victim)
    mode = (victim / "keep").stat().st_mode
    with pytest.raises(CorruptMirror) as err:
        m.put_object(tmp, sha)
    _refused(err, "not a regular file")
    assert (victim / "keep").stat().st_mode == mode
    assert not os.path.lexists(m.object_path(sha))
    _untouched(victim)


def test_put_object_refuses_an_existing_object_that_is_a_link(tmp_path: Path,
                                                              victim: Path) -> None:
    m = Mirror.open(tmp_path / "m", create=True)
    sha = m.put_bytes(b"twin")
    assert m.object_path(sha).is_file()
    m.object_path(sha).unlink()
    m.object_path(sha).symlink_to(victim / "keep")
    tmp = m.new_temp_path()
    tmp.write_bytes(b"twin")
    with pytest.raises(CorruptMirror) as err:
        m.put_object(tmp, sha)
    _refused(err, "not a regular file")
    _untouched(victim)


def test_put_object_publishes_only_the_file_it_checked(tmp_path: Path) -> None:
    """The temp file is renamed to a private name first and published only if it is still
    the inode that was checked; the twin (nothing swapped) is stored read-only."""
    m = Mirror.open(tmp_path / "m", create=True)
    tmp = m.new_temp_path()
    tmp.write_bytes(b"object")
    sha = "cd" * 32
    m.put_object(tmp, sha)
    obj = m.object_path(sha)
    assert obj.read_bytes() == b"object" and not obj.is_symlink()
    assert oct(obj.stat().st_mode & 0o777) == oct(0o444)
    assert sorted(p.name for p in obj.parent.iterdir()) == [sha]
    assert not tmp.exists()


def test_put_object_never_publishes_a_temp_file_swapped_after_the_check(
        tmp_path: Path, victim: Path) -> None:
    """Swapped between the check and the move (a writer racing the store): the swapped-in
    file is moved to a private name, found not to be the one checked, and removed."""
    m = Mirror.open(tmp_path / "m", create=True)
    tmp = m.new_temp_path()
    tmp.write_bytes(b"verified bytes")
    sha = "ef" * 32

    def swap(_detail: object) -> None:
        tmp.unlink()
        tmp.write_bytes(b"other bytes")

    with _faults.hook("fs.file-checked", swap), pytest.raises(CorruptMirror) as err:
        m.put_object(tmp, sha)
    _refused(err, "swapped")
    assert not os.path.lexists(m.object_path(sha))
    assert [p.name for p in m.object_path(sha).parent.iterdir()] == []


def test_gc_skips_an_object_moved_in_after_it_listed_the_folder(tmp_path: Path) -> None:
    """put_object publishes from a private name: a writer may rename it between gc's listing
    and its look at the name (the pull and gc race of CI). gc goes on, and the object under
    its final name (not in the listing) is left for the next gc to judge."""
    m = Mirror.open(tmp_path / "m", create=True)
    sha = m.put_bytes(b"kept")
    folder = m.object_path(sha).parent
    private = folder / f".{sha}.1.abc.in"
    m.object_path(sha).rename(private)

    def publish(_detail: object) -> None:
        if private.exists():
            private.rename(m.object_path(sha))

    with _faults.hook("gc.objects-listed", publish):
        m.gc()
    assert m.object_path(sha).read_bytes() == b"kept"
