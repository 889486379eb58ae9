"""Engine container images carried with a bundle, and running them for the benchmark.

Connected side: :func:`save_images` resolves each engine image the bundle spec names (tag ->
image ID and registry digest), ``docker save``-s it into the mirror as a content-addressed
object and records it at ``bundles/<name>/images/<engine>.json``; the digests of the archive
and of the record join the bundle record's ``extra_blobs`` (kept by gc, carried and signed
by the transfer index on export). Isolated side: :func:`load_images` refuses any archive that
the signed transfer index (or, without a policy, the bundle record) does not list, or whose
digest, image ID or layers differ from its record, before ``docker load``.
:func:`serve_container` (a rendered command) and :func:`run_container` (a raw argv) start an
engine from the loaded image for ``specbundle bench --runtime docker`` and always stop and
remove it, also on Ctrl-C.
"""

from specbundle.image_record import ImageRecord, image_record_path, read_image_records
from specbundle.images.archive import ArchiveInfo, inspect_archive
from specbundle.images.daemon import connect
from specbundle.images.load import LoadedImage, Vouched, check_image, load_images, vouched_digests
from specbundle.images.run import (
    LABEL,
    ContainerCommand,
    RunningContainer,
    remove_stale_containers,
    run_container,
    serve_container,
)
from specbundle.images.save import engine_images, save_images

__all__ = [
    "LABEL",
    "ArchiveInfo",
    "ContainerCommand",
    "ImageRecord",
    "LoadedImage",
    "RunningContainer",
    "Vouched",
    "check_image",
    "connect",
    "engine_images",
    "image_record_path",
    "inspect_archive",
    "load_images",
    "read_image_records",
    "remove_stale_containers",
    "run_container",
    "save_images",
    "serve_container",
    "vouched_digests",
]
