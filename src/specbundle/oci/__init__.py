"""Stage after sign: bundles as signed CNCF ModelPack artifacts in OCI registries.

:func:`push_bundle` sends a bundle's current signed version to a :class:`Backend` (a registry,
or an OCI image layout directory for ``skopeo``/``oras copy`` across the gap): one ModelPack
artifact per model, a metadata manifest (the version's scan report and image records), a
bundle index tying them, and the signed bundle manifest, model.sig files and attestation lines
as referrers (OCI 1.1 API or fallback tag).
:func:`pull_bundle` (isolated side, may talk only to the internal registry or read a layout)
stages everything, verifies it with the trust policy and only then commits it to a mirror.

The two seams that decide *what* travels are :mod:`specbundle.oci.contents` (push) and
:mod:`specbundle.oci.stage` (pull); everything else is transport.
"""

from specbundle.oci.auth import Credentials, find_credentials
from specbundle.oci.backend import Backend, BlobPush
from specbundle.oci.layout import LayoutBackend
from specbundle.oci.pull import OciPullResult, look_bundle, pull_bundle
from specbundle.oci.push import PushResult, push_bundle
from specbundle.oci.ref import Reference, parse_reference
from specbundle.oci.registry import DEFAULT_CHUNK, RegistryBackend, RegistryOptions

__all__ = ["DEFAULT_CHUNK", "Backend", "BlobPush", "Credentials", "LayoutBackend",
           "OciPullResult", "PushResult", "Reference", "RegistryBackend", "RegistryOptions",
           "find_credentials", "look_bundle", "parse_reference", "pull_bundle", "push_bundle"]
