"""The tests' one fixture library, by noun; conftest files only wire its fixtures.

models (model folders, synthetic pairs, the session's read-only pairs), specs (spec files and
documents), bundles (pulled, scan-reported, signed or placeholder bundles), policy (keys and
trust policies), chain (a full chain of custody), versions (several signed versions), reports
(bench reports built directly), stub (a loopback OpenAI-style server), cli, fs (a small
tmpfs), containers (Docker images), registry, pki and hsm. Test modules import builders from
here or from the top-level ``tests/_*.py`` helpers only (tests/strict/test_test_imports.py).
"""
