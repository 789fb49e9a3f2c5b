"""Train a policy with online RL (PPO or GRPO) in LIBERO.

Examples:
  vlarl rl-train --config quickstart
  vlarl rl-train --config libero_spatial_ppo_gr00t --dry-run
  vlarl rl-train --config libero_10_ppo_openpi actor.optim.lr=1e-5 env.train.total_num_envs=32
  vlarl rl-train --config quickstart --nproc-per-node 2
  vlarl rl-train --config quickstart --resume runs/quickstart/checkpoints/latest
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer


def command(
    config: str = typer.Option(..., "--config", "-c",
                               help="A YAML file or a preset name from configs/ (e.g. quickstart)."),
    overrides: list[str] | None = typer.Argument(
        None, help="KEY=VALUE overrides applied after composition, e.g. actor.optim.lr=1e-5.",
        show_default=False),
    print_config: bool = typer.Option(False, "--print-config", help="Print the resolved config and exit."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate, build every model on the meta device, "
                                 "print placement, parameter counts and memory estimates; train nothing."),
    resume: str | None = typer.Option(None, "--resume", help="Checkpoint folder to resume from, or 'auto' "
                                      "for the latest checkpoint of this run."),
    nproc_per_node: int = typer.Option(1, "--nproc-per-node", min=1, help="Processes per node (one per "
                                       "device); >1 launches through torch.distributed.run."),
    nnodes: int = typer.Option(1, "--nnodes", min=1, help="Number of nodes (torchrun rendezvous)."),
    node_rank: int = typer.Option(0, "--node-rank", min=0, help="Rank of this node."),
    master_addr: str = typer.Option("127.0.0.1", "--master-addr", help="Rendezvous host."),
    master_port: int = typer.Option(29500, "--master-port", min=1, max=65535, help="Rendezvous port."),
    rendezvous_timeout: int = typer.Option(180, "--rendezvous-timeout", min=1, max=7 * 86400, help="Seconds a multi-node launch "
                                           "waits for every node to join before it names the ones missing."),
    world_size: int | None = typer.Option(None, "--world-size", min=1, help="With --dry-run: plan for this many "
                                          "devices instead of nnodes x nproc-per-node."),
    env_seed: int | None = typer.Option(None, "--env-seed", min=0, max=2**31 - 1, help="Env seed of the train and eval envs (RLinf "
                                        "env.*.seed: seed + rank offset, applied before every reset)."),
) -> None:
    """Train a policy with online RL (PPO or GRPO) in LIBERO."""
    from vlarl_cli.training.entry import launch

    seeds = [f"env.train.seed={env_seed}", f"env.eval.seed={env_seed}"] if env_seed is not None else []
    launch(config=config, overrides=list(overrides or []) + seeds, print_config=print_config, dry_run=dry_run,
           resume=resume, nproc_per_node=nproc_per_node, nnodes=nnodes, node_rank=node_rank,
           master_addr=master_addr, master_port=master_port, rendezvous_timeout_s=rendezvous_timeout,
           plan_world_size=world_size, output=Path.cwd())


def rank_main(argv: list[str] | None = None) -> None:
    """``python -m vlarl_cli.cli.rl_train`` (what torchrun starts on every rank of a multi-process run),
    behind the same error boundary and console rules as ``vlarl`` (cli/boundary.py, logging/quiet.py)."""
    import argparse

    from vlarl_cli.cli.boundary import debug_requested, guarded
    from vlarl_cli.logging.quiet import console_rules
    from vlarl_cli.training.entry import launch

    args = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="vlarl_cli.cli.rl_train")
    parser.add_argument("--config", required=True)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("overrides", nargs="*")
    ns = parser.parse_args(args)
    console_rules(ns.verbose)  # every rank hides dependency noise as rank 0 does (VLARL_VERBOSE inherited)
    code = guarded(lambda: launch(config=ns.config, overrides=ns.overrides, resume=ns.resume),
                   command="rl-train", debug=ns.debug or debug_requested(args))
    sys.exit(code)


if __name__ == "__main__":
    rank_main()
