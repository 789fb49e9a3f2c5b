"""What ``vlarl rl-train`` does: load the config, then print it, plan it, or train.

For several processes the command re-launches itself through ``torch.distributed.run`` (the launcher
behind torchrun, ``distributed.dist.relaunch``), so these two are equivalent::

    vlarl rl-train --config quickstart --nproc-per-node 2
    torchrun --nproc-per-node 2 -m vlarl_cli.cli.rl_train --config quickstart
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from vlarl_cli.errors import ConfigError

if TYPE_CHECKING:
    from vlarl_cli.config.schema import VlarlConfig

#: the module torchrun starts on every rank of a multi-process ``rl-train`` (its ``rank_main``)
RANK_ENTRY = "vlarl_cli.cli.rl_train"


def launch(*, config: str, overrides: list[str], print_config: bool = False, dry_run: bool = False,
           resume: str | None = None, nproc_per_node: int = 1, nnodes: int = 1, node_rank: int = 0,
           master_addr: str = "127.0.0.1", master_port: int = 29500, plan_world_size: int | None = None,
           output: Path | None = None, rendezvous_timeout_s: int = 180) -> None:
    """Load and validate the config, then print / dry-run / train (re-launching for several processes)."""
    from vlarl_cli.config.loading import load_config, to_yaml
    from vlarl_cli.distributed import dist

    if plan_world_size is not None and not dry_run:
        raise ConfigError(f"--world-size {plan_world_size} only plans a layout with --dry-run; a launch takes its "
                          "size from --nnodes x --nproc-per-node (or torchrun).",
                          "Add --dry-run to plan for that many devices, or use --nproc-per-node / --nnodes.")
    if print_config and dry_run:  # one would be skipped without a word
        raise ConfigError("--print-config and --dry-run exclude each other (the first prints the config and stops).",
                          "Pass one of them; run the command twice for both.")
    from vlarl_cli.training.run_folder import check_resume_argument

    check_resume_argument(resume)
    if node_rank >= nnodes:
        raise ConfigError(f"--node-rank {node_rank} does not exist among --nnodes {nnodes} (ranks 0..{nnodes - 1}).",
                          "Give every node a distinct --node-rank below --nnodes.")
    world_size = plan_world_size if dry_run and plan_world_size else dist.launch_world_size(nnodes, nproc_per_node)
    loaded = load_config(config, overrides, world_size=world_size)
    if print_config:
        sys.stdout.write(to_yaml(loaded.config))
        return
    _report_ignored(loaded.ignored, main=dist.env_world()[0] == 0, deviations=loaded.deviations)
    if dry_run:
        from vlarl_cli.training.dry_run import dry_run as plan

        plan(loaded.config, world_size=world_size)
        return
    from vlarl_cli.training import run_folder

    _check_before_launch(loaded.config, world_size)
    log_path = loaded.config.runner.logger.log_path
    owner = node_rank == 0 and dist.env_world()[0] == 0
    with run_folder.claim(log_path, command="rl-train", resuming=bool(resume or loaded.config.runner.resume_dir),
                          main=owner):
        if owner and not run_folder.held_by_launcher(Path(log_path).expanduser()):
            _check_resume(loaded.config, resume)
        if world_size > 1 and not dist.launched():
            args = ["--config", str(loaded.source), *(["--resume", resume] if resume else []), *overrides]
            with run_folder.shared_with_children(log_path):
                dist.relaunch(RANK_ENTRY, args, nproc_per_node=nproc_per_node, nnodes=nnodes, node_rank=node_rank,
                              master_addr=master_addr, master_port=master_port,
                              rendezvous_timeout_s=rendezvous_timeout_s, log_dir=Path(log_path) / "logs")
            return
        from vlarl_cli.training.rl import train

        train(loaded, resume=resume)
    dist.leave_together()


def _check_before_launch(config: VlarlConfig, world_size: int) -> None:
    """Before any simulator or model is started: envs no machine holds, a run folder under a file or on a
    read-only mount, a video folder that cannot be written (else found after the first rollout). A folder that
    another process writes, or that holds a run this command would replace, is ``run_folder.claim``'s."""
    from vlarl_cli.checkpoints.atomic import check_writable_folder
    from vlarl_cli.training.dry_run import check_envs_fit

    check_envs_fit(config, world_size)
    check_writable_folder(config.runner.logger.log_path, "The run folder (runner.logger.log_path)")
    for split in ("train", "eval"):
        video = getattr(config.env, split).video_cfg
        if video.save_video:
            check_writable_folder(video.video_base_dir, f"The video folder (env.{split}.video_cfg.video_base_dir)")


def _check_resume(config: VlarlConfig, resume: str | None) -> None:
    """Overrides given with --resume: applied and recorded in the run's config history, or refused."""
    resume = resume or config.runner.resume_dir
    if resume:
        from vlarl_cli.training.checkpoint import locate_checkpoint
        from vlarl_cli.training.run_folder import check_resume_config

        run_dir = Path(config.runner.logger.log_path).expanduser()
        check_resume_config(run_dir, locate_checkpoint(run_dir, resume), config)


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
