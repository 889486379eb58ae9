"""Real Docker fixtures (tests/lib/containers.py): a reachable daemon and small images."""

from tests.lib.containers import ImageFactory, docker_client, images, llama_image, rootfs_tar

__all__ = ["ImageFactory", "docker_client", "images", "llama_image", "rootfs_tar"]
