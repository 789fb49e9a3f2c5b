"""Supervised fine-tuning (behaviour cloning) of a policy on demonstration episodes.

    vlarl sft --config sft_toy_reach                          # record 100 toy expert demos, train, save
    vlarl sft --config sft_quickstart --record 4 --steps 200  # LIBERO expert demos + tiny pi0
    vlarl sft --config sft_quickstart --demos runs/sft_quickstart/demos
    torchrun --nproc-per-node 2 -m vlarl_cli.cli.main sft --config sft_toy_reach   # data parallel

What it does (:func:`train_sft`):

1. demonstrations: ``--demos DIR`` (episode files, :mod:`vlarl_cli.training.demos`), or, without it, ``--record N``
   expert episodes recorded first into ``<run>/demos`` (the toy reach expert for ``env_type: toy_reach``,
   LIBERO's scripted pick-and-place expert on ``env.train``'s suite / tasks / resolution otherwise);
2. the policy from ``actor.model`` (:func:`vlarl_cli.policies.registry.build_policy`; ``model_path`` to start
   from a checkpoint), under ``actor.seed``;
3. ``steps`` optimizer steps (``--steps``, else ``runner.max_steps``): each draws ``actor.global_batch_size``
   samples (observation, action chunk ``[C, A]``) from a seeded permutation of the dataset (epochs without
   replacement), in micro-batches of ``actor.micro_batch_size``; the loss is the family's
   ``policy.supervised_loss(obs, actions [B, C, A] env-space) -> scalar mean`` (flow matching in the family's
   own normalised action space for pi0 / GR00T / toy flow, token cross-entropy for OpenVLA-OFT / toy token,
   NLL for toy Gaussian; flow losses also take ``generator=`` for their noise and times); AdamW (``actor.optim``; the value head, untouched by
   the loss, keeps its weights), gradient-norm clipping at ``clip_grad``, the LR schedule of ``rl-train``
   (:func:`vlarl_cli.training.common.build_scheduler` with horizon ``steps``);
4. ``sft/loss``, ``sft/grad_norm``, ``sft/lr`` every ``log_every`` steps to ``<run>/sft_metrics.jsonl``;
5. one atomic checkpoint at the end: ``-o OUT``, else ``<run>/checkpoints/global_step_<steps>`` (and the
   ``latest`` pointer next to it). It holds the family's ``save_policy(format="vlarl")`` files (weights,
   ``vlarl_config.json``, norm stats, tokenizer) plus ``config.yaml`` and ``sft_state.json``, so
   ``vlarl eval --checkpoint`` and ``vlarl rl-train actor.model.model_path=<folder>`` load it. The toy
   policies have no checkpoint module: their state dict is written as ``model.safetensors`` (``vlarl eval``
   rebuilds the model from ``config.yaml`` and loads it strictly).

Randomness: model init from ``actor.seed``; the sample order, the flow noise and the flow times from
generators seeded by (seed, purpose); so a run is repeatable. Several processes (``torchrun``) split every
global batch evenly and average gradients (``distributed.dist.gradient_all_reduce``); rank 0 records and saves.
"""

from __future__ import annotations

import inspect
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlarl_cli.config.loading import LoadedConfig
from vlarl_cli.config.schema import VlarlConfig
from vlarl_cli.distributed import dist
from vlarl_cli.errors import ConfigError, VlarlError
from vlarl_cli.training.demos import ChunkDataset

__all__ = ["SftResult", "SftState", "default_record_count", "record_demos", "run_sft", "save_sft_checkpoint",
           "train_sft"]

METRICS_FILE = "sft_metrics.jsonl"
STATE_FILE = "sft_state.json"


@dataclass
class SftState:
    """What ``sft_state.json`` records next to the weights."""

    steps: int
    samples: int
    episodes: int
    demos: str
    first_loss: float
    last_loss: float
    model_type: str
    version: str = ""


@dataclass
class SftResult:
    run_dir: Path
    checkpoint: Path
    demos: Path
    steps: int
    first_loss: float
    last_loss: float
    losses: list[float]  # the loss of every optimizer step


