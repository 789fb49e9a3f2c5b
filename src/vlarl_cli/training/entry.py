"""Entry point of ``vlarl rl-train``: load the config, then print it, plan it, or train.

For several processes the command re-launches itself through ``torch.distributed.run`` (the launcher
behind torchrun), so these two are equivalent::

    vlarl rl-train --config quickstart --nproc-per-node 2
    torchrun --nproc-per-node 2 -m vlarl_cli.training.entry --config quickstart
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from vlarl_cli.errors import ConfigError


def launch(*, config: str, overrides: list[str], print_config: bool = False, dry_run: bool = False,
           resume: str | None = None, nproc_per_node: int = 1, nnodes: int = 1, node_rank: int = 0,
           master_addr: str = "127.0.0.1", master_port: int = 29500, plan_world_size: int | None = None,
           output: Path | None = None) -> None:
    """Load and validate the config, then print / dry-run / train (re-launching for several processes)."""
    from vlarl_cli.config.loading import load_config, to_yaml
    from vlarl_cli.distributed.dist import env_world

    if plan_world_size is not None and not dry_run:
        raise ConfigError(f"--world-size {plan_world_size} only plans a layout with --dry-run; a launch takes its "
                          "size from --nnodes x --nproc-per-node (or torchrun).",
                          "Add --dry-run to plan for that many devices, or use --nproc-per-node / --nnodes.")
    if node_rank >= nnodes:
        raise ConfigError(f"--node-rank {node_rank} does not exist among --nnodes {nnodes} (ranks 0..{nnodes - 1}).",
                          "Give every node a distinct --node-rank below --nnodes.")
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    world_size = env_world()[1] if launched else nnodes * nproc_per_node
    if dry_run and plan_world_size:
        world_size = plan_world_size
    loaded = load_config(config, overrides, world_size=world_size)
    if print_config:
        sys.stdout.write(to_yaml(loaded.config))
        return
    _report_ignored(loaded.ignored, main=env_world()[0] == 0, deviations=loaded.deviations)
    if dry_run:
        from vlarl_cli.training.dry_run import dry_run as plan

        plan(loaded.config, world_size=world_size)
        return
    if world_size > 1 and not launched:
        _relaunch(loaded.source, overrides, resume, nproc_per_node, nnodes, node_rank, master_addr, master_port)
        return
    from vlarl_cli.checkpoints.atomic import check_writable_folder
    from vlarl_cli.distributed import dist
    from vlarl_cli.training.rl import train

    # before any simulator or model is started: a run folder under a file or on a read-only mount
    check_writable_folder(loaded.config.runner.logger.log_path, "The run folder (runner.logger.log_path)")

    train(loaded, resume=resume)
    # every rank finished: leave together and tear the process groups down before the interpreter exits
    # (gloo's threads destroyed at interpreter teardown can abort a process that already succeeded)
    dist.barrier()
    dist.shutdown()


def _report_ignored(ignored: list[str], main: bool, deviations: tuple[str, ...] | list[str] = ()) -> None:
    if (ignored or deviations) and main:
        from rich.console import Console
        from rich.text import Text

        # plain Text, never markup: key names come from the user's file
        console = Console(stderr=True, highlight=False, soft_wrap=True)
        for deviation in deviations:
            console.print(Text.assemble(("deviation: ", "bold yellow"), deviation))
        if ignored:
            console.print(Text(f"note: {len(ignored)} RLinf key(s) accepted but not used by vlarl: "
                               f"{', '.join(ignored)}", style="dim"))


def _relaunch(source: Path, overrides: list[str], resume: str | None, nproc_per_node: int, nnodes: int,
              node_rank: int, master_addr: str, master_port: int) -> None:
    from torch.distributed import run as torch_run

    args = [f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}", f"--node-rank={node_rank}",
            f"--master-addr={master_addr}", f"--master-port={master_port}",
            "-m", "vlarl_cli.training.entry", "--config", str(source)]
    if resume:
        args += ["--resume", resume]
    args += overrides
    try:
        torch_run.main(args)
    except Exception as err:  # ChildFailedError: the child printed its own message
        raise ConfigError(f"The distributed job failed: {type(err).__name__}.",
                          "Read the per-rank output above; rank 0's message names the problem.") from None


def main(argv: list[str] | None = None) -> None:
    """``python -m vlarl_cli.training.entry`` (what torchrun starts on every rank), behind the same error
    boundary as ``vlarl`` (cli/boundary.py)."""
    from vlarl_cli.cli.boundary import debug_requested, guarded

    args = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="vlarl_cli.training.entry")
    parser.add_argument("--config", required=True)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("overrides", nargs="*")
    ns = parser.parse_args(args)
    code = guarded(lambda: launch(config=ns.config, overrides=ns.overrides, resume=ns.resume),
                   command="rl-train", debug=ns.debug or debug_requested(args))
    sys.exit(code)


if __name__ == "__main__":
    main()
