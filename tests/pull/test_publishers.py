"""Publishers' own signatures checked on pull: verified identity recorded, refusals exit 3."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specbundle.attest import generate_key
from specbundle.audit.collect import artifact_audit
from specbundle.errors import VerificationError
from specbundle.localhub import LocalHub, publish_repo
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.sign import sign_bundle, sign_model
from specbundle.sign.statements import fetch_provenance
from specbundle.spec import load_spec
from specbundle.verify import load_policy
from specbundle.verify.publishers import PublisherPolicy
from tests.lib.bundles import write_scan_report
from tests.lib.cli import run_cli
from tests.lib.models import make_model, make_model_dir
from tests.lib.pki import Ca, write_pem
from tests.lib.policy import policy_doc, write_policy
from tests.lib.specs import spec_file, spec_text

ROOT = Ca.root("Publisher Root")
SUB = ROOT.sub_ca("Publisher Signing CA")
PUB_KEY = generate_key()
LEAF = SUB.leaf(PUB_KEY, email="models@publisher.example")


def _setup(tmp: Path, *, signed: bool = True, required: bool = True
           ) -> tuple[Path, Path, Mirror]:
    target = make_model(tmp / "src" / "target", seed=1)
    draft = make_model(tmp / "src" / "draft", seed=2)
    if signed:
        sign_model(target, PUB_KEY.with_chain((LEAF, SUB.cert)))
    spec = spec_file(tmp, "pair", target, draft, target_repo="pub/target",
                     draft_repo="org/draft")
    write_pem(tmp / "publisher-root.pem", ROOT.cert)
    doc = policy_doc({"release": generate_key()})
    doc["publishers"] = [{"repos": ["pub/*"], "required": required, "certificate": {
        "certificates": "publisher-root.pem",
        "identities": [{"san": "models@publisher.example"}]}}]
    policy = write_policy(tmp / "trust.yaml", doc)
    return spec, policy, Mirror.open(tmp / "mirror", create=True)


def test_signed_repo_is_pulled_and_the_publisher_recorded(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    spec, policy, mirror = _setup(tmp_path)
    code, out, err = run_cli(capsys, "pull", str(spec), "--mirror", str(mirror.root),
                             "--trust", str(policy), "--json")
    assert code == 0, err
    arts = json.loads(out)["bundle"]["artifacts"]
    assert arts["target"]["publisher"] == {
        "method": "certificate", "identity": "models@publisher.example",
        "issuer": SUB.cert.subject.rfc4514_string()}
    assert "publisher" not in arts["draft"]  # no rule names org/*: nothing recorded
    rec = mirror.load_bundle("pair")
    prov = fetch_provenance(rec, rec.target, "0" * 64).predicate
    assert prov["buildDefinition"]["resolvedDependencies"][0]["annotations"]["publisher"][
        "identity"] == "models@publisher.example"
    write_scan_report(mirror, "pair")
    key = generate_key()
    sign_bundle(mirror, "pair", [key])  # the record with a publisher signs as usual
    ours = write_policy(tmp_path / "ours.yaml", policy_doc({"release": key},
                                                           repos=("org/*", "pub/*")))
    code, out, err = run_cli(capsys, "verify", "pair", "--trust", str(ours), "--mirror",
                             str(mirror.root))
    assert code == 0, err
    assert "target: publisher models@publisher.example (certificate" in " ".join(out.split())
    audit = artifact_audit(mirror, rec, rec.target, load_policy(ours), rehash=False)
    assert "publisher models@publisher.example" in audit.model_sig.detail


@pytest.mark.parametrize("tamper", ["unsigned", "changed-file", "other-identity"])
def test_refused_before_anything_enters_the_mirror(tmp_path: Path, tamper: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    spec, policy, mirror = _setup(tmp_path, signed=tamper != "unsigned")
    target = tmp_path / "src" / "target"
    if tamper == "changed-file":
        (target / "config.json").write_text('{"architectures": ["Evil"]}')
    elif tamper == "other-identity":
        key = generate_key()
        sign_model(target, key.with_chain((SUB.leaf(key, email="intern@publisher.example"),
                                           SUB.cert)))
    code, _, err = run_cli(capsys, "pull", str(spec), "--mirror", str(mirror.root),
                           "--trust", str(policy))
    assert code == 3, err
    left = {str(p.relative_to(mirror.root)).split("/")[0] for p in mirror.root.rglob("*")
            if p.is_file()}
    if tamper == "changed-file":
        # a digest the source does not declare is known only once fetched: the bytes sit
        # unreferenced in the content store (gc reclaims them); no record, tree or ref exists
        assert left <= {".lock", "objects", "tmp"}
    else:  # refused before the first file was fetched
        assert left == {".lock"}


def test_optional_rule_and_library_check(tmp_path: Path) -> None:
    spec, policy, mirror = _setup(tmp_path, signed=False, required=False)
    pol = PublisherPolicy(load_policy(policy).publishers)
    rec = pull_bundle(load_spec(spec), mirror, publishers=pol).record
    assert rec.target.publisher is None
    with pytest.raises(VerificationError, match="refused"):
        pol.check("pub/target", b"{}")


@pytest.mark.parametrize(("entry", "field"), [
    ({"repos": ["x/*"]}, "publishers[0]: give exactly one"),
    ({"repos": ["x/*"], "sigstore": {"identity": "a", "issuer": "b",
                                     "trusted_root": "nope.json"}},
     "publishers[0].sigstore.trusted_root"),
    ({"repos": ["x/*"], "sigstore": {"identity": "a"}}, "publishers.0.sigstore.issuer"),
    ({"repos": [], "sigstore": {"identity": "a", "issuer": "b"}}, "publishers.0.repos"),
])
def test_malformed_publisher_entry_is_exit_2(tmp_path: Path, entry: dict, field: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    doc = policy_doc({"release": generate_key()})
    doc["publishers"] = [entry]
    policy = write_policy(tmp_path / "trust.yaml", doc)
    spec = spec_file(tmp_path, "pair", make_model(tmp_path / "t"), make_model(tmp_path / "d"))
    code, _, err = run_cli(capsys, "pull", str(spec), "--mirror", str(tmp_path / "m"),
                           "--trust", str(policy))
    assert code == 2 and field in err, err


def test_hub_repo_signed_by_its_publisher(hub: LocalHub, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    src = make_model_dir(tmp_path / "pubsrc", seed=7)
    sign_model(src, PUB_KEY.with_chain((LEAF, SUB.cert)))
    good = f"pub/signed-{tmp_path.name[-12:]}"
    publish_repo(hub.root, good, src)
    # a second repo: the same signature over other weights (the hub declares their sha256)
    make_model_dir(src, seed=8)
    bad = f"pub/swapped-{tmp_path.name[-12:]}"
    publish_repo(hub.root, bad, src)
    _, policy, _ = _setup(tmp_path)
    for repo, expect in ((good, 0), (bad, 3)):
        spec = tmp_path / f"{expect}.yaml"
        spec.write_text(spec_text(f"hub{expect}", repo, repo))
        mirror = tmp_path / f"m{expect}"
        code, out, err = run_cli(capsys, "pull", str(spec), "--mirror", str(mirror),
                                 "--endpoint", hub.endpoint, "--trust", str(policy), "--json")
        assert code == expect, err
        if expect == 0:
            art = json.loads(out)["bundle"]["artifacts"]["target"]
            assert art["publisher"]["identity"] == "models@publisher.example"
        else:
            assert "publisher signed" in err
            assert {p.name for p in mirror.rglob("*") if p.is_file()} == {".lock"}


def test_sigstore_publisher_on_pull_offline(tmp_path: Path) -> None:
    pytest.importorskip("sigstore", reason="sigstore is not installed")
    data = Path(__file__).parents[1] / "sign" / "data" / "oms-reference"
    pub_dir = tmp_path / "pub"
    shutil.copytree(data / "v1.1.0-sigstore", pub_dir)
    draft = make_model(tmp_path / "draft")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""apiVersion: specbundle/v1
metadata: {{name: sig}}
target: {{repo: ibm/signed, source: "dir:{pub_dir}", allow_patterns: ["signme-*"]}}
draft: {{repo: org/draft, source: "dir:{draft}"}}
speculative: {{method: draft_model, num_speculative_tokens: 4}}
engines: {{vllm: {{}}}}
deployment: {{p95_concurrency: 8}}
""")
    shutil.copy(data / "public-good-trusted_root.json", tmp_path / "root.json")
    doc = policy_doc({"release": generate_key()})
    rule = {"repos": ["ibm/*"], "sigstore": {
        "identity": "stefanb@us.ibm.com", "issuer": "https://sigstore.verify.ibm.com/oauth2",
        "trusted_root": "root.json"}}
    doc["publishers"] = [rule]
    pol = PublisherPolicy(load_policy(write_policy(tmp_path / "trust.yaml", doc)).publishers)
    rec = pull_bundle(load_spec(spec), Mirror.open(tmp_path / "m", create=True),
                      publishers=pol).record
    assert rec.target.publisher is not None
    assert rec.target.publisher.to_json() == {"method": "sigstore",
                                              "identity": "stefanb@us.ibm.com",
                                              "issuer": "https://sigstore.verify.ibm.com/oauth2"}
    rule["sigstore"]["identity"] = "mallory@us.ibm.com"  # type: ignore[index]
    pol = PublisherPolicy(load_policy(write_policy(tmp_path / "trust.yaml", doc)).publishers)
    with pytest.raises(VerificationError, match="publisher's signature is refused"):
        pull_bundle(load_spec(spec), Mirror.open(tmp_path / "m2", create=True), publishers=pol)
