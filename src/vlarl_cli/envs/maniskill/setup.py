"""Is ManiSkill3 usable here? ``check_maniskill`` names what is missing, as the LIBERO check does.

mani-skill 3.0.1 with sapien 3.0.3 needs a Vulkan device even for state observations (sapien creates its
render system with the scene). Without a GPU that is Mesa's lavapipe: Debian 12's Mesa 22 lavapipe is
rejected by sapien, Mesa 25's (bookworm-backports) works. ``scripts/setup_maniskill.sh`` installs it.
"""

from __future__ import annotations

import ctypes.util
import functools
import subprocess
import sys
from pathlib import Path

from vlarl_cli.errors import EnvError

SETUP = "bash scripts/setup_maniskill.sh"
APT_PACKAGES = "mesa-vulkan-drivers libvulkan1 (from bookworm-backports: Mesa >= 25)"
_ICD_DIRS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d")

# Builds one built-in scene and steps it once: what actually needs Vulkan.
_PROBE = (
    "import gymnasium as gym, mani_skill.envs\n"
    "env = gym.make('PickCube-v1', num_envs=1, obs_mode='state', sim_backend='cpu')\n"
    "env.reset(seed=0); env.step(env.action_space.sample()); env.close(); print('ok')\n"
)


def missing_parts() -> list[str]:
    """What is absent, as install instructions (empty when everything is in place)."""
    missing = []
    for module, package in (("mani_skill", "mani-skill==3.0.1"), ("sapien", "sapien==3.0.3")):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"python package {package} (pip install 'vlarl[maniskill]')")
    if ctypes.util.find_library("vulkan") is None:
        missing.append("the Vulkan loader libvulkan.so.1 (apt package libvulkan1)")
    if not any(p.is_dir() and any(p.glob("*.json")) for p in map(Path, _ICD_DIRS)):
        missing.append(f"a Vulkan driver (no ICD in {' or '.join(_ICD_DIRS)}; apt package {APT_PACKAGES})")
    return missing


@functools.cache
def probe() -> str:
    """'' when a ManiSkill scene builds and steps (in a subprocess: a bad driver may abort), else why not."""
    missing = missing_parts()
    if missing:
        return "missing: " + "; ".join(missing)
    try:
        run = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "building a PickCube-v1 scene took over 300 s"
    if run.returncode == 0 and run.stdout.strip().endswith("ok"):
        return ""
    tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
    return (f"a PickCube-v1 scene does not build (exit {run.returncode}: {' | '.join(tail)}); sapien rejects "
            f"Debian 12's Mesa 22 lavapipe, it needs {APT_PACKAGES}")


def check_maniskill() -> None:
    """Raise :class:`EnvError` naming the missing packages when ManiSkill cannot run here."""
    problem = probe()
    if problem:
        raise EnvError(f"ManiSkill3 cannot run on this machine: {problem}.",
                       fix=f"Run `{SETUP}` (pip extra 'maniskill' + Mesa 25 lavapipe from bookworm-backports).")
