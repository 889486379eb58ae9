"""Hostile strings render into every target and parse back, with each format's own parser.

Whatever a value holds (newlines, quotes, ``$``, ``%``, backslashes, C1 and Unicode line
separators), each target's quoting keeps it one value: the shell script runs and hands the
engine the exact argv, the YAML and compose files load to the exact lists, and the systemd
unit passes ``systemd-analyze verify`` with exactly the settings the template writes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specbundle import __version__
from specbundle.errors import SpecError
from specbundle.mirror import Mirror
from specbundle.render import TARGETS, build_serve_command
from specbundle.render.interface import RenderMeta, ServeCommand
from specbundle.spec import EngineName, parse_spec
from tests.lib.bundles import BundleFactory
from tests.lib.specs import spec_dict

FIXED = ["a\nExecStartPre=+/bin/sh -c id", "b\"c d\\e", "50%x$HOME ${HOME} $$", "'; rm -rf / #",
         "tab\there\x85next\u2028line\u2029para\rcr\x0bvt\x0cff\x1bESC\x7fDEL", "é ✓ \U0001f600",
         "- item", "key: value", "{{ jinja }}", "&anchor *alias !tag", "`id` $(id)", "\\", ""]
_ALPHABET = "ab \t\n\r\"'\\$%`;&|#:-*!{}[]\x0b\x0c\x1b\x7f\x85\x9f\u2028\u2029é"


def _hostile() -> list[str]:
    rng = random.Random(22)  # a fixed seed: the same cases every run
    return FIXED + ["".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 24)))
                    for _ in range(40)]


def _command(mirror: Mirror, bundle: BundleFactory, tmp: Path, args: list[str],
             env_value: str) -> ServeCommand:
    base = build_serve_command(bundle(), "llamacpp", mirror=mirror)
    helper = tmp / "engine"
    helper.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      "with open(os.environ['ARGV_OUT'], 'w') as f:\n"
                      "    json.dump([sys.argv[1:], os.environ['SB_HOSTILE']], f)\n")
    helper.chmod(0o755)
    model = tmp / "model.gguf"
    model.write_bytes(b"")
    return dataclasses.replace(base, program=(str(helper),), args=tuple(args),
                               env=(("SB_HOSTILE", env_value),), target_path=model,
                               draft_path=None, speculation=False)


def _meta() -> RenderMeta:
    return RenderMeta("llama-pair", EngineName.LLAMACPP, "org/t@" + "a" * 40, None, __version__)


def _render(target: str, cmd: ServeCommand) -> str:
    (f, *_) = TARGETS[target].render(cmd, cmd, _meta())
    return f.content


@pytest.fixture
def hostile_cmd(mirror: Mirror, bundle: BundleFactory, tmp_path: Path) -> ServeCommand:
    values = _hostile()
    return _command(mirror, bundle, tmp_path, values, "\n".join(values))


def test_the_shell_script_parses_and_passes_the_exact_argv(hostile_cmd: ServeCommand,
                                                           tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(_render("shell", hostile_cmd))
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0
    out = tmp_path / "argv.json"
    env = {"PATH": os.environ["PATH"], "ARGV_OUT": str(out)}
    subprocess.run(["sh", str(script)], env=env, check=True, timeout=60)
    argv, value = json.loads(out.read_text())
    assert argv == [*hostile_cmd.args, hostile_cmd.host_flag, "127.0.0.1",
                    hostile_cmd.port_flag, str(hostile_cmd.port)]  # the script's defaults
    assert value == hostile_cmd.env_dict["SB_HOSTILE"]


def test_kubernetes_yaml_loads_to_the_exact_values(hostile_cmd: ServeCommand) -> None:
    docs = list(yaml.safe_load_all(_render("kubernetes", hostile_cmd)))
    (c,) = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"]
    assert c["command"] == [*hostile_cmd.container_program, *hostile_cmd.args,
                            *hostile_cmd.listen_args]
    assert {e["name"]: e["value"] for e in c["env"]} == hostile_cmd.env_dict


def test_compose_loads_and_interpolates_to_the_exact_values(hostile_cmd: ServeCommand) -> None:
    doc = yaml.safe_load(_render("compose", hostile_cmd))
    engine = doc["services"]["engine"]

    def interpolated(v: str) -> str:  # compose's rule: "$$" is a literal "$", "$X" expands
        assert re.search(r"(?<!\$)\$(?!\$)", v.replace("$$", "")) is None, v
        return v.replace("$$", "$")

    assert [interpolated(a) for a in engine["entrypoint"]] == [
        *hostile_cmd.container_program, *hostile_cmd.args, *hostile_cmd.listen_args]
    assert {k: interpolated(v) for k, v in engine["environment"].items()} == \
        hostile_cmd.env_dict


_SYSTEMD_KEY = re.compile(r"^([A-Za-z]+)=")


def _systemd_words(value: str) -> list[str]:
    """Split an ExecStart= value as systemd does (quotes, C escapes, %% and $$)."""
    words, i = [], 0
    value = value.replace("%%", "%")
    while i < len(value):
        if value[i] == " ":
            i += 1
            continue
        assert value[i] == '"', value[i:]
        buf = bytearray()
        i += 1
        while value[i] != '"':
            if value[i] == "\\":
                nxt = value[i + 1]
                if nxt == "x":
                    buf.append(int(value[i + 2:i + 4], 16))
                    i += 4
                    continue
                buf += nxt.encode()
                i += 2
                continue
            buf += value[i].encode()
            i += 1
        words.append(buf.decode().replace("$$", "$"))
        i += 1
    return words


def test_the_systemd_unit_keeps_every_value_in_its_setting(hostile_cmd: ServeCommand,
                                                           tmp_path: Path) -> None:
    unit = _render("systemd", hostile_cmd)
    template_keys = [m.group(1) for m in map(_SYSTEMD_KEY.match, _render(
        "systemd", dataclasses.replace(hostile_cmd, args=("plain",),
                                       env=(("SB_HOSTILE", "plain"),))).splitlines()) if m]
    keys = [m.group(1) for m in map(_SYSTEMD_KEY.match, unit.splitlines()) if m]
    assert keys == template_keys  # no injected setting, none lost
    (line,) = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    assert _systemd_words(line.removeprefix("ExecStart=")) == list(hostile_cmd.argv)
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: the unit's own parser was not run")
    path = tmp_path / "sb-hostile.service"
    path.write_text(unit)
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                         capture_output=True, text=True, check=False, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not re.search(r"Unknown|Invalid|ignoring|Unbalanced", res.stdout + res.stderr, re.I)


def test_a_systemd_path_with_a_control_character_is_refused(
        mirror: Mirror, bundle: BundleFactory, tmp_path: Path) -> None:
    from specbundle.errors import RenderError
    from specbundle.render.interface import Mount

    cmd = _command(mirror, bundle, tmp_path, ["x"], "y")
    bad = dataclasses.replace(cmd, mounts=(Mount(Path("/srv/mirror\nReadWritePaths=/"),
                                                 Path("/srv/mirror")),))
    with pytest.raises(RenderError, match="control character"):
        _render("systemd", bad)
    spaced = dataclasses.replace(cmd, mounts=(Mount(Path("/srv/my mirror"), Path("/m")),))
    assert 'ReadOnlyPaths="/srv/my mirror"' in _render("systemd", spaced)


@pytest.mark.parametrize(("field", "value"), [
    ("engines.llamacpp.n_gpu_layers", "99\nExecStart=+/bin/sh"),
    ("engines.llamacpp.extra_args", ["--x", "a\nb"]),
    ("engines.vllm.extra_args", ["--y\x85z"]),
    ("engines.vllm.image", "vllm/vllm-openai:v1\u2028x"),
    ("target.gguf_file", "t.\rgguf"),
])
def test_spec_strings_with_control_characters_are_refused_at_parse_time(
        field: str, value: object) -> None:
    doc = spec_dict()
    doc.setdefault("engines", {}).setdefault("vllm", {})
    doc["engines"].setdefault("llamacpp", {})
    node = doc
    *path, last = field.split(".")
    for k in path:
        node = node.setdefault(k, {})
    node[last] = value
    with pytest.raises(SpecError, match="control character") as err:
        parse_spec(doc)
    assert field.rsplit(".", 1)[0] in err.value.message
