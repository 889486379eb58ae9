"""Regenerate the committed signing goldens (run by hand only when the format version changes).

    python -m tests.sign.make_golden tests/golden/sign-v1

Writes a tiny mirror holding one signed bundle, a trust policy that trusts its (discarded)
key, a plain model folder signed by specbundle (``model.sig``) and by the reference tool
(``reference.sig``), and the public key. Private keys are generated in memory and thrown away.
Old goldens are never regenerated: future versions must keep verifying them as they are.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from specbundle import attest
from specbundle.mirror import Mirror
from specbundle.sign import sign_bundle, sign_model
from tests.lib.bundles import pulled_bundle, write_scan_report
from tests.lib.models import make_model
from tests.lib.policy import policy_doc


def build(out: Path) -> None:
    """Write a fresh golden set into ``out`` (which must not exist)."""
    out.mkdir(parents=True)
    key = attest.generate_key("ecdsa-p256")
    with tempfile.TemporaryDirectory() as tmp:
        mirror = Mirror.open(out / "mirror", create=True)
        pulled_bundle(Path(tmp), mirror, "golden", seed=42)
        write_scan_report(mirror, "golden")
        sign_bundle(mirror, "golden", [key])
        (mirror.root / ".lock").unlink(missing_ok=True)
        shutil.rmtree(mirror.root / "tmp", ignore_errors=True)
        model = make_model(out / "model", seed=43)
        sign_model(model, key)
        priv = Path(tmp) / "k.pem"
        attest.write_private_key(key, priv)
        import model_signing as ms

        (ms.signing.Config().use_elliptic_key_signer(private_key=priv)
         .set_hashing_config(ms.hashing.Config().set_ignored_paths(
             paths=["model.sig", "reference.sig"]))
         .sign(model, model / "reference.sig"))
    attest.write_public_key(key.public, out / "key.pub")
    (out / "trust.yaml").write_text(yaml.safe_dump(policy_doc({"golden": key}), sort_keys=False))


if __name__ == "__main__":
    build(Path(sys.argv[1]))
