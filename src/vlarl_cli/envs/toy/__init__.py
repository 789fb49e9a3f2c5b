"""The CPU toy task (``env_type: toy_reach``): 2-D reach-the-goal in pure torch (``envs.toy.reach``).

The names load on first use: the simulator table imports ``envs.toy.simulator`` (this package first) when any
config is validated, also where no torch is installed (a simulator's own interpreter, the device kit's check).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReachEnv", "ReachStep", "ToyVectorEnv"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from vlarl_cli.envs.toy import reach

        return getattr(reach, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
