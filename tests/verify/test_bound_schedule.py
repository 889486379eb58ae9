"""A tuned schedule is put in force only if a key eligible for the bundle signed it."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbundle import attest
from specbundle.attest import Statement, append_attestation, artifact_subjects, sign_statement
from specbundle.attest.mirrored import bundle_manifest
from specbundle.attest.predicates import TUNE_SCHEDULE_V1
from specbundle.bundle import read_unsigned
from specbundle.digest import sha256_bytes
from specbundle.errors import SpecError
from specbundle.mirror import Mirror
from specbundle.render import render_bundle
from specbundle.schedule import SCHEDULE_FILE, Tier, TunedSchedule, apply_tuned
from specbundle.sign import sign_bundle
from specbundle.spec import parse_spec
from specbundle.verify import load_policy, verify_bundle
from tests.lib.bundles import pulled_bundle, write_scan_report
from tests.lib.policy import policy_doc, write_policy
from tests.lib.specs import spec_dict


def _tune_predicate(uri: str, schedule: bytes) -> dict[str, object]:
    """A complete tune-schedule predicate (the model refuses a partial one)."""
    return {"engine": "vllm", "runId": "r1", "timeCreated": "2026-01-01T00:00:00Z",
            "result": {"uri": "specbundle:bundle/pair/tune/r1/tune.json",
                       "digest": {"sha256": "00" * 32}},
            "schedule": {"uri": uri, "digest": {"sha256": sha256_bytes(schedule)}},
            "choices": [], "bestFixed": None, "crossoverConcurrency": None}


def _tune_statement(mirror: Mirror, name: str, schedule: bytes, key: attest.SigningKey) -> None:
    subjects = []
    for art in mirror.load_bundle(name).artifacts:
        root = bundle_manifest(mirror, art).root_digest
        subjects += list(artifact_subjects(art.repo, root, art.commit, art.commit_kind))
    st = Statement.build(subjects, TUNE_SCHEDULE_V1,
                         _tune_predicate(f"specbundle:bundle/{name}/{SCHEDULE_FILE}", schedule))
    append_attestation(mirror, name, sign_statement(st, [key]))


def _setup(tmp_path: Path) -> tuple[Mirror, attest.SigningKey, attest.SigningKey, Path, bytes]:
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    pulled_bundle(tmp_path, mirror, "pair")
    write_scan_report(mirror, "pair")
    release, other = attest.generate_key("ecdsa-p256"), attest.generate_key("ecdsa-p256")
    sign_bundle(mirror, "pair", [release])
    doc = policy_doc({"release": release, "other": other})
    doc["keys"][1]["bundles"] = ["some-other-bundle"]  # type: ignore[index]
    policy = write_policy(tmp_path / "trust.yaml", doc)
    sched = TunedSchedule("vllm", "r1", 4, (Tier(1, 3, None), Tier(2, 2, None))).to_bytes()
    mirror.write_bundle_file("pair", SCHEDULE_FILE, sched)
    return mirror, release, other, policy, sched


def _k(tmp_path: Path, mirror: Mirror, policy: Path, out: str) -> list[str]:
    v = verify_bundle(mirror, "pair", load_policy(policy))
    res = render_bundle(v, "vllm", "shell", tmp_path / out)
    return list(res.command.args)


def test_a_schedule_signed_by_a_key_scoped_to_another_bundle_is_not_applied(
        tmp_path: Path) -> None:
    mirror, _release, other, policy, sched = _setup(tmp_path)
    _tune_statement(mirror, "pair", sched, other)
    v = verify_bundle(mirror, "pair", load_policy(policy))  # the envelope itself verifies
    assert v.tuned_schedules == frozenset()
    assert v.tuned_schedule("vllm") is None
    assert read_unsigned(mirror, "pair").tuned_schedule("vllm") is not None  # unsigned would
    args = " ".join(_k(tmp_path, mirror, policy, "a")).replace(" ", "")
    assert '"num_speculative_tokens":3' not in args and '"schedule"' not in args


def test_a_schedule_signed_by_an_eligible_key_is_applied_and_only_as_signed(
        tmp_path: Path) -> None:
    mirror, release, _other, policy, sched = _setup(tmp_path)
    _tune_statement(mirror, "pair", sched, release)
    v = verify_bundle(mirror, "pair", load_policy(policy))
    assert v.tuned_schedules == frozenset({sha256_bytes(sched)})
    tuned = v.tuned_schedule("vllm")
    assert tuned is not None and tuned.max_k == 3
    args = " ".join(_k(tmp_path, mirror, policy, "b")).replace(" ", "")
    assert '"num_speculative_tokens":3' in args
    # swapped after verification: the new bytes are bound by nothing, so nothing is applied
    forged = TunedSchedule("vllm", "r1", 7, (Tier(1, 7, None),)).to_bytes()
    mirror.write_bundle_file("pair", SCHEDULE_FILE, forged)
    assert v.tuned_schedule("vllm") is None


def test_a_superseded_signed_schedule_copied_back_is_not_applied(tmp_path: Path) -> None:
    """Issue 22 item 2: only the latest eligible tune statement per engine binds its schedule."""
    mirror, release, _other, policy, old = _setup(tmp_path)
    _tune_statement(mirror, "pair", old, release)
    new = TunedSchedule("vllm", "r2", 4, (Tier(1, 2, None), Tier(2, 1, None))).to_bytes()
    mirror.write_bundle_file("pair", SCHEDULE_FILE, new)
    _tune_statement(mirror, "pair", new, release)
    v = verify_bundle(mirror, "pair", load_policy(policy))
    assert v.tuned_schedules == frozenset({sha256_bytes(new)})
    tuned = v.tuned_schedule("vllm")  # the benign twin: the latest schedule is in force
    assert tuned is not None and tuned.max_k == 2
    mirror.write_bundle_file("pair", SCHEDULE_FILE, old)  # the older, also signed, copied back
    assert v.tuned_schedule("vllm") is None
    assert verify_bundle(mirror, "pair", load_policy(policy)).tuned_schedule("vllm") is None
    args = " ".join(_k(tmp_path, mirror, policy, "c")).replace(" ", "")
    assert '"num_speculative_tokens":3' not in args


def test_a_schedule_tuned_for_another_bundle_name_is_not_applied(tmp_path: Path) -> None:
    """Same artifacts, same eligible key, but the statement names another bundle's schedule."""
    mirror, release, _other, policy, sched = _setup(tmp_path)
    subjects = []
    for art in mirror.load_bundle("pair").artifacts:
        root = bundle_manifest(mirror, art).root_digest
        subjects += list(artifact_subjects(art.repo, root, art.commit, art.commit_kind))
    st = Statement.build(subjects, TUNE_SCHEDULE_V1,
                         _tune_predicate(f"specbundle:bundle/other/{SCHEDULE_FILE}", sched))
    append_attestation(mirror, "pair", sign_statement(st, [release]))
    assert verify_bundle(mirror, "pair", load_policy(policy)).tuned_schedules == frozenset()
    _tune_statement(mirror, "pair", sched, release)  # twin: this bundle's own statement
    assert verify_bundle(mirror, "pair", load_policy(policy)).tuned_schedules == frozenset(
        {sha256_bytes(sched)})


@pytest.mark.parametrize("p_min", [7.5, -3.0])
def test_signed_schedule_values_outside_the_spec_ranges_are_refused(p_min: float) -> None:
    spec = parse_spec(spec_dict())
    ok = TunedSchedule("llamacpp", "r1", 4, (Tier(4, 3, 0.5),))
    assert apply_tuned(spec, ok).engines.llamacpp.draft_p_min == 0.5  # type: ignore[union-attr]
    bad = TunedSchedule("llamacpp", "r1", 4, (Tier(4, 3, p_min),))
    with pytest.raises(SpecError, match="refused by the spec's rules") as err:
        apply_tuned(spec, bad)
    assert "draft_p_min" in str(err.value.field)
