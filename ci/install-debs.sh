#!/usr/bin/env bash
# Debian packages the suite's real components need (idempotent; skips what is installed):
#   chromium  headless browser: every HTML page the tool writes is opened in it
#   softhsm2  a real PKCS#11 token for the HSM signing tests; opensc gives pkcs11-tool
set -euo pipefail
want=(chromium softhsm2 opensc)
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "debs already installed: ${want[*]}"; exit 0; }
command -v apt-get >/dev/null || { echo "no apt-get: cannot install ${missing[*]}" >&2; exit 1; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
