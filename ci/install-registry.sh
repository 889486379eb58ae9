#!/usr/bin/env bash
# The OCI tests run against a real CNCF distribution registry and read it with skopeo: install
# Debian's docker-registry and skopeo packages if missing (idempotent; no service is started,
# the tests start their own registry on loopback with a temp storage root).
set -euo pipefail
need=()
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
[ ${#need[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
# the package's own service is not wanted (tests pick free ports)
if command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi
