"""Engine images: save into the mirror, load only the signed bytes, run and always clean up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import docker
import docker.errors
import httpx
import pytest

from specbundle.bundle import read_unsigned
from specbundle.digest import hash_file
from specbundle.errors import UsageError, VerificationError
from specbundle.images import (
    LABEL,
    ImageRecord,
    Vouched,
    check_image,
    image_record_path,
    inspect_archive,
    load_images,
    read_image_records,
    run_container,
    save_images,
    serve_container,
)
from specbundle.mirror import Mirror, versions
from specbundle.render import build_serve_command
from specbundle.sign import sign_bundle
from specbundle.transfer import export_bundle, import_bundle
from specbundle.verify import verify_bundle
from tests._engine import free_port
from tests.lib.bundles import pulled_bundle
from tests.lib.chain import Chain, build_chain
from tests.lib.cli import run_cli
from tests.lib.containers import ImageFactory
from tests.lib.policy import policy_for

pytestmark = pytest.mark.docker

#: Small, CPU-friendly llama-server settings; p_min 0 so the tiny draft always proposes.
ENGINE = {"draft_p_min": 0.0, "threads": 2, "n_gpu_layers": "0",
          "draft_n_gpu_layers": "0"}


def _saved(tmp_path: Path, images: ImageFactory) -> tuple[Mirror, ImageRecord]:
    tag = images.tiny()
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    pulled_bundle(tmp_path / "work", mirror, seed=0, synth=True, image=tag)
    (rec,) = save_images(mirror, "pair")
    return mirror, rec


def _has_image(client: docker.DockerClient, image_id: str) -> bool:
    try:
        client.images.get(image_id)
    except docker.errors.ImageNotFound:
        return False
    return True


def test_save_records_digests_and_gc_keeps_archive(
    tmp_path: Path, images: ImageFactory, docker_client: docker.DockerClient
) -> None:
    mirror, rec = _saved(tmp_path, images)
    image = docker_client.images.get(rec.reference)
    assert rec.image_id == image.id
    assert rec.repo_digest is None  # docker import-ed: no registry digest, the ID is the pin
    assert rec.pinned_ref == rec.image_id
    obj = mirror.object_path(rec.archive_sha256)
    assert hash_file(obj) == rec.archive_sha256
    assert obj.stat().st_size == rec.archive_size
    assert inspect_archive(obj).image_id == rec.image_id
    assert read_image_records(mirror, "pair") == {"llamacpp": rec}
    bundle = mirror.load_bundle("pair")
    assert {rec.archive_sha256, rec.record_sha256} <= set(bundle.extra_blobs)
    assert mirror.read_events()[-1]["type"] == "image-save"
    mirror.gc()
    assert obj.exists()
    assert mirror.has_object(rec.record_sha256)


def test_save_refuses_unknown_engine_and_missing_image(
    tmp_path: Path, images: ImageFactory
) -> None:
    mirror = Mirror.open(tmp_path / "m", create=True)
    pulled_bundle(tmp_path / "w", mirror, seed=0, synth=True, image="specbundle-test/absent:0")
    with pytest.raises(UsageError, match="no image for vllm"):
        save_images(mirror, "pair", engines=["vllm"])
    with pytest.raises(UsageError, match="not present in the local Docker engine"):
        save_images(mirror, "pair")
    assert not (mirror.bundle_dir("pair") / image_record_path("llamacpp")).exists()


def test_load_round_trip_recreates_the_exact_image(
    tmp_path: Path, images: ImageFactory, docker_client: docker.DockerClient
) -> None:
    mirror, rec = _saved(tmp_path, images)
    docker_client.images.remove(rec.image_id, force=True)
    assert not _has_image(docker_client, rec.image_id)
    (loaded,) = load_images(read_unsigned(mirror, "pair"))
    assert (loaded.image_id, loaded.was_present) == (rec.image_id, False)
    assert rec.reference in docker_client.images.get(rec.image_id).tags
    assert mirror.read_events()[-1]["data"]["image_id"] == rec.image_id
    (again,) = load_images(read_unsigned(mirror, "pair"))
    assert again.was_present


def _tamper_layer(path: Path) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    idx = data.find(b"ELF")  # inside a layer: the shell binary's header
    assert idx > 0
    data[idx + 10] ^= 0xFF
    path.write_bytes(bytes(data))


def test_tampered_archive_is_refused_before_docker_load(
    tmp_path: Path, images: ImageFactory, docker_client: docker.DockerClient
) -> None:
    mirror, rec = _saved(tmp_path, images)
    docker_client.images.remove(rec.image_id, force=True)
    _tamper_layer(mirror.object_path(rec.archive_sha256))
    with pytest.raises(VerificationError, match="tampered"):
        load_images(read_unsigned(mirror, "pair"))
    assert not _has_image(docker_client, rec.image_id)
    assert all(e["type"] != "image-load" for e in mirror.read_events())


def test_swapped_archive_and_record_are_not_bound(
    tmp_path: Path, images: ImageFactory, docker_client: docker.DockerClient
) -> None:
    """An attacker who stores another image and rewrites the record is caught by the binding."""
    mirror, rec = _saved(tmp_path, images)
    other = images.tiny()
    tmp = mirror.new_temp_path("evil")
    with tmp.open("wb") as fh:
        for chunk in docker_client.images.get(other).save(named=True):
            fh.write(chunk)
    evil_sha = hash_file(tmp)
    mirror.put_object(tmp, evil_sha)
    forged = {**rec.to_json(), "archive_sha256": evil_sha,
              "image_id": str(docker_client.images.get(other).id)}
    mirror.write_bundle_file("pair", image_record_path("llamacpp"), json.dumps(forged).encode())
    with pytest.raises(VerificationError, match="not bound"):
        load_images(read_unsigned(mirror, "pair"))
    forged_id = {**rec.to_json(), "image_id": "sha256:" + "1" * 64}
    mirror.write_bundle_file("pair", image_record_path("llamacpp"), json.dumps(forged_id).encode())
    with pytest.raises(VerificationError, match="not bound"):
        load_images(read_unsigned(mirror, "pair"))


def test_archive_with_wrong_image_id_is_refused(tmp_path: Path, images: ImageFactory) -> None:
    """Even a record vouched for must name the image the archive really holds."""
    mirror, rec = _saved(tmp_path, images)
    lie = ImageRecord(**{**rec.__dict__, "image_id": "sha256:" + "2" * 64})
    vouched = Vouched(frozenset({lie.record_sha256, lie.archive_sha256}), "test record", True)
    with mirror.object_path(rec.archive_sha256).open("rb") as fh, \
            pytest.raises(VerificationError, match="holds image"):
        check_image(lie, b"", vouched, fh)


def test_run_container_isolates_and_always_removes(
    tmp_path: Path, images: ImageFactory, docker_client: docker.DockerClient
) -> None:
    mirror, rec = _saved(tmp_path, images)
    argv = ["/bin/sh", "-c", "exec sleep 300", "--host", "127.0.0.1", "--port", "9"]
    seen: dict[str, object] = {}

    def inside() -> str:
        with run_container(rec, argv, mirror=mirror, port=9) as run:
            seen["running"] = run.is_running()
            c = docker_client.containers.get(run.container_id)
            seen["host"] = c.attrs["HostConfig"]
            seen["mount"] = c.attrs["Mounts"][0]
            seen["touch"] = c.exec_run(["/bin/touch", str(mirror.root / "written")])[0]
            raise RuntimeError(run.container_id)

    with pytest.raises(RuntimeError) as exc:
        inside()
    host = seen["host"]
    assert isinstance(host, dict)
    assert seen["running"] is True
    assert (host["NetworkMode"], host["ReadonlyRootfs"], host["CapDrop"]) == ("host", True, ["ALL"])
    mount = seen["mount"]
    assert isinstance(mount, dict)
    assert (mount["Source"], mount["RW"]) == (str(mirror.root), False)
    assert seen["touch"] != 0  # the mirror is read-only inside
    assert not docker_client.containers.list(all=True, filters={"id": str(exc.value)})
    assert not (mirror.root / "written").exists()


def test_run_container_refuses_non_loopback(tmp_path: Path, images: ImageFactory) -> None:
    mirror, rec = _saved(tmp_path, images)
    public = ".".join(["0"] * 4)
    with pytest.raises(UsageError, match=r"127\.0\.0\.1"), \
            run_container(rec, ["/bin/sleep", "1", "--host", public], mirror=mirror, port=1):
        pytest.fail("started")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_removes_the_container(
    tmp_path: Path, images: ImageFactory, docker_client: docker.DockerClient, sig: int
) -> None:
    mirror, _ = _saved(tmp_path, images)
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from specbundle.images import read_image_records, run_container
        from specbundle.mirror import Mirror
        m = Mirror.open(Path({str(mirror.root)!r}))
        rec = read_image_records(m, "pair")["llamacpp"]
        argv = ["/bin/sh", "-c", "exec sleep 300", "--host", "127.0.0.1"]
        try:
            with run_container(rec, argv, mirror=m, port=9) as run:
                print(run.container_id, flush=True)
                time.sleep(120)
        except KeyboardInterrupt:
            sys.exit(130)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert proc.stdout is not None
    cid = proc.stdout.readline().strip()
    assert docker_client.containers.get(cid).status == "running"
    proc.send_signal(sig)
    proc.communicate(timeout=60)  # reaps it and closes its pipe
    assert proc.returncode == 130
    assert not docker_client.containers.list(all=True, filters={"label": LABEL, "id": cid})


@pytest.mark.engine
@pytest.mark.slow
def test_llama_server_from_loaded_image_serves_the_mirror(
    tmp_path: Path, images: ImageFactory, llama_image: str, docker_client: docker.DockerClient
) -> None:
    """save -> export -> import -> load -> run: the container speculates on the isolated mirror."""
    chain, mirror = _transfer(tmp_path, images, llama_image)
    rec = read_image_records(mirror, "pair")["llamacpp"]
    docker_client.images.remove(rec.image_id, force=True)
    (loaded,) = load_images(verify_bundle(mirror, "pair", chain.policy))
    assert loaded.signed
    record = mirror.load_bundle("pair")
    figures = {}
    for speculation in (True, False):
        cmd = build_serve_command(record, "llamacpp", mirror=mirror, speculation=speculation)
        log = tmp_path / f"engine-{speculation}.log"
        with serve_container(cmd, rec, mirror=mirror, port=free_port(), log=log,
                             health_timeout=120) as run:
            out = httpx.post(f"{run.base_url}/completion", timeout=60, json={
                "prompt": "hello", "n_predict": 16, "temperature": 0}).json()
            figures[speculation] = (out["tokens_predicted"], out["timings"].get("draft_n", 0))
            cid = run.container_id
        assert not docker_client.containers.list(all=True, filters={"id": cid})
        assert b"listening" in log.read_bytes()  # the engine's output was kept
    assert figures[True][0] > 0
    assert figures[True][1] > 0  # the speculative arm drafted
    assert figures[False][1] == 0  # the baseline arm, same image, did not


def _transfer(tmp_path: Path, images: ImageFactory, image: str) -> tuple[Chain, Mirror]:
    """Connected side: pull, scan, images save, sign, export. Isolated side: import."""
    chain = build_chain(tmp_path / "connected", image=image, llamacpp=ENGINE,
                        before_sign=lambda m: save_images(m, "pair"))
    export_bundle(chain.mirror, "pair", tmp_path / "transfer", [chain.release])
    isolated = Mirror.open(tmp_path / "isolated", create=True)
    import_bundle(tmp_path / "transfer", isolated, chain.policy)
    return chain, isolated


def test_save_export_import_load_with_the_signed_index(
    tmp_path: Path, images: ImageFactory, docker_client: docker.DockerClient
) -> None:
    chain, isolated = _transfer(tmp_path, images, images.tiny())
    rec = read_image_records(isolated, "pair")["llamacpp"]
    docker_client.images.remove(rec.image_id, force=True)
    (loaded,) = load_images(verify_bundle(isolated, "pair", chain.policy))
    assert (loaded.image_id, loaded.signed, loaded.was_present) == (rec.image_id, True, False)
    assert _has_image(docker_client, rec.image_id)
    # a key removed from the policy: the bundle no longer verifies, nothing is loaded
    with pytest.raises(VerificationError):
        load_images(verify_bundle(isolated, "pair", policy_for({"other": chain.other})))
    # the images come from the signed version itself, not from a transfer index beside it:
    # the connected mirror's signed version names the same record, so it loads there too
    (same,) = load_images(verify_bundle(chain.mirror, "pair", chain.policy))
    assert (same.image_id, same.signed, same.was_present) == (rec.image_id, True, True)


def test_tampered_archive_after_import_is_refused(
    tmp_path: Path, images: ImageFactory, docker_client: docker.DockerClient
) -> None:
    chain, isolated = _transfer(tmp_path, images, images.tiny())
    rec = read_image_records(isolated, "pair")["llamacpp"]
    docker_client.images.remove(rec.image_id, force=True)
    _tamper_layer(isolated.object_path(rec.archive_sha256))
    with pytest.raises(VerificationError, match="tampered"):
        load_images(verify_bundle(isolated, "pair", chain.policy))
    assert not _has_image(docker_client, rec.image_id)


def test_tampered_archive_in_transfer_set_is_refused_at_import(
    tmp_path: Path, images: ImageFactory
) -> None:
    chain = build_chain(tmp_path / "connected", image=images.tiny(),
                        before_sign=lambda m: save_images(m, "pair"))
    export_bundle(chain.mirror, "pair", tmp_path / "transfer", [chain.release])
    rec = read_image_records(chain.mirror, "pair")["llamacpp"]
    _tamper_layer(tmp_path / "transfer" / "objects" / rec.archive_sha256)
    isolated = Mirror.open(tmp_path / "isolated", create=True)
    with pytest.raises(VerificationError):
        import_bundle(tmp_path / "transfer", isolated, chain.policy)
    assert not isolated.has_object(rec.archive_sha256)


def test_images_cli_save_ls_load(
    tmp_path: Path, images: ImageFactory, docker_client: docker.DockerClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tag = images.tiny()
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    pulled_bundle(tmp_path / "work", mirror, seed=0, synth=True, image=tag)
    m = str(mirror.root)
    code, out, _ = run_cli(capsys, "images", "save", "pair", "--mirror", m, "--json")
    assert code == 0
    (saved,) = json.loads(out)["images"]
    assert saved["reference"] == tag
    code, out, _ = run_cli(capsys, "images", "ls", "pair", "--mirror", m, "--json")
    assert json.loads(out)["images"] == [saved]
    docker_client.images.remove(saved["image_id"], force=True)
    code, _, err = run_cli(capsys, "images", "load", "pair", "--mirror", m)
    assert code == 3  # fail closed: no policy and no explicit opt-in
    assert "without a trust policy" in err
    assert not _has_image(docker_client, saved["image_id"])
    code, out, err = run_cli(capsys, "images", "load", "pair", "--mirror", m, "--allow-unsigned")
    assert code == 0
    assert "loaded" in out
    assert "integrity, not authorship" in out
    _tamper_layer(mirror.object_path(saved["archive_sha256"]))
    code, _, err = run_cli(capsys, "images", "load", "pair", "--mirror", m, "--allow-unsigned")
    assert code == 3
    assert "tampered" in err
    code, _, err = run_cli(capsys, "images", "save", "pair", "--mirror", m, "--engine", "vllm")
    assert code == 2


def test_a_superseded_image_record_or_index_copied_back_is_refused(
    tmp_path: Path, images: ImageFactory, docker_client: docker.DockerClient
) -> None:
    """Issue 22 item 2: the image comes from the current signed version, never a side file."""
    tag = images.tiny()
    chain, isolated = _transfer(tmp_path, images, tag)
    old_index = isolated.read_bundle_file("pair", "import/index.json")
    old_record = isolated.read_bundle_file("pair", versions.version_rel(1, "images/llamacpp.json"))
    assert old_index is not None and old_record is not None
    # connected side: the tag now names another image; saved, signed as version 2, carried over
    newer = images.tiny()
    repo, name = tag.rsplit(":", 1)
    assert docker_client.images.get(newer).tag(repo, name)
    save_images(chain.mirror, "pair")
    sign_bundle(chain.mirror, "pair", [chain.release])
    export_bundle(chain.mirror, "pair", tmp_path / "transfer2", [chain.release])
    import_bundle(tmp_path / "transfer2", isolated, chain.policy)
    v = verify_bundle(isolated, "pair", chain.policy)
    signed = v.image_record("llamacpp")
    assert v.version == 2 and signed is not None
    assert signed.image_id == str(docker_client.images.get(newer).id)
    # the superseded index and record copied back beside the version: ignored
    isolated.write_bundle_file("pair", "import/index.json", old_index)
    isolated.write_bundle_file("pair", image_record_path("llamacpp"), old_record)
    (loaded,) = load_images(v)
    assert loaded.image_id == signed.image_id
    # ... and into the signed version's own folder: refused, nothing loaded
    docker_client.images.remove(signed.image_id, force=True)
    isolated.write_bundle_file("pair", versions.version_rel(2, "images/llamacpp.json"),
                               old_record)
    with pytest.raises(VerificationError, match="differs from the one signed"):
        load_images(v)
    assert not _has_image(docker_client, signed.image_id)
