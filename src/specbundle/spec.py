"""The bundle spec (``bundle.yaml``, ``apiVersion: specbundle/v1``): the input every stage reads.

A spec names two artifacts (target and draft), how they speculate together, which engines to
render for, the deployment's expected load and the gate a benchmark must pass. It is an
untrusted, human-edited file, so it is parsed with pydantic (unknown fields rejected) and every
error names the file, the field and what is allowed. Stages get the frozen :class:`BundleSpec`.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from specbundle.errors import SpecError
from specbundle.strict import MalformedDocument, load_yaml_file

__all__ = [
    "API_VERSION",
    "MAX_SPEC_BYTES",
    "REFUSED_METHODS",
    "AdmissionThresholds",
    "ArtifactSpec",
    "BenchSettings",
    "BundleSpec",
    "DeploymentSpec",
    "EngineName",
    "EngineSettings",
    "LlamaCppSettings",
    "Metadata",
    "SGLangSettings",
    "SpecMethod",
    "SpeculativeSpec",
    "VLLMSettings",
    "dump_spec",
    "load_spec",
    "parse_spec",
    "yaml_problem",
]

API_VERSION = "specbundle/v1"

_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_REV_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$")
_DIGEST_IMAGE_RE = re.compile(r"^[^\s@]+(@sha256:[0-9a-f]{64})?$")


class SpecMethod(StrEnum):
    """How the draft proposes tokens; names follow vLLM's ``method`` values."""

    DRAFT_MODEL = "draft_model"
    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    MTP = "mtp"
    NGRAM = "ngram"
    DFLASH = "dflash"
    DSPARK = "dspark"
    MEDUSA = "medusa"
    #: vLLM's n-gram proposer on the GPU (works with async scheduling; vLLM only).
    NGRAM_GPU = "ngram_gpu"

    @property
    def needs_draft_artifact(self) -> bool:
        """Whether the method needs a second set of weights (MTP and n-gram do not)."""
        return self not in (SpecMethod.MTP, SpecMethod.NGRAM, SpecMethod.NGRAM_GPU)


#: Methods an engine has that a spec cannot name, and why (a spec naming one is refused with
#: the reason rather than a bare "not a valid enum"). :mod:`specbundle.render.methods` holds
#: every engine's list against this one.
REFUSED_METHODS: dict[str, str] = {
    "suffix": "vLLM's suffix decoding needs the out-of-tree arctic-inference package (not in "
              "the vLLM image) and speculates a varying number of tokens per step "
              "(num_speculative_tokens is only a cap), so a benchmark of K would not be what "
              "runs",
    "mlp_speculator": "MLP speculator heads run on vLLM only, which removed them in 0.33",
    "custom_class": "vLLM's custom_class imports proposer code named in the config, code a "
                    "bundle neither carries nor signs",
    "extract_hidden_states": "vLLM's extract_hidden_states is not speculation: it records "
                             "hidden states (for training drafts)",
    "uno": "SGLang's UNO drafts with a LoRA adapter on the target (--uno-lora-path), an "
           "artifact a bundle does not carry",
    "frozen_kv_mtp": "SGLang selects FROZEN_KV_MTP itself for a Gemma4 assistant draft "
                     "(it promotes EAGLE/NEXTN): name the method eagle",
}


class EngineName(StrEnum):
    """Serving engines specbundle renders for and benchmarks."""

    VLLM = "vllm"
    SGLANG = "sglang"
    LLAMACPP = "llamacpp"


#: Control characters (C0, DEL, C1) and Unicode line/paragraph separators: a record separator
#: in some rendered format (shell line, unit-file line, YAML line), never part of a value.
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: Free text that reaches no command line or manifest value.
_FREE_TEXT = frozenset({"description"})


