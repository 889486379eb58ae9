"""Run inside ``.venv-sglang``: SGLang's own ``ServerArgs`` parsing and resolution.

Reads a JSON list of argv lists (what follows ``python3 -m sglang.launch_server``) on stdin
and prints one JSON result per argv: the resolved speculative fields, the warnings SGLang
logged, or the error it raised. ``--device cuda`` is appended (``SGLANG_ORACLE_DEVICE``
overrides): resolution is what a GPU node decides (overlap scheduler, DFLASH, attention DP)
and needs no GPU itself; only the CUDA kernels it never calls would.

torchvision's PyPI wheel is built against CUDA torch and the venv has the CPU torch, so
its ``_C`` kernels do not load; SGLang imports torchvision only for multimodal
preprocessing that argument resolution never calls (see :func:`_torchvision_on_cpu_torch`).
"""

from __future__ import annotations

import json
import logging
import os
import sys

_KEEP = ("max_running_requests", "disable_overlap_schedule", "device", "enable_mixed_chunk",
         "attn_dp_size", "dp_size", "enable_dp_lm_head")


def _torchvision_on_cpu_torch() -> None:
    """Declare the two ops torchvision's fake-kernel registrations need before importing it.

    Its compiled ``_C`` (built against CUDA torch) does not load on CPU torch, so
    ``torchvision::nms``/``qnms`` would not exist and ``import torchvision`` would fail at
    ``register_fake``. Declared here as schemas with no kernel: calling one fails loudly.
    """
    import torch

    lib = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _KEEP_ALIVE.append(lib)
    import torchvision  # noqa: F401


_KEEP_ALIVE: list[object] = []


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _flags() -> dict[str, str]:
    """Every option string of SGLang's own ``sglang serve`` parser -> its value kind."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    out = {}
    for a in parser._actions:
        if a.nargs == 0:
            kind = "bool"
        elif a.choices is not None:
            kind = "choice"
        else:
            kind = {int: "int", float: "float"}.get(a.type, "str")  # type: ignore[call-overload]
        for s in a.option_strings:
            out[s] = kind
    return out


def _choices() -> dict[str, list[str]]:
    """Option strings with argparse choices -> the choices, as text."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return {s: [str(c) for c in a.choices] for a in parser._actions
            if a.choices is not None for s in a.option_strings}


def main() -> None:
    _torchvision_on_cpu_torch()
    import sglang
    from sglang.srt.server_args import prepare_server_args

    if sys.argv[1:] == ["--list-flags"]:
        sys.stdout.write(json.dumps(_flags()))
        return
    if sys.argv[1:] == ["--list-choices"]:
        sys.stdout.write(json.dumps(_choices()))
        return
    if sys.argv[1:] == ["--list-algorithms"]:
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        from sglang.srt.speculative.spec_registry import _RESERVED_ALIASES
        names = [a.name for a in SpeculativeAlgorithm if a.name != "NONE"]
        sys.stdout.write(json.dumps(sorted([*names, *_RESERVED_ALIASES])))
        return

    out = []
    for argv in json.loads(sys.stdin.read()):
        cap = _Capture()
        res: dict[str, object] = {"version": sglang.__version__}
        try:
            device = os.environ.get("SGLANG_ORACLE_DEVICE", "cuda")
            sa = prepare_server_args([*argv, "--device", device])
            root = logging.getLogger()
            root.addHandler(cap)
            try:
                sa.resolve_once()
            finally:
                root.removeHandler(cap)
            d = sa.resolved_dict()
            res["resolved"] = {k: v for k, v in d.items()
                               if k.startswith("speculative_") or k in _KEEP}
        except SystemExit as err:  # argparse refuses the command line
            res["error"] = f"argparse: exit {err.code}"
        except Exception as err:  # noqa: BLE001 - whatever SGLang raises is the verdict
            res["error"] = f"{type(err).__name__}: {err}"
        res["warnings"] = cap.lines
        out.append(res)
    sys.stdout.write(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
