"""Bench fixtures: the loopback stub server, the session's bench pairs and Docker images."""

from tests.lib.bundles import pull_synth
from tests.lib.containers import docker_client, images, llama_image
from tests.lib.models import bench_pairs
from tests.lib.specs import BENCH, PROMPTS_FILE, SHORT_PROMPTS, bundle_doc
from tests.lib.stub import CFG, StubConfig, serve_app, stub_server

# the builders moved to tests/lib/ (stub, specs, bundles); re-exported until every importer is
# ported
__all__ = ["BENCH", "CFG", "PROMPTS_FILE", "SHORT_PROMPTS", "StubConfig", "bench_pairs",
           "bundle_doc", "docker_client", "images", "llama_image", "pull_synth", "serve_app",
           "stub_server"]
