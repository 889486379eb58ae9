"""Floors a mirror writer cannot roll back: the operator's state file beside the trust policy.

Everything in a mirror can be rewritten by whoever can write the mirror: ``current`` can name
an older signed version, a revocation line or the log tail can be deleted. So what a verifier
has once accepted is kept outside the mirror, in ``<policy dir>/<policy stem>.state.json``
(or the file ``load_policy(state=...)`` / ``$SPECBUNDLE_TRUST_STATE`` names), per mirror
(its resolved root path):

* the highest bundle version accepted, with its manifest digest (a lower version, or the
  same number with another manifest, is refused: "rolled back");
* the event log's head (seq and line digest): the log may grow, never shrink or change;
* every revocation seen (for all mirrors: a stolen key is stolen everywhere).

The exporting side keeps the same floors for the mirror it exports from (the log head and the
highest version shipped per bundle) in its own operator-owned file (``export --state``, default
:func:`export_state_path`): a connected mirror whose log was cut (a revocation dropped) or whose
``current`` names an older version is refused at export, before a set carries it anywhere.

Floors only rise, under a lock, written atomically. A verification that would have to raise
a floor but cannot write the file fails closed (:class:`~specbundle.errors.EnvironmentProblem`):
a floor that is not recorded protects nothing. A read-only policy directory works as long as
nothing new has to be recorded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import filelock
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specbundle._fsutil import atomic_write_json
from specbundle.errors import EnvironmentProblem, VerificationError
from specbundle.mirror import Mirror, utc_now
from specbundle.strict import MalformedDocument, loads_json, read_bounded
from specbundle.verify.diff import Problem
from specbundle.verify.policy import TrustPolicy

__all__ = ["EXPORT_STATE_ENV", "bundle_problem", "check_log", "export_state_path", "log_floor",
           "raise_floors", "recorded_revocations"]

_MAX_STATE = 16 * 1024 * 1024
EXPORT_STATE_ENV = "SPECBUNDLE_EXPORT_STATE"
_SHA = r"^[0-9a-f]{64}$"
_LOCK_TIMEOUT_S = 60.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _BundleFloor(_Strict):
    version: int = Field(ge=1)
    manifest_sha256: str = Field(pattern=_SHA)
    seen_at: str


class _Head(_Strict):
    seq: int = Field(ge=0)
    digest: str = Field(pattern=_SHA)
    seen_at: str


class _MirrorFloors(_Strict):
    bundles: dict[str, _BundleFloor] = {}
    log_head: _Head | None = None


class _Revocation(_Strict):
    reason: str = Field(min_length=1)
    seen_at: str


class _State(_Strict):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    api_version: Literal["specbundle/v1"] = Field("specbundle/v1", alias="apiVersion")
    kind: Literal["TrustState"] = "TrustState"
    mirrors: dict[str, _MirrorFloors] = {}
    revocations: dict[str, _Revocation] = {}


def _load(path: Path) -> _State:
    """The state file (empty when absent); corrupt is an error, never "no floors"."""
    try:
        data = read_bounded(path, max_bytes=_MAX_STATE, what=path.name)
        return _State.model_validate(loads_json(data, what=path.name))
    except FileNotFoundError:
        return _State()
    except (MalformedDocument, ValidationError) as err:
        why = str(err).splitlines()[0] if isinstance(err, MalformedDocument) else (
            f"{'.'.join(str(x) for x in err.errors()[0]['loc'])}: {err.errors()[0]['msg']}")
        raise VerificationError(f"trust state {path} is corrupt: {why}",
                                hint="restore it from the operator's backup; deleting it "
                                     "forgets every floor (rollbacks go unseen)") from None
    except OSError as err:
        raise EnvironmentProblem(f"cannot read trust state {path}: {err.strerror}") from err


def _state(policy: TrustPolicy) -> _State:
    return _load(policy.state_path) if policy.state_path is not None else _State()


def _floors(policy: TrustPolicy | Path | None, mirror: Mirror) -> _MirrorFloors:
    path = _path(policy)
    state = _load(path) if path is not None else _State()
    return state.mirrors.get(str(mirror.root)) or _MirrorFloors()


def _path(policy: TrustPolicy | Path | None) -> Path | None:
    return policy.state_path if isinstance(policy, TrustPolicy) else policy


def export_state_path() -> Path:
    """The exporter's floor file: ``$SPECBUNDLE_EXPORT_STATE``, else
    ``$XDG_STATE_HOME/specbundle/export-state.json`` (``~/.local/state`` by default): the
    operator's, never inside a mirror."""
    env = os.environ.get(EXPORT_STATE_ENV)
    if env:
        return Path(env).absolute()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "specbundle" / "export-state.json"


def log_floor(policy: TrustPolicy, mirror: Mirror) -> dict[int, str]:
    """seq -> line digest of ``mirror``'s log head as a verification recorded it (or empty)."""
    head = _floors(policy, mirror).log_head
    return {head.seq: head.digest} if head is not None else {}


