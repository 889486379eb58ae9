"""Moved to tests/lib/ (models, specs, bundles, policy); kept importable for modules not yet
ported."""

from tests.lib.bundles import pulled_bundle, write_scan_report
from tests.lib.models import make_model
from tests.lib.policy import key_files, policy_doc, write_policy
from tests.lib.specs import spec_file

__all__ = ["key_files", "make_model", "policy_doc", "pulled_bundle", "spec_file",
           "write_policy", "write_scan_report"]