def default_record_count(config: VlarlConfig) -> int:
    """Demonstrations recorded when neither ``--demos`` nor ``--record`` is given: 100 toy episodes (they
    take milliseconds), 2 LIBERO episodes (about a minute each with both cameras rendered)."""
    return 100 if config.env.train.env_type == "toy_reach" else 2


def record_demos(config: VlarlConfig, folder: Path, n: int, *, progress: Any = None) -> list[Path]:
    """Record ``n`` successful expert episodes for ``config.env.train`` into ``folder``."""
    split = config.env.train
    if split.env_type == "toy_reach":
        from vlarl_cli.training.demos import record_toy_demos

        return record_toy_demos(folder, n, max_steps=split.max_episode_steps, seed=split.seed)
    from vlarl_cli.training.demos import record_expert_demos

    return record_expert_demos(folder, n, suite=split.task_suite_name, task_ids=split.task_ids,
                               resolution=split.resolution, max_episode_steps=split.max_episode_steps,
                               settle_steps=split.settle_steps, protocol=split.protocol,
                               first_trial=split.seed, progress=progress)


def check_dataset(dataset: ChunkDataset, policy: torch.nn.Module, config: VlarlConfig, demos: Path) -> None:
    """The demonstrations must fit the policy: same action dim (and an image for image policies)."""
    action_dim = int(getattr(policy, "action_dim", config.actor.model.action_dim))
    if dataset.action_dim != action_dim:
        raise ConfigError(f"The demonstrations in {demos} have {dataset.action_dim}-d actions but the policy "
                          f"({config.actor.model.model_type}) acts in {action_dim} dims.",
                          f"Set actor.model.action_dim={dataset.action_dim} or use demonstrations of this "
                          "task (LIBERO: 7, toy_reach: 2).")
    toy = config.actor.model.model_type.startswith("toy_")
    if toy:
        from vlarl_cli.envs.toy import ReachEnv

        if dataset.state_dim != ReachEnv.state_dim:
            raise ConfigError(f"The demonstrations in {demos} have {dataset.state_dim}-d states but the toy "
                              f"policies read the {ReachEnv.state_dim}-d toy reach state.",
                              "Train toy policies on toy reach demonstrations (env.train.env_type toy_reach).")
    elif not dataset.cameras:
        raise ConfigError(f"The demonstrations in {demos} have no camera images; "
                          f"{config.actor.model.model_type} policies need them.",
                          "Record LIBERO demonstrations (env.train.env_type libero) for image policies.")


def _loss_fn(policy: torch.nn.Module, generator: torch.Generator) -> Any:
    """``(obs, actions) -> loss`` calling ``policy.supervised_loss`` (with the flow generator where it takes one)."""
    method = getattr(policy, "supervised_loss", None)
    if method is None:
        raise ConfigError(f"The {type(policy).__name__} policy has no supervised_loss, so it cannot be "
                          "fine-tuned on demonstrations.", "Use a pi0, pi05, gr00t, openvla_oft or toy policy.")
    takes_generator = "generator" in inspect.signature(method).parameters

    def fn(obs: dict[str, Any], actions: torch.Tensor) -> torch.Tensor:
        return method(obs, actions, generator=generator) if takes_generator else method(obs, actions)

    return fn


