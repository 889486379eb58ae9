"""Every JSON/YAML parse in the library goes through the strict parser, except where listed.

Bytes from a hub, a registry, a transfer medium or a mirror on disk must be parsed with
duplicate keys refused and size and depth bounded (``specbundle.strict``): a lenient
``json.loads`` on one of them is a parser differential waiting for an attacker (two readers of
one ``model.sig`` or image manifest that disagree on which duplicate wins). This test finds
every call of the standard parsers and fails on one not in the list below, each with the
reason it may stay lenient; a new reader of untrusted bytes then has to use the strict one.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import specbundle

SRC = Path(specbundle.__file__).parent

LENIENT: dict[str, str] = {
    "strict.py": "the strict parser itself",
    "scan/jsonfile.py": "the scanner's own strict parse, and the lenient read of configs that "
                        "the config check has already parsed strictly (and blocks on)",
    "scan/configs/check.py": "the lenient readings (last or first duplicate wins, NaN, comments) that "
                       "transformers and other readers make of a config the strict parse has "
                       "already refused (HIGH): searched so that a payload only they see is found",
    "render/lint.py": "JSON in a rendered engine argv, read as the engine's own json.loads",
    "render/rules_cmd.py": "JSON in a rendered engine argv, read as the engine's own json.loads",
    "bench/tune.py": "JSON in a rendered engine argv, read as the engine's own json.loads",
    "render/vllm_oracle.py": "the last line our own oracle script prints",
    "render/_vllm_oracle_script.py": "runs inside the vLLM venv: our own request on stdin",
    "render/argrules.py": "a resource shipped inside the package",
    "scan/pickles/second_opinion.py": "the last line a second-opinion tool prints about a file",
    "scan/templates/render.py": "transformers' from_json filter inside the template sandbox",
    "bench/client.py": "the streamed responses of the engine under measurement",
    "bench/native.py": "the streamed responses of the engine under measurement",
}
_JSON = {"load", "loads", "JSONDecoder"}
_YAML = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all",
         "full_load_all", "unsafe_load_all"}


def _uses(tree: ast.AST) -> list[int]:
    def parser(module: str, name: str) -> bool:
        return name in (_JSON if module == "json" else _YAML if module == "yaml" else ())

    lines = []
    for node in ast.walk(tree):
        attr = (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and parser(node.value.id, node.attr))
        imported = isinstance(node, ast.ImportFrom) and any(
            parser(node.module or "", a.name) for a in node.names)
        if attr or imported:
            lines.append(getattr(node, "lineno", 0))
    return lines


def test_untrusted_bytes_are_parsed_strictly() -> None:
    found: dict[str, list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if lines := _uses(ast.parse(path.read_text(encoding="utf-8"))):
            found[rel] = lines
    unlisted = {rel: lines for rel, lines in found.items() if rel not in LENIENT}
    assert not unlisted, f"lenient JSON/YAML parse outside specbundle.strict: {unlisted}"
    stale = set(LENIENT) - set(found)
    assert not stale, f"listed as lenient but parse nothing any more: {stale}"


def test_duplicate_keys_in_hostile_documents_are_refused(tmp_path: Path) -> None:
    """Three of the readers this rule moved to the strict parser, each fed a duplicate key
    whose two values would otherwise let the last one win silently."""
    import io
    import tarfile

    import pytest

    from specbundle.attest import generate_key, open_model_sig
    from specbundle.attest.oms import OMS_BUNDLE_MEDIA_TYPE
    from specbundle.errors import MirrorError, VerificationError
    from specbundle.images.archive import inspect_archive
    from specbundle.scan.findings import ScanReport

    sig = json.dumps({"verificationMaterial": {}}).replace(
        "{", f'{{"mediaType": "x", "mediaType": "{OMS_BUNDLE_MEDIA_TYPE}", ', 1).encode()
    with pytest.raises(VerificationError, match="duplicate key 'mediaType'"):
        open_model_sig(sig, generate_key("ecdsa-p256").public)

    with pytest.raises(MirrorError, match="duplicate key 'subject'"):
        ScanReport.from_bytes(b'{"subject": "a", "subject": "b"}')

    archive = tmp_path / "image.tar"
    with tarfile.open(archive, "w") as tar:
        data = b'[{"Config": "c.json", "Config": "other.json", "Layers": []}]'
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(VerificationError, match="duplicate key 'Config'"):
        inspect_archive(archive)