def recorded_revocations(policy: TrustPolicy) -> dict[str, str]:
    """Fingerprint -> why, for every revocation a verification under ``policy`` has seen."""
    return {fp: r.reason for fp, r in _state(policy).revocations.items()}


def bundle_problem(policy: TrustPolicy | Path | None, mirror: Mirror, name: str, version: int,
                   manifest_sha256: str) -> Problem | None:
    """Why ``version`` of ``name`` is below what was accepted from ``mirror`` (None: it is not).

    ``policy``: a trust policy (its state file), or the state file itself (export's).
    """
    floor = _floors(policy, mirror).bundles.get(name)
    if floor is None or (version > floor.version):
        return None
    where = f"seen on {floor.seen_at} (trust state {_path(policy)})"
    if version < floor.version:
        return Problem("rolled-back", f"bundle {name}",
                       f"rolled back: version {version} < {floor.version} {where}",
                       f"version >= {floor.version}", f"version {version}")
    if manifest_sha256 != floor.manifest_sha256:
        return Problem("rolled-back", f"bundle {name}",
                       f"version {version} was accepted with another manifest {where}; "
                       "versions are immutable", floor.manifest_sha256, manifest_sha256)
    return None


def check_log(policy: TrustPolicy | Path | None, mirror: Mirror,
              events: Sequence[Mapping[str, Any]], head: tuple[int, str] | None) -> None:
    """Refuse a chain-checked log that ends before, or differs at, the head recorded for it
    (in the policy's state file, or the state file ``policy`` names).

    Raises:
        VerificationError: the log was truncated (a revocation or checkpoint may be gone) or
            rewritten since a verification saw it.
    """
    floor = _floors(policy, mirror).log_head
    if floor is None:
        return
    state_path = _path(policy)
    hint = "restore events.jsonl from a backup; `specbundle audit log --verify` names the damage"
    if head is None or head[0] < floor.seq:
        ends = "is empty" if head is None else f"ends at seq {head[0]}"
        raise VerificationError(
            f"rolled back: the event log of {mirror.root} {ends}, below seq {floor.seq} seen "
            f"on {floor.seen_at} (trust state {state_path}): the log was truncated",
            hint=hint)
    # the chain is verified, so an entry's digest is its successor's ``prev``
    digest = head[1] if head[0] == floor.seq else next(
        (str(e.get("prev")) for e in events if e.get("seq") == floor.seq + 1), None)
    if digest != floor.digest:
        raise VerificationError(
            f"the event log of {mirror.root} was rewritten: entry seq {floor.seq} differs from "
            f"the one seen on {floor.seen_at} (trust state {state_path})", hint=hint)


def raise_floors(policy: TrustPolicy | Path | None, mirror: Mirror, *,
                 bundle: tuple[str, int, str] | None = None,
                 head: tuple[int, str] | None = None,
                 revoked: Mapping[str, str] | None = None) -> None:
    """Record what was just accepted from ``mirror``: ``bundle`` (name, version, manifest
    digest), the log ``head`` and ``revoked`` keys; floors only ever rise.

    Raises:
        EnvironmentProblem: the state must change but cannot be written (fail closed).
    """
    path = _path(policy)
    if path is None:
        return
    now = utc_now()
    if not _changes(_load(path), str(mirror.root), bundle, head, revoked or {}):
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with filelock.FileLock(str(path.with_name(f".{path.name}.lock")),
                               timeout=_LOCK_TIMEOUT_S):
            state = _load(path)  # again, under the lock: another verifier may have raised it
            key = str(mirror.root)
            floors = state.mirrors.setdefault(key, _MirrorFloors())
            if bundle is not None:
                name, version, digest = bundle
                old = floors.bundles.get(name)
                if old is None or version > old.version:
                    floors.bundles[name] = _BundleFloor(version=version, manifest_sha256=digest,
                                                        seen_at=now)
            if head is not None and (floors.log_head is None or head[0] > floors.log_head.seq):
                floors.log_head = _Head(seq=head[0], digest=head[1], seen_at=now)
            for fp, why in (revoked or {}).items():
                state.revocations.setdefault(fp, _Revocation(reason=why, seen_at=now))
            atomic_write_json(path, state.model_dump(by_alias=True, mode="json"))
    except (OSError, filelock.Timeout) as err:
        why = err.strerror or str(err)
        raise EnvironmentProblem(
            f"cannot record the verified floors in trust state {path}: {why}",
            hint=f"the operator must be able to write {path.parent} (or set "
                 "$SPECBUNDLE_TRUST_STATE to a writable, operator-owned file); refusing to "
                 "act on a version whose floor is not recorded") from err


def _changes(state: _State, key: str, bundle: tuple[str, int, str] | None,
             head: tuple[int, str] | None, revoked: Mapping[str, str]) -> bool:
    floors = state.mirrors.get(key) or _MirrorFloors()
    if bundle is not None:
        old = floors.bundles.get(bundle[0])
        if old is None or bundle[1] > old.version:
            return True
    if head is not None and (floors.log_head is None or head[0] > floors.log_head.seq):
        return True
    return bool(set(revoked) - set(state.revocations))
