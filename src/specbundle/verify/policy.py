"""The offline trust policy (``trust.yaml``): who may sign what, k-of-n, maximum age.

::

    apiVersion: specbundle/v1
    kind: TrustPolicy
    max_age: 180d                      # default for every requirement (s, m, h, d, w)
    keys:
      - name: release
        fingerprint: <sha256 hex of the SPKI DER>   # must match the PEM below
        public_key: |
          -----BEGIN PUBLIC KEY-----
          ...
        repos: ["org/*"]               # fnmatch patterns: repos whose weights it may sign
        bundles: ["*"]                 # AND bundle names it may sign for (both must match)
    model_signers: [release]           # optional: who may sign model.sig (default: all keys)
    require:                           # statement kind -> k-of-n
      fetch-provenance: {threshold: 1}
      scan-result: {threshold: 1, signers: [security]}
      pair-binding: {threshold: 2, signers: [security, ml-lead], max_age: 30d}
    revoked:                           # keys retired everywhere (verify, import, admit, audit)
      - {fingerprint: <sha256 hex>, reason: "laptop stolen"}
    anchors: [...]                     # certificate roles (CA + identities + CRLs), see anchors.py
    publishers: [...]                  # publishers' own signatures on pull, see publishers.py
    revokers: [security]               # optional: may revoke any key; otherwise a signed
                                       # revocation counts only from the key itself or a key
                                       # whose repos and bundles scope covers the revoked key's

An empty, unreadable or inconsistent policy is a :class:`SpecError`, never "trust all":
unknown kinds, duplicate keys (also duplicate YAML mapping keys), a fingerprint that does
not match its PEM, and thresholds that the eligible signers cannot reach are all refused
at load time.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specbundle.attest import PREDICATE_BY_KIND, PublicKey, public_key_from_pem
from specbundle.digest import sha256_bytes
from specbundle.errors import SpecbundleError, SpecError
from specbundle.strict import MalformedDocument, loads_yaml, read_bounded
from specbundle.verify.anchors import AnchorEntry, TrustedAnchor, build_anchors, in_scope
from specbundle.verify.publishers import PublisherEntry, PublisherRule, build_publishers

__all__ = ["DEFAULT_REQUIRE", "MAX_CLOCK_SKEW", "Requirement", "TrustPolicy", "TrustedAnchor",
           "TrustedKey", "default_state_path", "load_policy", "parse_duration", "parse_policy"]

#: Used when ``require`` is omitted: every statement ``specbundle sign`` makes, 1-of-n.
DEFAULT_REQUIRE = ("fetch-provenance", "scan-result", "pair-binding")
#: How far a statement's signed time may lie ahead of the verifier's clock. Anything later is
#: refused, never counted as fresh: a future date would otherwise outlive ``max_age``.
MAX_CLOCK_SKEW = timedelta(minutes=5)
#: Names the operator's trust state file instead of the one beside the policy.
STATE_ENV = "SPECBUNDLE_TRUST_STATE"
_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``30m``, ``3600s``, ``2w`` -> timedelta."""
    m = _DURATION.match(text.strip())
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration like 90d, 12h, 30m")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])


