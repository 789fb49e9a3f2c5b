"""The CPU toy task (``env_type: toy_reach``): 2-D reach-the-goal in pure torch (``envs.toy.reach``)."""

from vlarl_cli.envs.toy.reach import ReachEnv, ReachStep, ToyVectorEnv

__all__ = ["ReachEnv", "ReachStep", "ToyVectorEnv"]
