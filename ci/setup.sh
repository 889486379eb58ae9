#!/usr/bin/env bash
# Install and start everything the whole test suite needs, beyond `pip install -e '.[test]'`:
# Debian packages (chromium, softhsm2), the Docker engine, SGLang's argument oracle, the OCI
# registry and vLLM's CPU build. Idempotent: a second run only checks. README command 2 and
# .ci/run both call it, so a user's run and CI's run test the same things.
# A component that fails to install is reported (its tests then skip, and ci/test.sh says which).
set -uo pipefail
cd "$(dirname "$0")/.."
. ci/timing.sh
[ -n "$SB_TIMINGS_OWNER" ] && trap timing_table EXIT
status=0
timed "install Debian packages (chromium, softhsm2)" bash ci/install-debs.sh \
  || { echo "setup: Debian packages unavailable: browser/HSM tests will be skipped"; status=1; }
timed "start dockerd" bash ci/start-dockerd.sh \
  || { echo "setup: docker engine unavailable: docker tests will be skipped"; status=1; }
timed "install SGLang oracle (.venv-sglang)" bash ci/install-sglang.sh \
  || { echo "setup: SGLang install failed: its oracle tests will be skipped"; status=1; }
timed "install docker-registry + skopeo" bash ci/install-registry.sh \
  || { echo "setup: docker-registry/skopeo unavailable: OCI tests will be skipped"; status=1; }
timed "install vLLM CPU build (.venv-vllm)" bash ci/install-vllm.sh \
  || { echo "setup: vLLM install failed: the vllm tests will be skipped"; status=1; }
exit $status
