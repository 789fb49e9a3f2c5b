"""Build a simulator's own Python environment, so its workers run apart from the trainer's packages.

The environment holds only what the simulator's workers import (numpy, the simulator, shared memory; no torch),
pinned to this environment's versions and installed from the configured package index; it is built under
$VLARL_CACHE/sims/NAME (default ~/.cache/vlarl). Idempotent: a finished environment is only checked again.

Examples:
  vlarl setup-sim libero
  vlarl rl-train -c libero_tiny_ppo env.train.python=libero env.eval.python=libero
  VLARL_LIBERO_PLUS_SOURCE=~/LIBERO-plus vlarl setup-sim libero_plus   # a clone of sylvestf/LIBERO-plus
  vlarl eval --suite libero_plus_goal --categories camera,noise
  vlarl setup-sim libero_pro                     # LIBERO-PRO's own package, for its _object suites
  vlarl eval --suite libero_pro_goal --categories object
"""

from __future__ import annotations

import typer


def command(
    name: str = typer.Argument(..., help="The simulator (its env_type): libero, libero_plus, libero_pro."),
    python: str | None = typer.Option(None, "--python", help="Base interpreter for the new environment "
                                      "(default: the one vlarl runs on)."),
) -> None:
    """Build (or check) the simulator's own environment."""
    from vlarl_cli.envs import registry
    from vlarl_cli.envs.interpreter import build
    from vlarl_cli.errors import ConfigError, did_you_mean

    known = registry.names()
    if name not in known:
        raise ConfigError(f'"{name}" is not a simulator vlarl knows.{did_you_mean(name, known)}',
                          f"Use one of: {', '.join(known)}.")
    build(name, base=python, log=typer.echo)