def _no_controls(value: Any) -> None:
    """Refuse a control character anywhere in a string, a list of strings or a mapping."""
    if isinstance(value, str):
        if m := _CONTROL_RE.search(value):
            raise ValueError(f"control character U+{ord(m.group()):04X} in {value[:40]!r}: "
                             "spec strings reach command lines and unit files, where it "
                             "would start a new line or argument")
    elif isinstance(value, tuple | list):
        for v in value:
            _no_controls(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_controls(k)
            _no_controls(v)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    @field_validator("*", mode="after")
    @classmethod
    def _plain_strings(cls, v: Any, info: ValidationInfo) -> Any:
        if info.field_name not in _FREE_TEXT:
            _no_controls(v)
        return v


class ArtifactSpec(_Model):
    """One model artifact: where it comes from and which revision.

    ``source`` is ``hf`` (the endpoint in ``HF_ENDPOINT``) or ``dir:<path>`` for weights that
    are already on disk (relative paths resolve against the spec file's directory).
    """

    repo: str = Field(description="Hub repository id, org/name.")
    revision: str = Field("main", description="Branch, tag or 40-hex commit; pinned at pull.")
    source: str = Field("hf", description="'hf' or 'dir:<path>'.")
    allow_patterns: tuple[str, ...] | None = Field(
        None, description="Only files matching these globs; default: what the engines need."
    )
    allow_pickle: bool = Field(False, description="Also pull pickle checkpoints (.bin, .pt, ...).")
    allow_remote_code: bool = Field(False, description="Also pull *.py and honour auto_map.")
    gguf_file: str | None = Field(None, description="For llama.cpp: the GGUF file to serve.")

    @field_validator("repo")
    @classmethod
    def _repo(cls, v: str) -> str:
        if not _REPO_RE.match(v) or ".." in v:
            raise ValueError(f"{v!r} is not a repository id of the form 'org/name'")
        return v

    @field_validator("revision")
    @classmethod
    def _revision(cls, v: str) -> str:
        if not _REV_RE.match(v) or ".." in v:
            raise ValueError(f"{v!r} is not a branch, tag or commit sha")
        return v

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v != "hf" and not (v.startswith("dir:") and len(v) > 4):
            raise ValueError(f"{v!r}: allowed are 'hf' or 'dir:<path>'")
        return v

    @field_validator("gguf_file")
    @classmethod
    def _gguf(cls, v: str | None) -> str | None:
        if v is not None and (not v.endswith(".gguf") or v.startswith("/") or ".." in v):
            raise ValueError(f"{v!r} must be a relative path ending in .gguf")
        return v

    @property
    def dir_path(self) -> Path | None:
        """The local directory of a ``dir:`` source."""
        return Path(self.source[4:]) if self.source.startswith("dir:") else None


_Schedule = tuple[tuple[int, int, int], ...]


class SpeculativeSpec(_Model):
    """How speculation is configured, engine-neutral; engines translate it."""

    method: SpecMethod
    num_speculative_tokens: int = Field(ge=1, le=64)
    # vLLM's num_speculative_tokens_per_batch_size: [start_bs, end_bs, K] triples.
    schedule: _Schedule | None = None
    draft_tensor_parallel_size: int | None = Field(None, ge=1)
    temperature: float = Field(0.0, ge=0.0, le=2.0)

    @field_validator("method", mode="before")
    @classmethod
    def _method(cls, v: Any) -> Any:
        name = v.lower() if isinstance(v, str) else v
        if isinstance(name, str) and name in REFUSED_METHODS:
            raise ValueError(f"method {v!r} is not supported: {REFUSED_METHODS[name]}")
        return v

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: _Schedule | None) -> _Schedule | None:
        if v is None:
            return v
        if not v:
            raise ValueError("an empty schedule: omit it or give [start_bs, end_bs, K] triples")
        for start, end, k in v:
            if start < 1 or end < start or k < 0:
                raise ValueError(
                    f"[{start}, {end}, {k}]: need 1 <= start_bs <= end_bs and K >= 0"
                )
        return v