class _Sampler:
    """Seeded epochs without replacement: each ``next(n)`` returns the next ``n`` flat sample ids."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.rng = np.random.default_rng(seed)
        self.order = self.rng.permutation(size)
        self.pos = 0

    def next(self, n: int) -> np.ndarray:
        out: list[np.ndarray] = []
        while n > 0:
            if self.pos == self.size:
                self.order, self.pos = self.rng.permutation(self.size), 0
            take = min(n, self.size - self.pos)
            out.append(self.order[self.pos:self.pos + take])
            self.pos += take
            n -= take
        return np.concatenate(out)


def save_sft_checkpoint(policy: torch.nn.Module, config: VlarlConfig, folder: Path, state: SftState) -> Path:
    """Write the fine-tuned policy atomically into ``folder`` (layout in the module docstring)."""
    import importlib

    from vlarl_cli.checkpoints.atomic import atomic_directory, atomic_save_safetensors
    from vlarl_cli.config.loading import to_yaml
    from vlarl_cli.policies.registry import family_module

    family = family_module(config.actor.model.model_type)
    try:
        ckpt_module: Any = importlib.import_module(f"{family.__name__}.checkpoint")
    except ImportError:
        ckpt_module = None  # the toy policies: a bare state dict
    # the saved config must rebuild THIS model: with model_path pointing at the folder itself, a later
    # `vlarl eval --checkpoint` / rl-train loads the family folder; toy models are rebuilt from the config
    saved = config.model_copy(update={"actor": config.actor.model_copy(update={
        "model": config.actor.model.model_copy(update={"model_path": None if ckpt_module is None else str(folder)})})})
    with atomic_directory(folder) as tmp:
        if ckpt_module is not None:
            staging = tmp / "_policy"
            ckpt_module.save_policy(policy, staging, format="vlarl")
            for item in staging.iterdir():
                item.rename(tmp / item.name)
            staging.rmdir()
        else:
            tensors = {k: v.detach().cpu().contiguous() for k, v in policy.state_dict().items()}
            atomic_save_safetensors(tensors, tmp / "model.safetensors")
        (tmp / "config.yaml").write_text(to_yaml(saved))
        (tmp / STATE_FILE).write_text(json.dumps(asdict(state), indent=2))
    return folder


def train_sft(loaded: LoadedConfig, *, demos: Path | None = None, record: int | None = None,
              steps: int | None = None, output: Path | None = None, log_every: int | None = None,
              quiet: bool = False) -> SftResult:
    """Behaviour cloning as described in the module docstring; returns where everything went."""
    from vlarl_cli import __version__
    from vlarl_cli.checkpoints.atomic import atomic_write_text
    from vlarl_cli.config.loading import to_yaml
    from vlarl_cli.policies.registry import build_policy
    from vlarl_cli.training.common import build_scheduler, derived_seed, resolve_model_path, seed_everything
    from vlarl_cli.training.demos import load_episodes

    config = loaded.config
    if steps is None:
        steps = config.runner.max_steps if config.runner.max_steps > 0 else None
    if steps is None or steps < 1:
        raise ConfigError("No number of SFT steps: --steps is not given and runner.max_steps is not set.",
                          "Pass --steps K (or set runner.max_steps in the config).")
    ctx = dist.init_distributed()
    say = (lambda *a: None) if quiet else dist.print0
    run_dir = Path(config.runner.logger.log_path).expanduser()
    seed = config.actor.seed

    # ---- demonstrations (rank 0 records, everyone waits and reads)
    demo_dir = Path(demos).expanduser() if demos is not None else run_dir / "demos"
    if ctx.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.yaml", to_yaml(config))
        if demos is None or record is not None:
            n = record if record is not None else default_record_count(config)
            t0 = time.perf_counter()
            paths = record_demos(config, demo_dir, n, progress=None if quiet else say)
            say(f"recorded {len(paths)} expert demonstrations into {demo_dir} in {time.perf_counter() - t0:.1f} s")
    dist.barrier()
    episodes = load_episodes(demo_dir)

    # ---- model and optimizer (the same init on every rank)
    seed_everything(seed)
    model_cfg = config.actor.model.model_copy(update={"model_path": resolve_model_path(config.actor.model.model_path)})
    policy = build_policy(model_cfg, ctx.device)
    dist.broadcast_module_(policy)
    # chunks as long as the policy executes (C of the loaded model, normally actor.model.num_action_chunks)
    dataset = ChunkDataset(episodes, int(getattr(policy, "num_action_chunks", config.actor.model.num_action_chunks)))
    check_dataset(dataset, policy, config, demo_dir)
    # eval mode: dropout off (the families disable it for RL too) and frozen backbones stay frozen
    policy.eval()
    params = [p for p in policy.parameters() if p.requires_grad]
    if not params:
        raise ConfigError("The policy has no trainable parameters.",
                          "Check actor.model.train_expert_only / is_lora / the family's freezing flags.")
    optim_cfg = config.actor.optim
    optimizer = torch.optim.AdamW(params, lr=optim_cfg.lr, betas=optim_cfg.betas, eps=optim_cfg.adam_eps,
                                  weight_decay=optim_cfg.weight_decay)
    scheduler = build_scheduler(optimizer, config, steps)

    world = ctx.world_size
    glob, micro = config.actor.global_batch_size, config.actor.micro_batch_size
    if glob % (micro * world):
        raise ConfigError(f"actor.global_batch_size ({glob}) must be divisible by micro_batch_size x processes "
                          f"({micro} x {world}).", "Adjust the batch sizes.")
    local = glob // world
    sampler = _Sampler(len(dataset), derived_seed(seed, 11))
    flow_gen = torch.Generator().manual_seed(derived_seed(seed, ctx.rank, 12))
    loss_fn = _loss_fn(policy, flow_gen)
    log_every = log_every or max(1, steps // 100)
    say(f"SFT: {config.actor.model.model_type} on {len(episodes)} episodes / {len(dataset)} samples from "
        f"{demo_dir}; {steps} steps of {glob} samples ({world} process(es)), run dir {run_dir}")

    losses: list[float] = []
    window: list[tuple[float, float]] = []
    metrics_path = run_dir / METRICS_FILE
    metrics_file = metrics_path.open("w") if ctx.is_main else None
    start = time.perf_counter()
    try:
        for step in range(1, steps + 1):
            ids = sampler.next(glob)[ctx.rank * local:(ctx.rank + 1) * local]
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), dtype=torch.float64)
            for k in range(0, local, micro):
                obs, actions = dataset.batch(ids[k:k + micro])
                loss = loss_fn(obs, actions.to(ctx.device))
                if not torch.isfinite(loss):
                    raise VlarlError(f"The SFT loss became {loss.item()} at step {step}.",
                                     "Lower actor.optim.lr or check the demonstrations for outliers.")
                (loss * (len(ids[k:k + micro]) / local)).backward()
                total += loss.detach().double().cpu() * (len(ids[k:k + micro]) / local)
            dist.gradient_all_reduce(policy)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, optim_cfg.clip_grad)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            step_loss = float(dist.all_reduce_mean_(total).item())
            losses.append(step_loss)
            window.append((step_loss, float(grad_norm)))
            if step % log_every == 0 or step == steps:
                row = {"step": step, "sft/loss": float(np.mean([w[0] for w in window])),
                       "sft/grad_norm": float(np.mean([w[1] for w in window])), "sft/lr": lr,
                       "time/elapsed": time.perf_counter() - start}
                window = []
                if metrics_file is not None:
                    metrics_file.write(json.dumps(row) + "\n")
                    metrics_file.flush()
                say(f"step {step}/{steps}  loss {row['sft/loss']:.4f}  grad_norm {row['sft/grad_norm']:.3f}  "
                    f"lr {lr:.2e}")
    finally:
        if metrics_file is not None:
            metrics_file.close()

    # ---- checkpoint (rank 0)
    folder = Path(output).expanduser() if output is not None else run_dir / "checkpoints" / f"global_step_{steps}"
    state = SftState(steps=steps, samples=len(dataset), episodes=len(episodes), demos=str(demo_dir.resolve()),
                     first_loss=losses[0], last_loss=losses[-1], model_type=config.actor.model.model_type,
                     version=__version__)
    if ctx.is_main:
        save_sft_checkpoint(policy, config, folder.resolve(), state)
        if output is None:
            from vlarl_cli.training.checkpoint import LATEST

            atomic_write_text(folder.parent / LATEST, folder.name + "\n")
        say(f"checkpoint: {folder}")
    dist.barrier()
    return SftResult(run_dir=run_dir, checkpoint=folder, demos=demo_dir, steps=steps, first_loss=losses[0],
                     last_loss=losses[-1], losses=losses)


def run_sft(*, config: str, demos: Path | None, overrides: list[str], steps: int | None, output: Path | None,
            record: int | None = None) -> SftResult:
    """``vlarl sft``: load and validate the config, then :func:`train_sft`."""
    from vlarl_cli.config.loading import load_config

    # validated as a 1-process run: the RL placement rules (env ranks, pipeline stages) do not apply to SFT,
    # whose only multi-process rule (global batch split over the processes) train_sft checks itself
    loaded = load_config(config, overrides)  # validate first: a broken config is reported as such
    if record is not None and record < 1:
        raise ConfigError(f"--record must be >= 1, got {record}.", "Pass --record N with N >= 1, or leave it out.")
    return train_sft(loaded, demos=demos, record=record, steps=steps, output=output)
