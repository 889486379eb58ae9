"""llama.cpp b11434: draft-mtp without a draft, and the spec's K passed to every type.

Flags are held by the real ``llama-server --help`` when the engine is installed, else by
the stored help of the pinned build (``data/llama-server-help.txt``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from specbundle.bundle import read_unsigned
from specbundle.mirror import Mirror
from specbundle.render import build_serve_command, lint_bundle
from tests._engine import find_llama_server
from tests.lib.bundles import BundleFactory
from tests.render._argcheck import check_llamacpp

_LLAMA = {"engines.vllm": None, "engines.sglang": None}
_NO_DRAFT = {**_LLAMA, "draft": None}


@pytest.fixture(scope="module")
def help_text() -> str | None:
    """The installed llama-server's own --help (None: the stored copy of b11434's)."""
    binary = find_llama_server()
    if binary is None:
        return None
    out = subprocess.run([str(binary), "--help"], capture_output=True, text=True,
                         timeout=60, check=False)
    return out.stdout or None


def _render(mirror: Mirror, bundle: BundleFactory, **changes: Any) -> list[str]:
    rec = bundle(**changes)
    return list(build_serve_command(rec, "llamacpp", mirror=mirror).argv)


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_draft_mtp_renders_without_a_draft(mirror: Mirror, bundle: BundleFactory,
                                          help_text: str | None) -> None:
    argv = _render(mirror, bundle, **_NO_DRAFT, **{
        "speculative.method": "mtp", "speculative.num_speculative_tokens": 2,
        "engines.llamacpp.spec_type": "draft-mtp"})
    check_llamacpp(argv, help_text)
    assert _value(argv, "--spec-type") == "draft-mtp"
    assert "--spec-draft-model" not in argv
    assert _value(argv, "--spec-draft-n-max") == "2"  # K, not llama.cpp's default 3
    # b11434's MTP drafter stops below p_min; its default 0.00 always fills the window
    assert _value(argv, "--spec-draft-p-min") == "0.75"
    assert lint_bundle(read_unsigned(mirror, "llama-pair")).ok


@pytest.mark.parametrize(("spec_type", "flags"), [
    ("ngram-simple", {"--spec-ngram-simple-size-m": "5"}),
    ("ngram-map-k", {"--spec-ngram-map-k-size-m": "5"}),
    ("ngram-map-k4v", {"--spec-ngram-map-k4v-size-m": "5"}),
    # n_min below n_max (llama.cpp's 48/64 proportion): n_min = n_max drafts only full matches
    ("ngram-mod", {"--spec-ngram-mod-n-max": "5", "--spec-ngram-mod-n-min": "3"}),
])
def test_ngram_types_get_the_spec_k(mirror: Mirror, bundle: BundleFactory,
                                    help_text: str | None, spec_type: str,
                                    flags: dict[str, str]) -> None:
    argv = _render(mirror, bundle, **_NO_DRAFT, **{
        "speculative.method": "ngram", "speculative.num_speculative_tokens": 5,
        "engines.llamacpp.spec_type": spec_type})
    check_llamacpp(argv, help_text)
    assert {f: _value(argv, f) for f in flags} == flags
    report = lint_bundle(read_unsigned(mirror, "llama-pair"))
    assert report.ok and not [f for f in report.warnings if "K" in f.message], report.findings


def test_ngram_cache_warns_that_k_is_not_passed(mirror: Mirror, bundle: BundleFactory) -> None:
    bundle(**_NO_DRAFT, **{"speculative.method": "ngram",
                           "engines.llamacpp.spec_type": "ngram-cache"})
    hits = [f for f in lint_bundle(read_unsigned(mirror, "llama-pair")).warnings
            if "ngram-cache has no draft-length flag" in f.message]
    assert len(hits) == 1


def test_a_draft_type_without_a_draft_is_still_an_error(mirror: Mirror,
                                                        bundle: BundleFactory) -> None:
    bundle(**_NO_DRAFT, **{"speculative.method": "ngram",
                           "engines.llamacpp.spec_type": "draft-simple"})
    errors = [f.message for f in lint_bundle(read_unsigned(mirror, "llama-pair")).errors]
    assert any("needs a draft model" in m for m in errors), errors


def test_stored_help_is_the_pinned_build() -> None:
    text = (Path(__file__).parent / "data" / "llama-server-help.txt").read_text()
    assert "draft-mtp" in text and "--spec-ngram-mod-n-max" in text
