#!/usr/bin/env bash
# Optional: ManiSkill3 (env_type: maniskill) into ./.venv. install.sh runs it when VLARL_MANISKILL=1.
#   bash scripts/setup_maniskill.sh        # idempotent: a second run only re-checks
# Why each step:
#  1. sapien 3.0.3 needs a Vulkan device even for state observations. Without a GPU that is Mesa's
#     lavapipe; Debian 12's (Mesa 22) is rejected by sapien, Mesa 25's from bookworm-backports works.
#  2. pip extra `maniskill` (mani-skill==3.0.1, sapien==3.0.3); checked with --dry-run on these machines
#     not to touch torch / numpy / transformers.
#  3. A probe that builds and steps PickCube-v1 and names what is missing when it cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

mesa_major() { dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | cut -d. -f1; }
if [ "$(mesa_major || true)" = "" ] || [ "$(mesa_major)" -lt 25 ] || ! dpkg -s libvulkan1 >/dev/null 2>&1; then
  . /etc/os-release
  if [ "${VERSION_CODENAME:-}" = "bookworm" ]; then
    src=/etc/apt/sources.list.d/bookworm-backports.sources
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo "[maniskill] adding the bookworm-backports apt source ($src)"
      printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' | $SUDO tee "$src" >/dev/null
    fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers libvulkan1
  else
    echo "[maniskill] not Debian bookworm: install Mesa >= 25 lavapipe (mesa-vulkan-drivers) and libvulkan1 yourself" >&2
  fi
fi

if ! "$VENV/bin/python" -c "import mani_skill, sapien" 2>/dev/null; then
  echo "[maniskill] pip install -e '.[maniskill]'"
  "$VENV/bin/pip" install -q -e ".[maniskill]"
fi

"$VENV/bin/python" - <<'PY'
from vlarl_cli.envs.maniskill.setup import check_maniskill
check_maniskill()
print("[maniskill] PickCube-v1 builds and steps: ManiSkill3 is ready")
PY