class _Key(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    fingerprint: str = Field(pattern=r"^[0-9a-f]{64}$")
    public_key: str
    repos: list[str] = []
    bundles: list[str] = []


class _Req(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    threshold: int = Field(1, ge=1)
    signers: list[str] | None = None
    max_age: str | None = None


class _Revoked(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    fingerprint: str = Field(pattern=r"^[0-9a-f]{64}$")
    reason: str = Field(min_length=1)


class _Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    api_version: Literal["specbundle/v1"] = Field(alias="apiVersion")
    kind: Literal["TrustPolicy"]
    keys: list[_Key] = Field(min_length=1)
    model_signers: list[str] | None = None
    require: dict[str, _Req] | None = None
    max_age: str | None = None
    revoked: list[_Revoked] = []
    anchors: list[AnchorEntry] = []
    publishers: list[PublisherEntry] = []
    revokers: list[str] | None = None


@dataclass(frozen=True)
class TrustedKey:
    """A key the site trusts, and the repos/bundles it may speak for."""

    name: str
    public: PublicKey
    repos: tuple[str, ...]
    bundles: tuple[str, ...]

    @property
    def fingerprint(self) -> str:
        """The key's fingerprint."""
        return self.public.fingerprint

    def may_sign(self, repo: str, bundle: str) -> bool:
        """True if the key is scoped to this repo *and* this bundle name."""
        return self.may_sign_all((repo,), bundle)

    def may_sign_all(self, repos: tuple[str, ...] | list[str], bundle: str) -> bool:
        """True if the bundle name and every one of ``repos`` are in the key's scope.

        Both dimensions must match: a key for ``narrow/*`` repos cannot replace bundle
        ``prod`` (its name), nor can a key for bundle ``prod`` bring in weights of repos it
        was never trusted for.
        """
        return in_scope(self.repos, self.bundles, repos, bundle)


@dataclass(frozen=True)
class Requirement:
    """``threshold`` distinct eligible signers must have signed a fresh statement of ``kind``."""

    kind: str
    predicate_type: str
    threshold: int
    signers: frozenset[str]
    max_age: timedelta | None
    #: ``signers:`` named in the policy: these approvers must also sign the manifest itself
    designated: bool = False


@dataclass(frozen=True)
class TrustPolicy:
    """A validated policy; ``digest`` is the sha256 of the file bytes (for audit records).

    When the policy names files beside it (anchors, CRLs, trusted roots), the digest covers
    them too: sha256 over the policy bytes' sha256 and one ``\nNAME SHA256`` line per file,
    sorted by name.
    """

    keys: tuple[TrustedKey, ...]
    model_signers: frozenset[str]
    requirements: tuple[Requirement, ...]
    digest: str
    source: str
    revoked: Mapping[str, str] = field(default_factory=dict)
    anchors: tuple[TrustedAnchor, ...] = ()
    model_signer_anchors: frozenset[str] = frozenset()  # anchor names that may sign model.sig
    publishers: tuple[PublisherRule, ...] = ()  # checked by pull (specbundle.verify.publishers)

    @property
    def model_anchors(self) -> tuple[TrustedAnchor, ...]:
        """The certificate roles that may sign ``model.sig``."""
        return tuple(a for a in self.anchors if a.name in self.model_signer_anchors)
    #: the operator's floor state (:mod:`specbundle.verify.floors`); None: policy from bytes
    state_path: Path | None = None
    #: keys the policy designates to revoke any key (``revokers:``)
    revokers: frozenset[str] = frozenset()

    def may_revoke(self, signers: frozenset[str], fingerprint: str) -> bool:
        """True if one of ``signers`` may revoke ``fingerprint``: the key itself, a designated
        revoker, or a key whose scope (repos and bundles) covers the revoked key's. Any other
        policy key revoking it would let a narrowly trusted key switch off a wider one."""
        if fingerprint in signers or signers & self.revokers:
            return True
        victim = self.key(fingerprint)
        if victim is None:
            return bool(signers)  # not a key of this policy: revoking it takes nothing away
        return any(k is not None and _covers(k.repos, victim.repos)
                   and _covers(k.bundles, victim.bundles) for k in map(self.key, signers))

    def key(self, fingerprint: str) -> TrustedKey | None:
        """The trusted key with this fingerprint."""
        return next((k for k in self.keys if k.fingerprint == fingerprint), None)

    @property
    def public_keys(self) -> tuple[PublicKey, ...]:
        """Every trusted public key."""
        return tuple(k.public for k in self.keys)


def _covers(wide: tuple[str, ...], narrow: tuple[str, ...]) -> bool:
    """Every pattern of ``narrow`` is matched by a pattern of ``wide`` (``*`` covers all)."""
    return all(any(fnmatch.fnmatchcase(n, w) for w in wide) for n in narrow)


def _resolve(names: list[str] | None, keys: dict[str, TrustedKey], where: str) -> frozenset[str]:
    if names is None:
        return frozenset(k.fingerprint for k in keys.values())
    if not names:
        raise ValueError(f"{where}: an empty signer list can never be satisfied")
    out: set[str] = set()
    for n in names:
        k = keys.get(n) or next((x for x in keys.values() if x.fingerprint == n), None)
        if k is None:
            raise ValueError(f"{where}: unknown key {n!r}")
        out.add(k.fingerprint)
    return frozenset(out)


def _model_signers(names: list[str] | None, keys: dict[str, TrustedKey],
                   anchors: tuple[TrustedAnchor, ...]) -> tuple[frozenset[str], frozenset[str]]:
    """Key fingerprints and anchor names that may sign model.sig (default: every one)."""
    anchor_names = {a.name for a in anchors}
    if names is None:
        return _resolve(None, keys, "model_signers"), frozenset(anchor_names)
    if not names:
        raise ValueError("model_signers: an empty signer list can never be satisfied")
    return (_resolve([n for n in names if n not in anchor_names], keys, "model_signers")
            if any(n not in anchor_names for n in names) else frozenset(),
            frozenset(n for n in names if n in anchor_names))


def _with_files(digest: str, p: _Policy, base: Path | None) -> str:
    """The policy digest extended over the files it names (already read and validated)."""
    names = [n for a in p.anchors for n in (a.certificates, *a.crls)]
    for e in p.publishers:
        if e.certificate is not None:
            names += [e.certificate.certificates, *e.certificate.crls]
        if e.sigstore is not None and e.sigstore.trusted_root is not None:
            names.append(e.sigstore.trusted_root)
    files = sorted({n for n in names if "-----BEGIN" not in n})
    if not files or base is None:
        return digest
    try:
        lines = "".join(f"\n{n} {sha256_bytes(read_bounded(base / n, what=n))}" for n in files)
    except (OSError, MalformedDocument) as err:
        raise ValueError(f"a file beside the policy changed while it was read: {err}") from None
    return sha256_bytes(bytes.fromhex(digest) + lines.encode())


def _build(p: _Policy, digest: str, source: str, base: Path | None = None) -> TrustPolicy:
    keys: dict[str, TrustedKey] = {}
    for k in p.keys:
        pub = public_key_from_pem(k.public_key.encode(), source=f"keys[{k.name}].public_key")
        if pub.fingerprint != k.fingerprint:
            raise ValueError(f"keys[{k.name}]: fingerprint {k.fingerprint} does not match its "
                             f"public key ({pub.fingerprint})")
        if k.name in keys or any(x.fingerprint == pub.fingerprint for x in keys.values()):
            raise ValueError(f"keys[{k.name}]: duplicate key name or fingerprint")
        if not k.repos or not k.bundles:
            raise ValueError(f"keys[{k.name}]: scope it with both repos and bundles patterns "
                             "(a key may sign a bundle only if both match; bundles: ['*'] "
                             "allows any name)")
        keys[k.name] = TrustedKey(k.name, pub, tuple(k.repos), tuple(k.bundles))
    anchors = build_anchors(p.anchors, base, set(keys))
    default_age = parse_duration(p.max_age) if p.max_age else None
    raw_req = p.require if p.require is not None else {k: _Req() for k in DEFAULT_REQUIRE}
    if not raw_req:
        raise ValueError("require: name at least one statement kind (an empty list trusts all)")
    reqs: list[Requirement] = []
    for kind, r in sorted(raw_req.items()):
        if kind not in PREDICATE_BY_KIND:
            raise ValueError(f"require.{kind}: unknown statement kind; known: "
                             + ", ".join(sorted(PREDICATE_BY_KIND)))
        if anchored := sorted({a.name for a in anchors} & set(r.signers or ())):
            raise ValueError(f"require.{kind}.signers: {', '.join(anchored)} is a certificate "
                             "role; it signs model.sig only, attestations need keys")
        signers = _resolve(r.signers, keys, f"require.{kind}.signers")
        if r.threshold > len(signers):
            raise ValueError(f"require.{kind}: threshold {r.threshold} exceeds the "
                             f"{len(signers)} eligible signer(s)")
        age = parse_duration(r.max_age) if r.max_age else default_age
        reqs.append(Requirement(kind, PREDICATE_BY_KIND[kind], r.threshold, signers, age,
                                r.signers is not None))
    model_keys, model_anchors = _model_signers(p.model_signers, keys, anchors)
    publishers = build_publishers(p.publishers, base)
    digest = _with_files(digest, p, base)
    return TrustPolicy(tuple(keys.values()), model_keys, tuple(reqs), digest, source,
                       {r.fingerprint: f"revoked by the trust policy: {r.reason}"
                        for r in p.revoked}, anchors, model_anchors, publishers,
                       revokers=_resolve(p.revokers, keys, "revokers") if p.revokers is not None
                       else frozenset())


def parse_policy(data: bytes, *, source: str = "<policy>", base: Path | None = None
                 ) -> TrustPolicy:
    """Validate policy bytes (YAML or JSON); ``base`` is where files it names live."""
    try:
        doc: Any = loads_yaml(data, what="trust policy") if data.strip() else None
    except MalformedDocument as err:
        raise SpecError(str(err), file=source) from None
    if not isinstance(doc, dict) or not doc:
        raise SpecError("empty trust policy: refusing to trust anything", file=source)
    try:
        return _build(_Policy.model_validate(doc), sha256_bytes(data), source, base)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise SpecError(first["msg"], file=source, field=loc) from err
    except ValueError as err:
        raise SpecError(str(err), file=source) from err
    except SpecbundleError as err:
        raise SpecError(err.message, file=source) from err


def default_state_path(policy_path: Path) -> Path:
    """``<dir>/<stem>.state.json`` beside the policy: where its floors live by default."""
    return policy_path.with_name(f"{policy_path.stem}.state.json")


def load_policy(path: Path, *, state: Path | None = None) -> TrustPolicy:
    """Read and validate ``trust.yaml``; unreadable is an error, never an empty policy.

    ``state``: the operator's floor file (else ``$SPECBUNDLE_TRUST_STATE``, else
    :func:`default_state_path`), which every
    verification under this policy consults and raises (:mod:`specbundle.verify.floors`).
    """
    try:
        data = read_bounded(path, max_bytes=1024 * 1024, what="trust policy")
    except MalformedDocument as err:
        raise SpecError(str(err), file=str(path)) from None
    except OSError as err:
        raise SpecError(f"cannot read trust policy: {err.strerror}", file=str(path)) from err
    pol = parse_policy(data, source=str(path), base=path.parent)
    env = os.environ.get(STATE_ENV)
    chosen = state or (Path(env) if env else None) or default_state_path(path)
    return replace(pol, state_path=chosen.absolute())
