"""The one eligible-signer rule: each reason a signature does not count, in one place."""

from __future__ import annotations

from pathlib import Path

from specbundle import attest
from specbundle.verify import load_policy
from specbundle.verify.eligibility import eligible_keys, eligible_signers
from tests.lib.policy import policy_doc, write_policy


def test_each_reason_a_signer_does_not_count(tmp_path: Path) -> None:
    keys = {n: attest.generate_key("ecdsa-p256") for n in ("a", "b", "c", "d")}
    doc = policy_doc(keys, model_signers=["a", "b", "c"])
    doc["keys"][2]["bundles"] = ["other"]  # type: ignore[index]
    policy = load_policy(write_policy(tmp_path / "p.yaml", doc))
    fp = {n: k.fingerprint for n, k in keys.items()}
    stranger = attest.generate_key("ecdsa-p256").fingerprint
    got = eligible_signers(policy, [*fp.values(), stranger], bundle="pair",
                           repos=("org/target", "org/draft"), revoked={fp["b"]: "revoked: lost"},
                           designated=frozenset({fp["a"], fp["b"], fp["c"]}), model=False)
    assert got.counted == {fp["a"]}
    assert got.excluded[fp["b"]] == "revoked: lost"
    assert got.excluded[fp["c"]].startswith("out of scope")
    assert got.excluded[fp["d"]] == "not a designated signer of this requirement"
    assert got.excluded[stranger] == "not a key of the trust policy"
    model = eligible_keys(policy, bundle="pair", repos=("org/target",), revoked={}, model=True)
    assert model == {fp["a"], fp["b"]}  # c: another bundle; d: not a model signer
