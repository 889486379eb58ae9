"""Foreign exceptions that reach the CLI's edge become one line and the exit code of their kind.

A command module that raises is plugged in through the public :data:`specbundle.cli.COMMANDS`
table; what is tested is :func:`specbundle.cli.main` and :mod:`specbundle.cli._errors` as they
are. The table below is the promise: the machine lacking something (disk, permission, memory,
network) is 6, Ctrl-C is 130, input the strict reader refused is 3, anything else that escaped
the library unwrapped is 1 ("report it").
"""

from __future__ import annotations

import errno
import json
import sys
import types
from collections.abc import Callable

import click
import docker.errors
import httpx
import pydantic
import pytest
import yaml

from specbundle import cli
from specbundle.strict import MalformedDocument
from tests.lib.cli import run_cli

_TOKEN = "hf_" + "a1B2c3D4e5F6g7H8"


def _validation_error() -> pydantic.ValidationError:
    class _M(pydantic.BaseModel):
        n: int

    try:
        _M.model_validate({"n": "x"})
    except pydantic.ValidationError as ex:
        return ex
    raise AssertionError("pydantic accepted a string for an int")


#: id -> (builds the exception, exit code, kind)
_CASES: dict[str, tuple[Callable[[], BaseException], int, str]] = {
    "enospc": (lambda: OSError(errno.ENOSPC, "No space left on device", "/m/x"), 6, "environment"),
    "permission": (lambda: PermissionError(errno.EACCES, "Permission denied", "/m"), 6,
                   "environment"),
    "connect": (lambda: httpx.ConnectError(f"refused https://u:{_TOKEN}@hub.local/"), 6,
                "environment"),
    "memory": (MemoryError, 6, "environment"),
    "validation": (_validation_error, 1, "internal"),
    "yaml": (lambda: yaml.YAMLError(f"bad token {_TOKEN}"), 1, "internal"),
    "json": (lambda: json.JSONDecodeError("Expecting value", "{", 1), 1, "internal"),
    "docker": (lambda: docker.errors.DockerException("daemon gone"), 1, "internal"),
    "unicode": (lambda: UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 1,
                "internal"),
    "interrupt": (KeyboardInterrupt, 130, "interrupted"),
    # the strict reader refused input no stage wrapped: the input's fault, not the tool's
    "malformed": (lambda: MalformedDocument(f"x.json: duplicate key 'a' {_TOKEN}"), 3,
                  "malformed"),
}


@pytest.fixture
def raiser(monkeypatch: pytest.MonkeyPatch) -> str:
    """Register ``raise-test CASE``: a command whose body raises ``_CASES[CASE]``'s exception."""

    @click.command()
    @click.argument("case")
    @click.option("--json", "as_json", is_flag=True)
    def command(case: str, as_json: bool) -> None:
        raise _CASES[case][0]()

    module = types.ModuleType("specbundle.cli._raise_test")
    module.command = command  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.COMMANDS, "raise-test", ("_raise_test", "test only"))
    monkeypatch.delenv("SPECBUNDLE_DEBUG", raising=False)
    return "raise-test"


@pytest.mark.parametrize("case", list(_CASES))
def test_foreign_exception_is_one_line_with_its_exit_code(
        case: str, raiser: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, code, kind = _CASES[case]
    got, out, err = run_cli(capsys, raiser, case)
    assert got == code, err
    assert "Traceback" not in err and out == ""
    first, *rest = err.strip().splitlines()
    assert first.startswith(f"error ({kind}): ")
    assert rest == (["  hint: rerun with --debug for a traceback and report it"]
                    if kind == "internal" else [])
    assert _TOKEN not in err and "u:" not in err
    got, out, err = run_cli(capsys, raiser, case, "--json")
    assert got == code
    doc = json.loads(out)["error"]
    assert (doc["exit_code"], doc["kind"]) == (code, kind) and _TOKEN not in out


def test_secrets_in_foreign_messages_are_redacted(
        raiser: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, err = run_cli(capsys, raiser, "connect")
    assert "https://<redacted>@hub.local/" in err
    _, _, err = run_cli(capsys, raiser, "yaml")
    assert "hf_<redacted>" in err
