"""The shipped trust-policy examples load once their placeholders are filled with real keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specbundle.attest import generate_key
from specbundle.verify import load_policy

EXAMPLES = sorted((Path(__file__).parents[2] / "manifests" / "policies").glob("*.yaml"))
_KEY_RE = re.compile(
    r'fingerprint: "(?P<fpr>[0-9a-f]{64})"\n(?P<indent>\s+)public_key: \|\n'
    r"\s+-----BEGIN PUBLIC KEY-----\n\s+REPLACE-ME\n\s+-----END PUBLIC KEY-----\n")


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_policy_loads_with_real_keys(example: Path, tmp_path: Path) -> None:
    text = example.read_text(encoding="utf-8")
    placeholders = len(_KEY_RE.findall(text))
    assert placeholders >= 1, "every example key is a quoted fingerprint and a REPLACE-ME PEM"

    def fill(m: re.Match[str]) -> str:
        key = generate_key()
        pem = "".join(f"{m['indent']}  {line}\n" for line in key.public.pem.decode().splitlines())
        return f'fingerprint: "{key.fingerprint}"\n{m["indent"]}public_key: |\n{pem}'

    filled = tmp_path / example.name
    filled.write_text(_KEY_RE.sub(fill, text), encoding="utf-8")
    policy = load_policy(filled)
    assert len(policy.keys) == placeholders
