"""Regenerate the real-torch fixtures of tests/scan/pickles/test_real_torch.py (needs torch; the tests
do not). Run from this folder: ``python make_fixtures.py`` (made with torch 2.13.0+cpu)."""

from __future__ import annotations

import collections
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).parent
torch.manual_seed(0)


class Eagle(nn.Module):
    """An EAGLE-3-like draft head: fc over [hidden, embed], one decoder layer, d2t/t2d maps."""

    def __init__(self, d: int = 8, vocab: int = 16) -> None:
        super().__init__()
        self.fc = nn.Linear(2 * d, d)
        self.layers = nn.ModuleList([nn.ModuleDict({
            "self_attn": nn.ModuleDict({n: nn.Linear(d, d, bias=False)
                                        for n in ("q_proj", "k_proj", "v_proj", "o_proj")}),
            "input_layernorm": nn.RMSNorm(d),
        })])
        self.d2t = nn.Parameter(torch.arange(vocab), requires_grad=False)
        self.register_buffer("t2d", torch.ones(vocab, dtype=torch.bool))


class Mtp(nn.Module):
    """A DeepSeek-style MTP module: enorm/hnorm, eh_proj, shared head."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.enorm, self.hnorm = nn.RMSNorm(d), nn.RMSNorm(d)
        self.eh_proj = nn.Linear(2 * d, d, bias=False)
        self.shared_head = nn.ModuleDict({"norm": nn.RMSNorm(d), "head": nn.Linear(d, 16)})


class Tiny(nn.Module):
    """A tiny transformer: tied embedding, encoder layer, BatchNorm (an int64 buffer)."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, d)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, 2, dim_feedforward=8, batch_first=True), 1,
            enable_nested_tensor=False)
        self.bn = nn.BatchNorm1d(d)
        self.lm_head = nn.Linear(d, 16, bias=False)
        self.lm_head.weight = self.embed.weight


def dtypes() -> dict[str, torch.Tensor]:
    names = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8",
             "uint8", "bool", "complex64", "complex128", "complex32", "uint16", "uint32",
             "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
             "float8_e8m0fnu")
    out = {n: torch.zeros(2, dtype=getattr(torch, n)) for n in names}
    out["float4_e2m1fn_x2"] = torch.zeros(2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    return out


def views() -> dict[str, torch.Tensor]:
    base = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    return {"base": base, "tied": base, "row": base[2], "slice": base[1:3, 1:],
            "transposed": base.t(), "strided": base[:, ::2], "expanded": torch.ones(1, 3).expand(
                2, 3), "scalar": torch.tensor(1.5), "empty": torch.empty(0),
            "empty2d": torch.empty(0, 3, dtype=torch.float16),
            "channels_last": torch.zeros(1, 2, 2, 2).to(memory_format=torch.channels_last),
            "param": nn.Parameter(torch.ones(2)), "grad": torch.ones(2, requires_grad=True)}


def values() -> dict[str, object]:
    return {"epoch": 3, "big": 2 ** 100, "lr": 1e-4, "name": "tête ✓", "none": None,
            "flag": True, "bytes": b"\x00\xff", "empty_bytes": b"", "ba": bytearray(b"ab"),
            "set": {1, 2}, "fset": frozenset({3}), "complex": 1 + 2j,
            "counter": collections.Counter("aab"), "special": [float("inf"), float("nan")],
            "nested": {"a": [1, (2, "x"), {"b": torch.zeros(1)}]},
            "od": collections.OrderedDict(a=torch.ones(1)), "size": torch.Size([2, 3]),
            "device": torch.device("cuda", 1), "dtype": torch.bfloat16}


def exotic() -> dict[str, object]:
    t = torch.ones(2)
    t.note = "attr"  # a tensor with attributes: _rebuild_from_type_v2
    p = nn.Parameter(torch.ones(2))
    p.note = "attr"  # _rebuild_parameter_with_state
    return {"meta": torch.empty(2, 3, device="meta"), "coo": torch.eye(2).to_sparse(),
            "csr": torch.eye(2).to_sparse_csr(),
            "nested": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
            "q": torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8),
            "qc": torch.quantize_per_channel(torch.ones(2, 2), torch.tensor([0.1, 0.2]),
                                             torch.tensor([0, 0]), 0, torch.quint8),
            "attr": t, "param_attr": p, "untyped": torch.ones(2).untyped_storage()}


def save(name: str, obj: object, *, loads: bool = True, **kw: object) -> None:
    path = HERE / name
    torch.save(obj, path, **kw)  # the archive's folder is the file's stem
    assert path.stat().st_size < 20_000, (name, path.stat().st_size)
    if loads:
        torch.load(path, weights_only=False)


def main() -> None:
    legacy = {"_use_new_zipfile_serialization": False}
    save("eagle_bf16.pt", Eagle().to(torch.bfloat16).state_dict())
    save("eagle_bf16_legacy.bin", Eagle().to(torch.bfloat16).state_dict(), **legacy)
    save("mtp_fp16_p4.pt", Mtp().half().state_dict(), pickle_protocol=4)
    save("tiny_transformer_p5.bin", Tiny().state_dict(), pickle_protocol=5)
    save("tiny_transformer_legacy.bin", Tiny().state_dict(), **legacy)
    save("dtypes.pt", dtypes())
    save("views.pt", views())
    save("views_legacy.pt", views(), **legacy)
    save("values_p2.pt", values())
    save("values_p2_legacy.pt", values(), **legacy)
    save("values_p4.pt", values(), pickle_protocol=4)
    save("exotic.pt", exotic())
    save("checkpoint-00001-of-00002.bin", {"model": Mtp().state_dict(), "step": 1})
    # a non-ASCII file name: torch names the archive folder "archive"
    torch.save(Mtp().state_dict(), HERE / "modèle.pt")
    (HERE / "modèle.pt").replace(HERE / "nonascii_stem.pt")
    # blocked even where pickles are allowed: a pickled class; a legacy file torch cannot load
    # (its loader reads the dtype of torch.storage.UntypedStorage, which has none)
    save("whole_module.pt", nn.Linear(2, 2))
    save("uint16_legacy.pt", {"w": torch.zeros(2, dtype=torch.uint16)}, loads=False, **legacy)


if __name__ == "__main__":
    main()
