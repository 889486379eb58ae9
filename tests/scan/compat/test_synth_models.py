"""The project's own synthetic models (specbundle.synth) must scan clean, and the malformed
EAGLE-3 heads it can build must not."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbundle.scan import ScanOptions, Severity, scan_tree
from specbundle.spec import SpecMethod
from specbundle.synth import SynthPair, make_eagle3_head, make_pair
from tests.scan.conftest import ids

_FAST = ScanOptions(second_opinions=False)


@pytest.fixture(scope="module")
def pair(module_tmp: Path) -> SynthPair:
    return make_pair(module_tmp, quality="good", hidden_size=64,
                     intermediate_size=128, target_layers=2, num_attention_heads=4)


def test_synth_pair_is_clean(pair: SynthPair) -> None:
    rep = scan_tree(pair.target_dir, draft=pair.draft_dir, method=SpecMethod.DRAFT_MODEL,
                    options=_FAST)
    assert ids(rep, Severity.INFO) == set()
    assert {t.file for t in rep.templates} == {"model.gguf#tokenizer.chat_template",
                                              "tokenizer_config.json"}


def test_synth_eagle3_heads(pair: SynthPair, tmp_path: Path) -> None:
    shape, target = pair.target.shape, pair.target_dir
    good = make_eagle3_head(tmp_path / "good", shape, draft_vocab_size=64)
    rep = scan_tree(target, draft=good, method=SpecMethod.EAGLE3, options=_FAST)
    assert {i for i in ids(rep) if i.startswith("compat.")} == set()
    unsorted = make_eagle3_head(tmp_path / "unsorted", shape, draft_vocab_size=4,
                                hot_ids=[3, 1, 2, 0])
    assert "compat.d2t" in ids(scan_tree(target, draft=unsorted, method=SpecMethod.EAGLE3,
                                         options=_FAST))
    assert "compat.method-mismatch" in ids(scan_tree(target, draft=good,
                                                     method=SpecMethod.DRAFT_MODEL,
                                                     options=_FAST))
