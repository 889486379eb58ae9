"""Carry a signed bundle across the air gap: export a transfer set, import it on the other side.

:func:`export_bundle` (connected side) writes objects, the bundle folder (record, scan report,
signatures, attestations, rendered manifests) and a signed, versioned index, optionally split
into fixed-size chunks. :func:`import_bundle` (isolated side, offline) verifies the index, every
part and the whole bundle against the trust policy in a staging area, refuses rollbacks, and
only then makes anything visible in the destination mirror; it is idempotent and resumes.
"""

from specbundle.transfer.chunks import parse_size
from specbundle.transfer.export import ExportResult, export_bundle
from specbundle.transfer.importer import ImportResult, import_bundle, read_index
from specbundle.transfer.index import INDEX_FILE, TransferIndex

__all__ = ["INDEX_FILE", "ExportResult", "ImportResult", "TransferIndex", "export_bundle",
           "import_bundle", "parse_size", "read_index"]