class VLLMSettings(_Model):
    """vLLM serve options specbundle sets explicitly."""

    image: str = "vllm/vllm-openai:v0.32.0"  # CUDA build of the release the tests run
    port: int = Field(8000, ge=1, le=65535)
    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    data_parallel_size: int = Field(1, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    max_model_len: int | None = Field(None, ge=16)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    speculative_extra: dict[str, Any] = Field(
        default_factory=dict, description="Extra --speculative-config keys (checked by lint)."
    )
    extra_args: tuple[str, ...] = ()


class SGLangSettings(_Model):
    """SGLang server options; the three tree parameters go together or not at all."""

    image: str = "lmsysorg/sglang:v0.5.23"
    port: int = Field(30000, ge=1, le=65535)
    tp_size: int = Field(1, ge=1)
    pp_size: int = Field(1, ge=1)
    dp_size: int = Field(1, ge=1)
    enable_dp_attention: bool = False
    max_running_requests: int | None = Field(None, ge=1)
    speculative_num_steps: int | None = Field(None, ge=1)
    speculative_eagle_topk: int | None = Field(None, ge=1)
    speculative_num_draft_tokens: int | None = Field(None, ge=1)
    speculative_adaptive: bool = False
    disable_overlap_schedule: bool = False
    mem_fraction_static: float | None = Field(None, gt=0, le=1)
    extra_args: tuple[str, ...] = ()


class LlamaCppSettings(_Model):
    """llama-server options for the GGUF pair."""

    image: str = "ghcr.io/ggml-org/llama.cpp:server-cuda-b11434"  # CUDA build, pinned release
    port: int = Field(8080, ge=1, le=65535)
    spec_type: str = "draft-simple"
    draft_n_max: int | None = Field(None, ge=1, description="Default: num_speculative_tokens.")
    draft_n_min: int = Field(0, ge=0)
    draft_p_min: float = Field(0.75, ge=0.0, le=1.0)
    n_gpu_layers: str = "99"
    draft_n_gpu_layers: str = "99"
    ctx_size: int | None = Field(
        None, ge=64,
        description="Total KV context (llama.cpp splits it over the slots unless kv_unified); "
                    "default: slots x the workload's prompt + output.")
    parallel: int | None = Field(None, ge=1, description="Slots; default: 2x P95 concurrency.")
    kv_unified: bool = Field(False, description="One KV pool shared by all slots.")
    flash_attn: Literal["on", "off", "auto"] = "on"
    threads: int | None = Field(None, ge=1)
    extra_args: tuple[str, ...] = ()


class EngineSettings(_Model):
    """Per-engine settings; an engine absent here is not rendered."""

    vllm: VLLMSettings | None = None
    sglang: SGLangSettings | None = None
    llamacpp: LlamaCppSettings | None = None

    def enabled(self) -> tuple[EngineName, ...]:
        """Engines the spec asks for, in a stable order."""
        return tuple(e for e in EngineName if getattr(self, e.value) is not None)


class DeploymentSpec(_Model):
    """The load the deployment expects: speculation is judged at this operating point."""

    p95_concurrency: int = Field(ge=1, le=4096)
    gpus: int = Field(1, ge=0)
    gpu_type: str | None = None


class AdmissionThresholds(_Model):
    """The gate ``admit`` applies to the benchmark report."""

    min_throughput_ratio_lower_bound: float = Field(1.05, gt=0)
    require_alpha_above_c: bool = True
    max_concurrency_ceiling_drop: float = Field(0.10, ge=0, le=1)
    max_preemption_increase: int = Field(0, ge=0)
    min_token_agreement: float = Field(0.95, ge=0, le=1)  # reported only: see below
    # Speculation's mean common prefix with the baseline, relative to the baseline's own
    # relaunch-to-relaunch (A/A) common prefix: numerics drift keeps most of the prefix, an
    # output-changing draft (sampling mismatch, wrong tokenizer) diverges at the first tokens.
    min_agreement_vs_floor: float = Field(0.5, gt=0, le=1)
    max_engine_errors: int = Field(0, ge=0)


class BenchSettings(_Model):
    """Workload of the verification benchmark; everything ships with the bundle."""

    prompts_file: str | None = None
    max_tokens: int = Field(128, ge=1, le=32768)
    requests_per_level: int = Field(16, ge=1)
    rounds: int = Field(4, ge=2, le=64)
    # Sequential stopping: add ABBA pairs while the P95 ratio CI straddles the threshold, up
    # to max_rounds (default 3 x rounds, at most 64) or the time budget, whichever comes first.
    max_rounds: int | None = Field(None, ge=2, le=64)
    time_budget_s: float | None = Field(None, gt=0)
    warmup_requests: int = Field(2, ge=0)
    concurrency_levels: tuple[int, ...] | None = None
    endpoint: Literal["completions", "chat"] = "completions"

    @field_validator("concurrency_levels")
    @classmethod
    def _levels(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is not None and (not v or any(x < 1 for x in v) or list(v) != sorted(set(v))):
            raise ValueError("concurrency levels must be distinct positive integers, ascending")
        return v


class Metadata(_Model):
    """Bundle identity: the name every command uses."""

    name: str
    description: str | None = None
    owner: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(
                f"{v!r}: lowercase letters, digits, '.', '_' or '-', starting with a letter/digit"
            )
        return v


class BundleSpec(_Model):
    """A validated ``bundle.yaml``."""

    api_version: Annotated[Literal["specbundle/v1"], Field(alias="apiVersion")]
    kind: Literal["Bundle"] = "Bundle"
    metadata: Metadata
    target: ArtifactSpec
    draft: ArtifactSpec | None = None
    speculative: SpeculativeSpec
    engines: EngineSettings
    deployment: DeploymentSpec
    admission: AdmissionThresholds = AdmissionThresholds()
    bench: BenchSettings = BenchSettings()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def name(self) -> str:
        """The bundle name."""
        return self.metadata.name

    @model_validator(mode="after")
    def _consistency(self) -> BundleSpec:
        method = self.speculative.method
        if method.needs_draft_artifact and self.draft is None:
            raise ValueError(f"draft: required for method {method.value!r}")
        if not method.needs_draft_artifact and self.draft is not None:
            raise ValueError(f"draft: method {method.value!r} uses no separate draft artifact")
        if not self.engines.enabled():
            raise ValueError("engines: name at least one of vllm, sglang, llamacpp")
        if self.engines.llamacpp is not None:
            if self.target.gguf_file is None:
                raise ValueError("target.gguf_file: required when engines.llamacpp is set")
            if self.draft is not None and self.draft.gguf_file is None:
                raise ValueError("draft.gguf_file: required when engines.llamacpp is set")
        return self


def _loc(err: Any) -> str:
    parts = [str(p) for p in err.get("loc", ()) if not str(p).startswith("function-after")]
    return ".".join(parts) or "(document)"


def parse_spec(data: Any, *, file: str = "<spec>") -> BundleSpec:
    """Validate a decoded spec document; raise :class:`SpecError` naming file and field."""
    if not isinstance(data, dict):
        raise SpecError("a bundle spec must be a YAML mapping", file=file)
    if data.get("apiVersion") != API_VERSION:
        raise SpecError(
            f"unsupported apiVersion {data.get('apiVersion')!r}; allowed: {API_VERSION!r}",
            file=file, field="apiVersion",
        )
    try:
        return BundleSpec.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        if first.get("type") == "extra_forbidden":
            msg = "unknown field (not allowed in specbundle/v1)"
        others = [f"{_loc(e)}: {e.get('msg', 'invalid')}" for e in err.errors()[1:6]]
        more = f" (also: {'; '.join(others)}" if others else ""
        if more:
            more += "; ...)" if err.error_count() > 6 else ")"
        raise SpecError(msg + more, file=file, field=_loc(first)) from None


def yaml_problem(err: yaml.YAMLError) -> str:
    """One line with the position ("line 2, column 1: expected ...") for PyYAML's dump."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        what = err.problem or "invalid YAML"
        ctx = f" ({err.context})" if err.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}{ctx}"
    return " ".join(str(err).split())


#: A bundle spec is a few KB; anything near this is not one (and PyYAML would parse a 100 MB
#: file for minutes before any field check could refuse it).
MAX_SPEC_BYTES = 1024 * 1024


def load_spec(path: Path) -> BundleSpec:
    """Read and validate a ``bundle.yaml``; ``dir:`` sources resolve against its folder.

    Parsed by :mod:`specbundle.strict` (UTF-8 only, duplicate keys, depth and size bounded),
    so every malformed file is one :class:`SpecError` line (exit 2), never a traceback.
    """
    try:
        data = load_yaml_file(path, max_bytes=MAX_SPEC_BYTES)
    except OSError as err:
        raise SpecError(f"cannot read: {err.strerror or err}", file=str(path)) from None
    except MalformedDocument as err:
        msg = str(err).removeprefix(f"{path.name}: ")
        if msg.startswith("not valid YAML (") and msg.endswith(")"):
            msg = "not valid YAML: " + msg[len("not valid YAML ("):-1]
        raise SpecError(msg, file=str(path)) from None
    spec = parse_spec(data, file=str(path))
    return _resolve_dirs(spec, path.parent.resolve())


def _resolve_dirs(spec: BundleSpec, base: Path) -> BundleSpec:
    def fix(a: ArtifactSpec | None) -> ArtifactSpec | None:
        if a is None or a.dir_path is None or a.dir_path.is_absolute():
            return a
        return a.model_copy(update={"source": f"dir:{(base / a.dir_path).resolve()}"})

    return spec.model_copy(update={"target": fix(spec.target), "draft": fix(spec.draft)})


def dump_spec(spec: BundleSpec) -> dict[str, Any]:
    """The spec as a JSON-able document (stored in the bundle record and signed later)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)
