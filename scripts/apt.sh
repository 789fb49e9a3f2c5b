#!/usr/bin/env bash
# The Debian packages for headless MuJoCo rendering (EGL via Mesa llvmpipe, and OSMesa as fallback).
# scripts/install.sh runs it first; CI runs it alone before the torch-floor check, which needs no venv.
#   bash scripts/apt.sh        # idempotent: installs only what dpkg does not list
set -euo pipefail
APT_PACKAGES="libegl1 libegl-mesa0 libgl1-mesa-dri libgbm1 libosmesa6"

missing_apt=""
for p in $APT_PACKAGES; do
  dpkg -s "$p" >/dev/null 2>&1 || missing_apt="$missing_apt $p"
done
if [ -n "$missing_apt" ]; then
  echo "[install] Debian packages for headless rendering:$missing_apt"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing_apt
fi
