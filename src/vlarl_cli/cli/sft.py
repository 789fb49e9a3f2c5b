"""Supervised fine-tuning (behaviour cloning) of a policy on demonstration episodes.

Examples:
  vlarl sft --config sft_toy_reach                           # record 100 toy expert demos, then train
  vlarl sft --config sft_quickstart --record 4 --steps 300   # LIBERO scripted-expert demos, tiny pi0
  vlarl sft --config sft_quickstart --demos runs/sft_quickstart/demos -o ckpt/pi0_sft
  vlarl sft --config X --demos libero_spatial_lerobot --demos libero_object_lerobot "sft.weights=[1,2]"
  vlarl sft --config X --demos big_lerobot_dataset --nproc-per-node 2      # FSDP2 over 2 processes
  vlarl rl-train --config quickstart actor.model.model_path=runs/sft_quickstart/checkpoints/global_step_300
"""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    config: str = typer.Option(..., "--config", "-c", help="A YAML file or a preset name from configs/."),
    demos: list[Path] | None = typer.Option(None, "--demos", help="Demonstrations: a LeRobot dataset (v2.1 / v3.0, "
                                            "streamed), LIBERO .hdf5 file(s) or a folder of episode_*.npz; repeat "
                                            "for several datasets (weights: sft.weights). Default: sft.demos, else "
                                            "record expert demos into <run>/demos first."),
    record: int | None = typer.Option(None, "--record", min=1, max=100_000, help="Record N successful expert episodes "
                                      "first (into --demos, or <run>/demos). Default without --demos: 100 on "
                                      "toy_reach, 2 on LIBERO."),
    overrides: list[str] | None = typer.Argument(None, help="KEY=VALUE config overrides.", show_default=False),
    steps: int | None = typer.Option(None, "--steps", min=1, max=10**9, help="Optimizer steps (default: runner.max_steps)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Checkpoint folder, which must not exist "
                                       "yet (default: <run>/checkpoints/global_step_<steps>)."),
    resume: str | None = typer.Option(None, "--resume", help="Continue from a checkpoint of this run: 'auto' "
                                      "(the latest) or a checkpoint folder."),
    nproc_per_node: int = typer.Option(1, "--nproc-per-node", min=1, help="Processes per node (one per "
                                       "device); >1 launches through torch.distributed.run."),
    nnodes: int = typer.Option(1, "--nnodes", min=1, help="Number of nodes (torchrun rendezvous)."),
    node_rank: int = typer.Option(0, "--node-rank", min=0, help="Rank of this node."),
    master_addr: str = typer.Option("127.0.0.1", "--master-addr", help="Rendezvous host."),
    master_port: int = typer.Option(29500, "--master-port", min=1, max=65535, help="Rendezvous port."),
    rendezvous_timeout: int = typer.Option(180, "--rendezvous-timeout", min=1, max=7 * 86400, help="Seconds a multi-node launch "
                                           "waits for every node to join before it names the ones missing."),
) -> None:
    """Supervised fine-tuning (behaviour cloning) of a policy on demonstration episodes."""
    from vlarl_cli.distributed import dist
    from vlarl_cli.training.sft import run_sft

    if dist.launch_world_size(nnodes, nproc_per_node) > 1 and not dist.launched():
        from vlarl_cli.config.loading import load_config
        from vlarl_cli.training import run_folder

        loaded = load_config(config, list(overrides or []))  # a broken config is reported once, before any process starts
        log_path = loaded.config.runner.logger.log_path
        args = ["sft", "--config", config, *[a for d in demos or [] for a in ("--demos", str(d))],
                *(["--record", str(record)] if record is not None else []),
                *(["--steps", str(steps)] if steps is not None else []),
                *(["-o", str(output)] if output is not None else []),
                *(["--resume", resume] if resume else []), *(overrides or [])]
        with run_folder.claim(log_path, command="sft", main=node_rank == 0), run_folder.shared_with_children(log_path):
            dist.relaunch("vlarl_cli.cli.main", args, nproc_per_node=nproc_per_node, nnodes=nnodes,
                          node_rank=node_rank, master_addr=master_addr, master_port=master_port,
                          rendezvous_timeout_s=rendezvous_timeout, log_dir=Path(log_path) / "logs")
        return
    run_sft(config=config, demos=list(demos or []), overrides=list(overrides or []), steps=steps, output=output,
            record=record, resume=resume)
