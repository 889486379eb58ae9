"""Lint rules on the rendered command lines: llama.cpp flags, paths, hub references, images.

These look at argv and env exactly as a target would write them, so anything that reaches a
manifest (including ``extra_args``) is covered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from specbundle.render.argrules import (
    LLAMACPP_HUB_FLAGS,
    LLAMACPP_REMOVED_FLAGS,
    SGLANG_FLAGS,
    SGLANG_HUB_FLAGS,
    VLLM_FLAGS,
    VLLM_HUB_FLAGS,
    VLLM_TABLE_VERSION,
    ArgRule,
    canonical_flag,
)
from specbundle.render.lint import Finding, LintInput, Rule, finding
from specbundle.render.llamacpp import PROMPT_ALLOWANCE, slot_context, slot_need
from specbundle.render.paths import METHOD_WORDS, is_pinned, method_words_in
from specbundle.spec import EngineName, SpecMethod

__all__ = ["COMMAND_RULES", "LLAMACPP_SPEC_TYPES", "flag_value"]

V, S, L = EngineName.VLLM, EngineName.SGLANG, EngineName.LLAMACPP
_URL_RE = re.compile(r"\b(?:https?|hf|s3|gs|ftp|oci)://", re.IGNORECASE)
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_P_MIN_ZERO_N_MAX = 8
_DRAFT_FLAGS = ("--spec-draft-model", "-md", "--model-draft")

#: Which ``--spec-type`` values fit a method (EAGLE-1 and Medusa have none in llama.cpp).
LLAMACPP_SPEC_TYPES: dict[SpecMethod, tuple[str, ...]] = {
    SpecMethod.DRAFT_MODEL: ("draft-simple",), SpecMethod.EAGLE3: ("draft-eagle3",),
    SpecMethod.MTP: ("draft-mtp",), SpecMethod.DFLASH: ("draft-dflash",),
    SpecMethod.DSPARK: ("draft-dspark",),
    SpecMethod.NGRAM: ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
                       "ngram-cache"),
}


def flag_value(argv: tuple[str, ...], *names: str) -> str | None:
    """The value of the first of ``names`` on a command line (``--f v`` or ``--f=v``)."""
    for i, a in enumerate(argv):
        if a in names and i + 1 < len(argv):
            return argv[i + 1]
        for n in names:
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


# -- llama.cpp --------------------------------------------------------------------------------
def _llamacpp_draft_without_type(inp: LintInput) -> Iterator[Finding]:
    """A draft without ``--spec-type`` (default none) is loaded and never used (#25345)."""
    argv = inp.argv(L)
    spec_type = flag_value(argv, "--spec-type")
    if flag_value(argv, *_DRAFT_FLAGS) is not None and spec_type in (None, "none"):
        yield finding("llamacpp-draft-without-spec-type", "error", "argv: --spec-draft-model",
                      "a draft model is loaded but --spec-type is none (the default), so "
                      "llama-server never speculates and prints no warning.",
                      "set engines.llamacpp.spec_type (e.g. draft-simple)", L)


def _llamacpp_spec_type(inp: LintInput) -> Iterator[Finding]:
    """The ``--spec-type`` must run the spec's method, with a draft where it needs one."""
    argv = inp.argv(L)
    if L not in inp.commands and inp.spec.engines.llamacpp is None:
        return
    spec_type = flag_value(argv, "--spec-type")
    has_draft = flag_value(argv, *_DRAFT_FLAGS) is not None
    method = inp.spec.speculative.method
    allowed = LLAMACPP_SPEC_TYPES.get(method, ())
    types = [t for t in (spec_type or "").split(",") if t and t != "none"]
    if not allowed:
        yield finding("llamacpp-spec-type-method", "error", "speculative.method",
                      f"llama.cpp has no speculative type for method {method.value}.",
                      "drop engines.llamacpp or choose draft_model/eagle3/mtp/dflash/dspark/ngram",
                      L)
    elif types and not set(types) & set(allowed):
        yield finding("llamacpp-spec-type-method", "error", "engines.llamacpp.spec_type",
                      f"--spec-type {spec_type} does not run method {method.value}.",
                      f"set spec_type to {' or '.join(allowed)}", L)
    # b11434's draft-mtp drafts from the target's own nextn tensors: no draft model needed.
    if any(t.startswith("draft-") and t != "draft-mtp" for t in types) and not has_draft:
        yield finding("llamacpp-spec-type-method", "error", "engines.llamacpp.spec_type",
                      f"--spec-type {spec_type} needs a draft model, and none is rendered.",
                      "use an ngram-* or draft-mtp spec_type, or add a draft artifact with "
                      "gguf_file", L)
    p_min = flag_value(argv, "--spec-draft-p-min", "--draft-p-min")
    if "draft-dspark" in types and p_min is not None and float(p_min) > 0.0:
        # common/speculative.cpp b11434: p_min > 0 reads the draft's confidence head and
        # throws "DSpark draft has no confidence head" at startup when the GGUF has none
        yield finding("llamacpp-spec-type-method", "warning", "engines.llamacpp.draft_p_min",
                      f"draft-dspark with p_min {p_min} needs a draft whose GGUF has a "
                      "confidence head (dflash.has_confidence_head); without one llama-server "
                      "refuses to start.", "set draft_p_min: 0 unless the draft has one", L)
    if "ngram-cache" in types:
        yield finding("llamacpp-spec-type-method", "warning", "engines.llamacpp.spec_type",
                      "ngram-cache has no draft-length flag in llama-server, so "
                      f"num_speculative_tokens={inp.spec.speculative.num_speculative_tokens} "
                      "is not passed and llama.cpp's own lookup length runs.",
                      "use ngram-simple, ngram-map-k, ngram-map-k4v or ngram-mod, whose "
                      "length render pins to K", L)


def _llamacpp_p_min(inp: LintInput) -> Iterator[Finding]:
    """p_min 0.0 never stops drafting early: a wide window is always filled (#25908)."""
    argv = inp.argv(L)
    p_min = flag_value(argv, "--spec-draft-p-min", "--draft-p-min")
    n_max = flag_value(argv, "--spec-draft-n-max")
    if p_min is not None and float(p_min) == 0.0 and n_max and int(n_max) >= _P_MIN_ZERO_N_MAX:
        yield finding("llamacpp-p-min-zero", "warning", "engines.llamacpp.draft_p_min",
                      f"p_min 0.0 with n_max {n_max}: the drafter always fills all {n_max} "
                      "positions however unsure it is (llama.cpp #25908: 0.07 acceptance).",
                      "set draft_p_min to about 0.75, or lower draft_n_max", L)


def _llamacpp_slot_context(inp: LintInput) -> Iterator[Finding]:
    """Each slot must hold a whole request: llama.cpp splits --ctx-size over --parallel."""
    argv = inp.argv(L)
    c, n = flag_value(argv, "--ctx-size", "-c"), flag_value(argv, "--parallel", "-np")
    if not argv or c is None or not c.isdigit():
        return
    slots = int(n) if n is not None and n.lstrip("-").isdigit() and int(n) > 0 else 1
    unified = any(a in ("--kv-unified", "-kvu") for a in argv)
    sc = slot_context(int(c), slots, unified=unified)
    need = slot_need(inp.spec)
    why = (f"prompt allowance {PROMPT_ALLOWANCE} + bench.max_tokens "
           f"{inp.spec.bench.max_tokens} = {need} tokens")
    if not unified and sc.per_slot < need:
        yield finding("llamacpp-slot-context", "error", "engines.llamacpp.ctx_size",
                      f"--ctx-size {c} over --parallel {slots} gives each slot {sc.per_slot} "
                      f"tokens (llama.cpp b11434: pad256(ctx / slots)), less than a request "
                      f"needs ({why}): generations stop as truncated and the benchmark "
                      "measures short outputs.",
                      f"set ctx_size to at least {slots * need} (or leave it unset: render "
                      "sizes it), or kv_unified: true", L)
    elif unified and sc.pool < need * inp.spec.deployment.p95_concurrency:
        p95 = inp.spec.deployment.p95_concurrency
        yield finding("llamacpp-slot-context", "warning", "engines.llamacpp.ctx_size",
                      f"--kv-unified: the {slots} slots share one pool of {sc.pool} tokens; "
                      f"at P95 concurrency {p95} requests need {p95 * need} ({why} each), so "
                      "requests wait for KV space or are cut.",
                      f"set ctx_size to at least {p95 * need}", L)


def _llamacpp_removed(inp: LintInput) -> Iterator[Finding]:
    """Removed ``--draft-*`` flags are fatal at startup."""
    for a in inp.argv(L):
        name = a.split("=", 1)[0]
        if name in LLAMACPP_REMOVED_FLAGS:
            yield finding("llamacpp-removed-flag", "error", f"argv: {name}",
                          f"{name} was removed from llama-server; it refuses to start.",
                          f"use {LLAMACPP_REMOVED_FLAGS[name]}", L)


# -- every engine -----------------------------------------------------------------------------
def _method_word_paths(inp: LintInput) -> Iterator[Finding]:
    """vLLM rewrites the method when the draft path contains a method word (#47486)."""
    for eng, cmd in inp.commands.items():
        for role, path in (("target", cmd.target_path), ("draft", cmd.draft_path)):
            words = method_words_in(path) if path is not None else []
            if words:
                yield finding("model-path-method-word", "error", f"{role} path {path}",
                              f"contains {', '.join(repr(w) for w in words)}; vLLM infers (and "
                              "overrides) the speculative method from such paths, and a "
                              "manifest must not depend on a path's wording.",
                              "use a bundle name and mirror directory without "
                              f"{'/'.join(METHOD_WORDS)}", eng)


def _hub_flags(eng: EngineName) -> frozenset[str]:
    return {V: VLLM_HUB_FLAGS, S: SGLANG_HUB_FLAGS, L: LLAMACPP_HUB_FLAGS}[eng]


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _hub_reference(inp: LintInput) -> Iterator[Finding]:
    """No hub id, download flag or network URL may reach a manifest of the isolated side."""
    for eng, cmd in inp.commands.items():
        for i, a in enumerate(cmd.argv):
            name = a.split("=", 1)[0]
            if name in _hub_flags(eng):
                yield finding("hub-reference", "error", f"argv: {name}",
                              f"{name} makes the engine download or authenticate to a hub.",
                              "remove it; serve the local paths in the mirror", eng)
            values = [a]
            if a.startswith("{"):
                try:
                    values = list(_strings(json.loads(a)))
                except ValueError:
                    values = [a]
            prev = cmd.argv[i - 1] if i else ""
            for v in values:
                if _URL_RE.search(v):
                    yield finding("hub-reference", "error", f"argv: {prev or a}",
                                  f"{v!r} is a network URL; the isolated side has no network.",
                                  "replace it with a path inside the mirror", eng)
                elif _REPO_ID_RE.match(v) and not prev.endswith(("-name", "--alias")):
                    yield finding("hub-reference", "error", f"argv: {prev or a}",
                                  f"{v!r} looks like a hub repo id, which cannot resolve offline.",
                                  "use the absolute local path inside the mirror", eng)
        for key, value in cmd.env:
            if _URL_RE.search(value):
                yield finding("hub-reference", "error", f"env: {key}",
                              f"{value!r} is a network URL.", "remove it", eng)


def _image_pinned(inp: LintInput) -> Iterator[Finding]:
    """Container targets deploy an image by digest, so every node runs the same bytes."""
    if inp.container_target is False:
        return
    for eng, cmd in inp.commands.items():
        if not is_pinned(cmd.image):
            blocking = inp.container_target is True and not inp.allow_unpinned_image
            sev = "error" if blocking else "warning"
            yield finding("image-unpinned", sev, f"engines.{eng.value}.image",
                          f"{cmd.image!r} is not pinned by digest; a tag can point at "
                          "different bytes on each node (blocks the compose and kubernetes "
                          "targets unless --allow-unpinned-image).",
                          "pass --image-digest sha256:<digest> (from `docker image inspect` on "
                          "the isolated side) or put image@sha256:... in the spec", eng)


def _unknown_flags(inp: LintInput) -> Iterator[Finding]:
    """Extra flags outside the vLLM/SGLang argument tables are probably typos.

    vLLM's table is dumped from the pinned release itself, so an unknown vLLM flag is a
    certain refusal at startup (an error); SGLang's is transcribed (a warning).
    """
    tables: dict[EngineName, dict[str, ArgRule]] = {V: VLLM_FLAGS, S: SGLANG_FLAGS}
    for eng, table in tables.items():
        settings = getattr(inp.spec.engines, eng.value)
        for a in settings.extra_args if settings is not None else ():
            if a.startswith("-") and canonical_flag(a, table) is None \
                    and a.split("=", 1)[0] not in _hub_flags(eng):
                where = f"engines.{eng.value}.extra_args: {a}"
                if eng == V:
                    yield finding("unknown-engine-flag", "error", where,
                                  f"vLLM {VLLM_TABLE_VERSION} has no flag {a.split('=', 1)[0]}; "
                                  "it refuses to start (unrecognized arguments).",
                                  "remove it or use the flag this vLLM release names", eng)
                    continue
                yield finding("unknown-engine-flag", "warning", where,
                              f"{a} is not in specbundle's captured {eng.value} argument table; "
                              "an unknown flag stops the engine at startup.",
                              "check the spelling against the engine version you ship", eng)


def _choice_misses(extra: tuple[str, ...], table: dict[str, ArgRule]
                   ) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(flag, value, choices) for each extra flag given a value outside its choices."""
    for i, a in enumerate(extra):
        name = canonical_flag(a, table) if a.startswith("-") else None
        rule = table.get(name) if name else None
        if name is None or rule is None or rule.kind != "choice":
            continue
        value = a.split("=", 1)[1] if "=" in a else (extra[i + 1] if i + 1 < len(extra) else "")
        if value not in rule.choices:
            yield name, value, rule.choices


def _vllm_flag_choices(inp: LintInput) -> Iterator[Finding]:
    """A vLLM extra flag with fixed choices must be given one of them (argparse refuses)."""
    settings = inp.spec.engines.vllm
    extra = tuple(settings.extra_args) if settings is not None else ()
    for name, value, choices in _choice_misses(extra, VLLM_FLAGS):
        yield finding("vllm-flag-choice", "error", f"engines.vllm.extra_args: {name}",
                      f"{value!r} is not a choice of {name} in vLLM {VLLM_TABLE_VERSION} "
                      f"({', '.join(choices)}); it refuses to start.",
                      f"use one of {', '.join(choices)}", V)


def _sglang_flag_choices(inp: LintInput) -> Iterator[Finding]:
    """An SGLang extra flag with argparse choices must be given one of them."""
    settings = inp.spec.engines.sglang
    extra = tuple(settings.extra_args) if settings is not None else ()
    for name, value, choices in _choice_misses(extra, SGLANG_FLAGS):
        yield finding("sglang-flag-choice", "error", f"engines.sglang.extra_args: {name}",
                      f"{value!r} is not a choice of {name} in SGLang 0.5.23 "
                      f"({', '.join(choices)}); argparse refuses it and the server never "
                      "starts.", f"use one of {', '.join(choices[:12])}", S)


def _extra_args_override(inp: LintInput) -> Iterator[Finding]:
    """An extra flag that repeats a rendered one silently replaces the linted value."""
    for eng, cmd in inp.commands.items():
        settings = getattr(inp.spec.engines, eng.value)
        extra = tuple(settings.extra_args) if settings is not None else ()
        if not extra:
            continue
        rendered = cmd.args[: len(cmd.args) - len(extra)] + cmd.listen_args
        owned = {a.split("=", 1)[0] for a in rendered if a.startswith("-")}
        for a in extra:
            name = a.split("=", 1)[0]
            if name in owned:
                yield finding("extra-args-override", "error",
                              f"engines.{eng.value}.extra_args: {name}",
                              f"{name} is already set by specbundle; the engine keeps the last "
                              "value, so the one lint checked is not the one that runs.",
                              f"remove {name} from extra_args and set the spec field instead",
                              eng)


def _model_files(inp: LintInput) -> Iterator[Finding]:
    """What each engine loads must be in the pulled file set, or it fails at startup."""
    if not inp.artifact_files:
        return
    needs: dict[EngineName, dict[str, list[str]]] = {}
    for eng in inp.commands:
        roles: dict[str, list[str]] = {}
        for role in ("target", "draft"):
            art = getattr(inp.spec, role)
            if art is None:
                continue
            if eng == L:
                roles[role] = [art.gguf_file] if art.gguf_file else []
            else:
                roles[role] = ["config.json"]
        needs[eng] = roles
    for eng, roles in needs.items():
        for role, wanted in roles.items():
            have = inp.artifact_files.get(role, frozenset())
            for path in (w for w in wanted if w not in have):
                yield finding("model-files-missing", "error", f"{role}: {path}",
                              f"{eng.value} loads {path} from the {role}, but the bundle's "
                              f"{role} has no such file, so the engine cannot start.",
                              f"add {path} to {role}.allow_patterns (or fix gguf_file) and "
                              "pull again", eng)


def _metrics_off(inp: LintInput) -> Iterator[Finding]:
    """The benchmark and operators read acceptance from logs and /metrics."""
    if "--disable-log-stats" in inp.argv(V):
        yield finding("metrics-disabled", "warning", "engines.vllm.extra_args",
                      "--disable-log-stats hides the SpecDecoding metrics log lines.",
                      "remove --disable-log-stats", V)


COMMAND_RULES: dict[str, Rule] = {
    "llamacpp-draft-without-spec-type": _llamacpp_draft_without_type,
    "llamacpp-spec-type-method": _llamacpp_spec_type,
    "llamacpp-p-min-zero": _llamacpp_p_min,
    "llamacpp-removed-flag": _llamacpp_removed,
    "llamacpp-slot-context": _llamacpp_slot_context,
    "model-path-method-word": _method_word_paths,
    "hub-reference": _hub_reference,
    "image-unpinned": _image_pinned,
    "unknown-engine-flag": _unknown_flags,
    "vllm-flag-choice": _vllm_flag_choices,
    "sglang-flag-choice": _sglang_flag_choices,
    "extra-args-override": _extra_args_override,
    "model-files-missing": _model_files,
    "metrics-disabled": _metrics_off,
}
