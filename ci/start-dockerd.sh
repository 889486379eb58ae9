#!/usr/bin/env bash
# Install Debian's docker.io (if missing) and start dockerd in the background (if not running).
#
# Idempotent: safe to call from .ci/run and by hand. The daemon runs without iptables and
# without the default bridge (this machine has neither), so containers get either
# `--network none` or host networking; specbundle's engine containers use host networking
# with the engine bound to 127.0.0.1 (see specbundle.images.run_container).
# Exit status 0 when `docker info` answers, 1 otherwise (tests then skip with a reason).
set -u
LOG=${DOCKERD_LOG:-/tmp/dockerd.log}
SOCK=/var/run/docker.sock

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

if ! command -v dockerd >/dev/null 2>&1; then
  echo "start-dockerd: installing docker.io" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || true
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null \
    || { echo "start-dockerd: apt-get install docker.io failed" >&2; exit 1; }
fi

if docker info >/dev/null 2>&1; then
  echo "start-dockerd: daemon already running" >&2
  exit 0
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  echo "start-dockerd: starting dockerd (log $LOG)" >&2
  as_root rm -f /var/run/docker.pid
  as_root nohup dockerd --iptables=false --bridge=none --host="unix://$SOCK" >"$LOG" 2>&1 &
fi

for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "start-dockerd: daemon ready ($(docker version --format '{{.Server.Version}}' 2>/dev/null))" >&2
    exit 0
  fi
  sleep 1
done
echo "start-dockerd: dockerd did not answer within 60 s; last log lines:" >&2
tail -n 20 "$LOG" >&2 || true
exit 1
