"""The review page in a real headless Chromium: it renders, and hostile text stays text."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.cli.demo import demo_spec
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.scan import scan_bundle
from specbundle.sign import sign_bundle
from specbundle.spec import load_spec
from specbundle.synth import make_pair
from tests._browser import dump_dom, requires_chromium
from tests.lib.cli import run_cli
from tests.lib.policy import policy_doc, write_policy

pytestmark = requires_chromium

HOSTILE_NAME = ('<script>alert(1)</script><img src=x onerror=alert(2)>'
                '<a href="https://evil.example/">click</a>')
HOSTILE_TEMPLATE = ("{{ '<script>alert(3)</script>' }}<iframe src=\"https://evil.example/\">"
                    "</iframe>{% for m in messages %}{{ m.content }}{% endfor %}")


def _version(tmp: Path, mirror: Mirror, key: attest.SigningKey, *, k: int,
             description: str | None = None) -> None:
    """One demo-like version: synthetic pair, the demo's spec, real pull, scan and sign."""
    doc = demo_spec(f"dir:{tmp / 'pair' / 'target'}", f"dir:{tmp / 'pair' / 'draft'}")
    doc["bench"].pop("prompts_file")
    doc["speculative"]["num_speculative_tokens"] = k
    if description is not None:
        doc["metadata"]["description"] = description
    path = tmp / "bundle.yaml"
    path.write_text(json.dumps(doc))
    spec = load_spec(path)
    rec = pull_bundle(spec, mirror).record
    scan_bundle(mirror, rec, spec)
    sign_bundle(mirror, spec.name, [key])


@dataclass
class Demo:
    tmp: Path
    mirror: Mirror
    key: attest.SigningKey
    policy: Path


@pytest.fixture
def demo(tmp_path: Path) -> Demo:
    make_pair(tmp_path / "pair", vocab_size=512, hidden_size=64, intermediate_size=128,
              num_attention_heads=4, target_layers=2)
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    key = attest.generate_key("ecdsa-p256")
    policy = write_policy(tmp_path / "trust.yaml",
                          policy_doc({"release": key}, repos=("specbundle-demo/*",)))
    _version(tmp_path, mirror, key, k=8)
    _version(tmp_path, mirror, key, k=4)
    return Demo(tmp_path, mirror, key, policy)


def _page(capsys: pytest.CaptureFixture[str], d: Demo, out: Path) -> tuple[str, str]:
    code, _, err = run_cli(capsys, "review", "demo", "--mirror", str(d.mirror.root),
                           "--trust", str(d.policy), "--html", str(out))
    assert code == 0, err
    return out.read_text(), dump_dom(out)


def _self_contained(html: str) -> None:
    """Nothing fetched, nothing run: no script, no src/href, no CSS url() or @import."""
    assert not re.search(r"<script|<[^>]*\b(src|href)=|url\(|@import", html, re.I)


def test_demo_bundle_page_renders_decision_first(
        demo: Demo, capsys: pytest.CaptureFixture[str]) -> None:
    html, dom = _page(capsys, demo, demo.tmp / "review.html")
    _self_contained(html)
    assert dom.index('id="decision"') < dom.index('id="diff"') < dom.index('id="approvals"')
    assert "every requirement of the trust policy is met" in dom
    assert "speculative.num_speculative_tokens" in dom and "RUNTIME" in dom
    assert "Changes since <code>demo v1</code>" in dom


def test_hostile_name_and_template_stay_text(
        demo: Demo, capsys: pytest.CaptureFixture[str]) -> None:
    cfg_path = demo.tmp / "pair" / "target" / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = HOSTILE_TEMPLATE
    cfg_path.write_text(json.dumps(cfg))
    _version(demo.tmp, demo.mirror, demo.key, k=4, description=HOSTILE_NAME)
    html, dom = _page(capsys, demo, demo.tmp / "hostile.html")
    _self_contained(html)
    tags, handlers = _elements(dom)
    assert not tags & {"script", "img", "iframe", "a", "object", "embed", "link"}, tags
    assert not handlers, handlers
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x" in dom  # shown, as text
    assert "chat template changed" in dom and "metadata.description" in dom
    # findings with their evidence, then provenance (the signed record's commits)
    assert dom.index('id="diff"') < dom.index('id="findings"') < dom.index('id="provenance"') \
        < dom.index('id="approvals"')
    findings = dom[dom.index('id="findings"'):dom.index('id="provenance"')]
    assert "template.changed" in findings and "<dt>previous</dt>" in findings
    rec = demo.mirror.load_bundle("demo")
    provenance = dom[dom.index('id="provenance"'):dom.index('id="approvals"')]
    assert rec.target.commit in provenance and rec.draft is not None
    assert rec.draft.commit in provenance


def _elements(dom: str) -> tuple[set[str], list[str]]:
    """Every element name in the DOM Chromium built, and every on* attribute on any element."""
    tags: set[str] = set()
    handlers: list[str] = []

    class _Walk(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            tags.add(tag)
            handlers.extend(f"{tag}.{k}" for k, _ in attrs if k.startswith("on"))

    _Walk().feed(dom)
    return tags, handlers
