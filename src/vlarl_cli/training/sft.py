"""Supervised fine-tuning (behaviour cloning) of a policy on demonstrations.

    vlarl sft --config sft_toy_reach                          # record 100 toy expert demos, train, save
    vlarl sft --config sft_quickstart --record 4 --steps 200  # LIBERO expert demos (LeRobot v3) + tiny pi0
    vlarl sft --config sft_quickstart --demos path/to/lerobot_dataset      # LeRobot v2.1 / v3.0, streamed
    vlarl sft --config sft_quickstart --demos spatial --demos object "sft.weights=[1,3]"  # a weighted mixture
    vlarl sft --config sft_quickstart --demos path/to/libero_spatial       # LIBERO *_demo.hdf5 files
    vlarl sft --config sft_quickstart --resume auto                        # continue the run's last checkpoint
    vlarl sft --config sft_toy_reach --nproc-per-node 2                    # FSDP2 (or DDP-style: no_shard)

What it does (:func:`train_sft`):

1. demonstrations: ``--demos PATH`` (repeatable; else ``sft.demos``) in any format
   :func:`vlarl_cli.datasets.stream.open_source` reads: LeRobot v2.0/v2.1/v3.0 datasets are indexed from their
   parquet columns only and their camera frames decoded on demand (:mod:`vlarl_cli.datasets.stream`); LIBERO
   HDF5 and vlarl episode files are read into memory. Without demos, ``--record N`` expert episodes are
   recorded first into ``<run>/demos`` (the toy reach expert for ``env_type: toy_reach``, as episode files;
   LIBERO's scripted pick-and-place expert on ``env.train``'s suite / tasks / resolution otherwise, as a
   LeRobot v3.0 dataset, in ``sft.record_workers`` processes);
2. the policy from ``actor.model`` (:func:`vlarl_cli.policies.registry.build_policy`; ``model_path`` to start
   from a checkpoint), under ``actor.seed``; ``sft.trainable`` picks full / head / LoRA training; the
   normalisation statistics come from the data, every frame of every dataset once (``sft.norm_stats``,
   :func:`vlarl_cli.datasets.stats.apply_frame_stats`) for a model built from a preset, from the checkpoint
   otherwise; over several processes the policy is FSDP2-sharded (``actor.fsdp_config``; ``no_shard``:
   full copies with averaged gradients);
3. ``steps`` optimizer steps (``--steps``, else ``sft.steps``, else ``runner.max_steps``): each draws
   ``actor.global_batch_size`` samples (observation, action chunk ``[C, A]``) in the order of
   :class:`vlarl_cli.datasets.sampling.GlobalOrder` (epoch ``e`` a permutation seeded by ``(seed, e)``; with
   ``sft.weights`` each dataset its own epochs), a pure function of the step, so a resumed run continues the
   uninterrupted order on any number of processes; ``sft.num_workers`` DataLoader workers decode the
   micro-batches (``actor.micro_batch_size``) of this rank's share, ``sft.prefetch`` each ahead; the loss is
   the family's ``policy.supervised_loss(obs, actions [B, T, A] env-space) -> scalar mean`` (T: the family's ``supervised_chunk`` where it has one, GR00T's whole horizon; else the C steps it executes) (flow matching in
   the family's own normalised action space for pi0 / GR00T / toy flow, token cross-entropy for OpenVLA-OFT
   / toy token, NLL for toy Gaussian; flow losses also take ``generator=`` for their noise and times);
   AdamW (``actor.optim``; the value head, untouched by the loss, keeps its weights), gradient-norm clipping
   at ``clip_grad``, the LR schedule of ``rl-train`` (:func:`vlarl_cli.training.common.build_scheduler`), then
   the learner's ``hooks`` (after-step additions such as an EMA of the weights);
4. metrics through rl-train's sinks (``runner.logger.logger_backends``; ``<run>/sft_metrics.jsonl`` always):
   ``train/sft/{loss, grad_norm, lr, frames_per_s, epoch, skipped_frames}``, ``time/sft_step``,
   ``time/sft_data_wait``, every ``log_every`` steps; a progress bar with frames/s and ETA;
5. checkpoints with rl-train's machinery (:mod:`vlarl_cli.training.checkpoint`: weights, optimizer, RNG,
   ``trainer_state.json``, ``latest``) every ``sft.save_interval`` steps and at the end as
   ``<run>/checkpoints/global_step_<k>``; with ``-o OUT`` the final policy goes to ``OUT`` instead (a new
   folder: an existing one is refused, never replaced). Each holds the family's
   ``save_policy(format="vlarl")`` files (weights, ``vlarl_config.json``, norm stats, tokenizer) plus
   ``config.yaml`` and ``sft_state.json``, so ``vlarl eval --checkpoint`` and
   ``vlarl rl-train actor.model.model_path=<folder>`` load it. Toy policies: ``model.safetensors``.

A frame that cannot be decoded stops the run naming the dataset, episode, frame and camera, unless
``sft.skip_bad_frames`` (then it is left out of its micro-batch, printed and counted). A run folder that
already holds an SFT run (``sft_metrics.jsonl`` or checkpoints) is refused unless ``--resume`` continues it.
Randomness: model init from ``actor.seed``; the sample order from (seed, step), the flow noise and times of
step k from (seed, rank, k); so a run is repeatable and a resumed run (any number of processes) repeats the
uninterrupted one. Several processes (``--nproc-per-node`` or ``torchrun``) split every global batch evenly;
rank 0 records and saves.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlarl_cli.config.loading import LoadedConfig
from vlarl_cli.config.schema import VlarlConfig
from vlarl_cli.distributed import dist
from vlarl_cli.envs import registry
from vlarl_cli.errors import ConfigError, VlarlError
from vlarl_cli.keys import policy_obs_mode
from vlarl_cli.model_types import model_types_of
from vlarl_cli.training.common import derived_seed

__all__ = ["SftResult", "SftState", "default_record_count", "export_policy", "record_demos", "run_sft",
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
    demos_format: str = ""
    norm_stats: str = ""  # where the normalisation statistics came from
    skipped_frames: int = 0  # samples left out because a frame could not be read (sft.skip_bad_frames), this rank


@dataclass
class SftResult:
    run_dir: Path
    checkpoint: Path
    demos: Path
    steps: int
    first_loss: float
    last_loss: float
    losses: list[float]  # the loss of every optimizer step run by this call (after a resume: from there on)


def default_record_count(config: VlarlConfig) -> int:
    """Demonstrations recorded when neither ``--demos`` nor ``--record`` is given: the simulator's figure
    (``envs/<sim>/simulator.py``: 100 toy episodes, which take milliseconds; 2 LIBERO episodes, about a minute
    each with both cameras rendered)."""
    return registry.get(config.env.train.env_type).default_demos


def record_demos(config: VlarlConfig, folder: Path, n: int, *, progress: Any = None) -> Path:
    """Record ``n`` successful expert episodes for ``config.env.train`` into ``folder`` with its simulator's
    expert (toy: episode files; LIBERO: a new LeRobot v3.0 dataset, ``sft.record_workers`` simulator processes)."""
    simulator = registry.get(config.env.train.env_type)
    if simulator.record_demos is None:
        raise ConfigError(f"env_type {simulator.name} has no scripted expert to record demonstrations with.",
                          "Give recorded demonstrations with --demos PATH.")
    return Path(simulator.call("record_demos", config, folder, n, progress=progress))


def check_dataset(dataset: Any, policy: torch.nn.Module, config: VlarlConfig, demos: Path | str) -> None:
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
    elif not dataset.cameras and policy_obs_mode(policy) == "rgb":
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


# ------------------------------------------------------------------------------------------------ set-up


def trainable_model(model: Any, trainable: str | None) -> Any:
    """``actor.model`` with ``sft.trainable`` applied (None: unchanged). pi0 family only for head / lora."""
    if trainable is None:
        return model
    if trainable != "full" and model.model_type not in model_types_of("pi0"):
        raise ConfigError(f"sft.trainable={trainable} is implemented for the pi0 family, not "
                          f"{model.model_type}.", "Use sft.trainable=full (or null) for this family.")
    flags = {"full": (False, False), "head": (True, False), "lora": (False, True)}[trainable]
    update: dict[str, Any] = {"train_expert_only": flags[0], "is_lora": flags[1]}
    if model.openpi is not None and model.openpi.train_expert_only is not None:
        update["openpi"] = model.openpi.model_copy(update={"train_expert_only": flags[0]})
    return model.model_copy(update=update)


def use_data_stats(config: VlarlConfig) -> bool:
    """``sft.norm_stats``: whether the statistics come from the demonstrations."""
    mode = config.sft.norm_stats
    from_checkpoint = config.actor.model.model_path is not None
    if mode == "checkpoint" and not from_checkpoint:
        raise ConfigError("sft.norm_stats=checkpoint but actor.model.model_path is not set: a model built from "
                          "a preset has no statistics.", "Use sft.norm_stats=data (or auto).")
    return mode == "data" or (mode == "auto" and not from_checkpoint)


def check_run_dir(run_dir: Path, resuming: bool) -> None:
    """A new run must not overwrite an earlier run's metrics or checkpoints (nor a foreign config.yaml)."""
    if resuming:
        return
    taken = [p for p in (run_dir / METRICS_FILE, run_dir / "checkpoints") if p.exists()]
    if taken:
        raise ConfigError(f"The run folder {run_dir} already holds an SFT run ({', '.join(p.name for p in taken)}).",
                          "Continue it with --resume auto (when it saved a checkpoint), or start a new run in "
                          "another folder (runner.logger.log_path=...; --demos <old run>/demos reuses its "
                          "recorded demonstrations); vlarl never replaces an earlier run.")
    cfg = run_dir / "config.yaml"
    if cfg.is_file():
        import yaml

        try:
            data = yaml.safe_load(cfg.read_text())
        except (OSError, yaml.YAMLError):
            data = None
        if not (isinstance(data, dict) and {"actor", "runner"} <= set(data)):
            raise ConfigError(f"{cfg} exists and is not a vlarl run config; vlarl would replace it.",
                              "Choose another runner.logger.log_path.")


def check_output(output: Path | None) -> None:
    """-o must be a new folder this process can create (checked before demos are recorded or a step is trained)."""
    if output is not None and (output.exists() or output.is_symlink()):
        raise ConfigError(f"-o {output} already exists; vlarl sft writes its checkpoint into a new folder and "
                          "never replaces an existing one.",
                          "Pass a path that does not exist yet, or move the old folder away yourself.")
    if output is not None:
        from vlarl_cli.checkpoints.atomic import check_writable_folder

        check_writable_folder(output, "The checkpoint folder (-o)")


def _saved_config(config: VlarlConfig, folder: Path, family_files: bool) -> VlarlConfig:
    """The config saved with a checkpoint: ``model_path`` points at the folder itself (toy: rebuilt from the
    config, model_path None), so ``vlarl eval --checkpoint`` / rl-train load exactly these weights."""
    model = config.actor.model.model_copy(update={"model_path": str(folder) if family_files else None})
    return config.model_copy(update={"actor": config.actor.model_copy(update={"model": model})})


def _checkpoint_module(config: VlarlConfig) -> Any:
    import importlib

    from vlarl_cli.policies.registry import family_module

    try:
        return importlib.import_module(f"{family_module(config.actor.model.model_type).__name__}.checkpoint")
    except ImportError:
        return None  # the toy policies: a bare state dict


def _write_policy(policy: torch.nn.Module, config: VlarlConfig, target: Path, final: Path, state: SftState,
                  ema: Any = None) -> None:
    """The family's ``save_policy(format="vlarl")`` files (toy: ``model.safetensors``), ``config.yaml`` and
    ``sft_state.json`` into the new folder ``target``, which will be renamed to ``final``."""
    from vlarl_cli.checkpoints.atomic import atomic_save_safetensors
    from vlarl_cli.config.loading import to_yaml

    module = _checkpoint_module(config)
    target.mkdir(parents=True, exist_ok=True)
    if module is not None:
        staging = target / "_policy"
        module.save_policy(policy, staging, format="vlarl")
        for item in staging.iterdir():
            item.rename(target / item.name)
        staging.rmdir()
    else:
        tensors = {k: v.detach().cpu().contiguous() for k, v in policy.state_dict().items()}
        atomic_save_safetensors(tensors, target / "model.safetensors")
    (target / "config.yaml").write_text(to_yaml(_saved_config(config, final, module is not None)))
    (target / STATE_FILE).write_text(json.dumps(asdict(state), indent=2))
    if ema is not None:  # training/ema.py: the EMA as a complete policy folder beside the raw weights
        with ema.applied(policy):
            _write_policy(policy, config, target / "ema", final / "ema", state)


def export_policy(policy: torch.nn.Module, config: VlarlConfig, folder: Path, state: SftState,
                  ema: Any = None) -> Path:
    """Write the policy atomically into the NEW folder ``folder`` (``-o``; an existing path is refused)."""
    from vlarl_cli.checkpoints.atomic import atomic_directory
    from vlarl_cli.checkpoints.integrity import write_checksums

    check_output(folder)
    with atomic_directory(folder, overwrite=False) as tmp:
        _write_policy(policy, config, tmp, folder, state, ema)
        write_checksums(tmp)
    return folder


def _save_checkpoint(run_dir: Path, learner: Any, state: SftState) -> Path | None:
    """A resumable rl-train-style checkpoint ``<run>/checkpoints/global_step_<steps>`` (+ ``latest``), written by
    rank 0 (collective over the ranks when sharded: the full state is gathered first)."""
    from vlarl_cli.config.loading import to_yaml
    from vlarl_cli.distributed import fsdp
    from vlarl_cli.training import checkpoint as ckpt

    config = learner.config
    model_state = fsdp.full_model_state(learner.policy, owner=0)
    optimizer_state = fsdp.full_optimizer_state(learner.policy, learner.optimizer, owner=0)
    target = learner.export_target()
    ema = learner.export_ema()
    if not learner.ctx.is_main:
        return None
    final = ckpt.checkpoint_dir(run_dir, state.steps)
    return ckpt.save_checkpoint(
        run_dir, model_state=model_state, optimizer_state=optimizer_state, scheduler=learner.scheduler,
        generators=learner.generators,
        trainer_state=ckpt.TrainerState(iteration=state.steps, optimizer_steps=state.steps, version=state.version,
                                        run_ids=dict(learner.run_ids)),
        config_yaml=to_yaml(_saved_config(config, final, _checkpoint_module(config) is not None)),
        export=lambda folder: _write_policy(target, config, folder, final, state, ema))


def _restore(path: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
             generators: dict[str, torch.Generator]) -> tuple[int, dict[str, str]]:
    """Load a checkpoint written by :func:`_save_checkpoint`: (its step, its tracking run ids)."""
    from vlarl_cli.distributed import fsdp
    from vlarl_cli.errors import CheckpointError
    from vlarl_cli.training import checkpoint as ckpt

    loaded = ckpt.load_checkpoint(path)
    try:
        fsdp.load_full_model_state(policy, loaded.model_state)
    except RuntimeError as err:
        raise CheckpointError(f"Checkpoint {path} does not match the model: {str(err).splitlines()[0]}",
                              "Resume with the config the run was started with.") from None
    fsdp.load_full_optimizer_state(policy, optimizer, loaded.optimizer_state)
    if loaded.scheduler_state is not None:
        scheduler.load_state_dict(loaded.scheduler_state)
    ckpt.restore_rng(loaded, generators)
    return loaded.trainer_state.iteration, dict(loaded.trainer_state.run_ids)


def _demonstrations(config: VlarlConfig, demos: list[Path], record: int | None, run_dir: Path, *,
                    resuming: bool, is_main: bool, say: Any) -> list[Path]:
    """The datasets to train on (``--demos``, else ``sft.demos``), recording expert demonstrations first (rank 0)
    when asked or when none are given."""
    paths = [Path(p).expanduser() for p in (demos or config.sft.demos)]
    if paths and record is None:
        return paths
    if len(paths) > 1:
        raise ConfigError(f"--record records into one folder, but {len(paths)} datasets were given.",
                          "Record into one --demos folder first, then train on several.")
    folder = paths[0] if paths else run_dir / "demos"
    if is_main and not (resuming and folder.exists()):
        from vlarl_cli.checkpoints.atomic import check_writable_folder

        check_writable_folder(folder, "The demonstrations folder (--demos)")  # a file in the way: before recording
        n = record if record is not None else default_record_count(config)
        t0 = time.perf_counter()
        record_demos(config, folder, n, progress=say)
        say(f"recorded {n} expert demonstrations into {folder} in {time.perf_counter() - t0:.1f} s")
    return [folder]


# ------------------------------------------------------------------------------------------------ training


def _total_steps(config: VlarlConfig, steps: int | None) -> int:
    """``--steps``, else ``sft.steps``, else ``runner.max_steps``."""
    if steps is None:
        steps = config.sft.steps or (config.runner.max_steps if config.runner.max_steps > 0 else None)
    if steps is None or steps < 1:
        raise ConfigError("No number of SFT steps: --steps is not given and neither sft.steps nor "
                          "runner.max_steps is set.", "Pass --steps K (or set sft.steps in the config).")
    return steps


@dataclass
class _Demos:
    """The run's datasets: their folders, formats and indexes (:class:`vlarl_cli.datasets.stream.Source`)."""

    folders: list[Path]
    sources: list[Any]

    @property
    def name(self) -> str:
        return ", ".join(str(f) for f in self.folders)

    @property
    def format(self) -> str:
        return ", ".join(sorted({s.format for s in self.sources}))

    @property
    def in_memory(self) -> bool:
        return all(kind == "memory" for s in self.sources for kind in s.kind.values())


def _load_demos(config: VlarlConfig, demos: list[Path], record: int | None, run_dir: Path, *, resuming: bool,
                is_main: bool, say: Any) -> _Demos:
    """Rank 0 writes the run's config and records the demonstrations when asked; everyone waits and indexes."""
    from vlarl_cli.config.loading import to_yaml
    from vlarl_cli.datasets.stream import open_source
    from vlarl_cli.training.run_folder import write_own_text

    sft = config.sft
    if is_main:
        write_own_text(run_dir, "config.yaml", to_yaml(config))
    folders = _demonstrations(config, demos, record, run_dir, resuming=resuming, is_main=is_main, say=say)
    if sft.weights is not None and len(sft.weights) != len(folders):
        raise ConfigError(f"sft.weights has {len(sft.weights)} entries for {len(folders)} dataset(s) ({folders}).",
                          "Give one weight per --demos dataset, in the same order (or sft.weights=null).")
    dist.barrier()
    t0 = time.perf_counter()
    sources = [open_source(f, state_key=sft.state_key, action_key=sft.action_key, main_camera_key=sft.main_camera_key,
                           wrist_camera_key=sft.wrist_camera_key) for f in folders]
    say(f"indexed {sum(s.num_episodes for s in sources)} episodes / {sum(len(s) for s in sources)} frames of "
        f"{len(sources)} dataset(s) in {time.perf_counter() - t0:.1f} s")
    return _Demos(folders, sources)


class _Learner:
    """This rank's policy (the same init on every rank; FSDP2-sharded over several ranks unless
    ``actor.fsdp_config.sharding_strategy`` is ``no_shard``), its data and optimizer, and one SFT step.

    ``hooks``: functions ``hook(step)`` called after every optimizer step, in order (e.g. an EMA of the
    weights). The loss of a micro-batch is :func:`_loss_fn`'s (the family's ``supervised_loss``)."""

    def __init__(self, config: VlarlConfig, demos: _Demos, ctx: dist.DistContext, steps: int, say: Any) -> None:
        from vlarl_cli.datasets.frames import video_backend
        from vlarl_cli.datasets.stream import FrameDataset
        from vlarl_cli.policies.registry import build_policy
        from vlarl_cli.training.common import build_scheduler, resolve_model_path, seed_everything

        seed_everything(config.actor.seed)
        model_cfg = trainable_model(config.actor.model, config.sft.trainable)
        self.config = config = config.model_copy(update={"actor": config.actor.model_copy(update={"model": model_cfg})})
        self.model_cfg = model_cfg.model_copy(update={"model_path": resolve_model_path(model_cfg.model_path)})
        self.policy = policy = build_policy(self.model_cfg, ctx.device)
        dist.broadcast_module_(policy)
        self.stats_note = self._statistics(demos, say)
        # chunks as long as the family trains on (GR00T: its whole action horizon, as Isaac-GR00T), else as long as
        # the policy executes (C of the loaded model, normally actor.model.num_action_chunks)
        chunk = int(getattr(policy, "supervised_chunk", getattr(policy, "num_action_chunks",
                                                                config.actor.model.num_action_chunks)))
        self.dataset = FrameDataset(demos.sources, chunk, video_backend=video_backend(config.sft.video_backend))
        check_dataset(self.dataset, policy, config, demos.name)
        # eval mode: dropout off (the families disable it for RL too) and frozen backbones stay frozen
        policy.eval()
        self.ctx = ctx
        self.sharded = ctx.world_size > 1 and config.actor.fsdp_config.sharding_strategy != "no_shard"
        if self.sharded:
            self._shard()
        self.params = [p for p in policy.parameters() if p.requires_grad]
        if not self.params:
            raise ConfigError("The policy has no trainable parameters.",
                              "Check sft.trainable / actor.model.train_expert_only / is_lora.")
        optim = config.actor.optim
        self.optimizer = torch.optim.AdamW(self.params, lr=optim.lr, betas=optim.betas, eps=optim.adam_eps,
                                           weight_decay=optim.weight_decay)
        self.scheduler = build_scheduler(self.optimizer, config, steps)
        self.glob, self.micro = config.actor.global_batch_size, config.actor.micro_batch_size
        self._precision_and_ema(model_cfg, say)
        if self.glob % (self.micro * ctx.world_size):
            raise ConfigError(f"actor.global_batch_size ({self.glob}) must be divisible by micro_batch_size x "
                              f"processes ({self.micro} x {ctx.world_size}).", "Adjust the batch sizes.")
        # the flow noise / times of step k come from (seed, rank, k): nothing to carry across a resume, on any rank
        self.flow_gen = torch.Generator()
        self.generators: dict[str, torch.Generator] = {}
        self.loss_fn = _loss_fn(policy, self.flow_gen)
        self.hooks: list[Any] = []
        self.skipped = 0
        self.run_ids: dict[str, str] = {}

    def _shard(self) -> None:
        from vlarl_cli.distributed import fsdp

        fsdp_cfg = self.config.actor.fsdp_config
        fsdp.shard_model(self.policy, device=self.ctx.device, class_names=list(fsdp_cfg.wrap_policy.transformer_layer_cls_to_wrap),
                         reshard_after_forward=fsdp_cfg.reshard_after_forward,
                         param_dtype=fsdp_cfg.mixed_precision.param_dtype,
                         reduce_dtype=fsdp_cfg.mixed_precision.reduce_dtype, cpu_offload=fsdp_cfg.cpu_offload)
        from torch.distributed.fsdp import register_fsdp_forward_method

        # the loss is a method besides forward: calling it must gather the shards as forward does
        register_fsdp_forward_method(self.policy, "supervised_loss")

    def _statistics(self, demos: _Demos, say: Any) -> str:
        """The normalisation statistics: the demonstrations' (a preset model), else the checkpoint's."""
        from vlarl_cli.datasets.stats import apply_frame_stats

        if not use_data_stats(self.config):
            return "the checkpoint's"
        unnorm = getattr(getattr(self.policy, "cfg", None), "unnorm_key", None) or "vlarl_demos"
        sources = demos.sources
        states = sources[0].states if len(sources) == 1 else np.concatenate([s.states for s in sources])
        actions = sources[0].actions if len(sources) == 1 else np.concatenate([s.actions for s in sources])
        note = apply_frame_stats(self.policy, states, actions, num_episodes=sum(s.num_episodes for s in sources),
                                 dataset_name=unnorm) or "none (toy policy)"
        say(f"normalisation statistics from the demonstrations: {note}")
        return note

    def restore(self, path: Path) -> int:
        """The step the checkpoint at ``path`` reached, with weights, optimizer and schedule restored."""
        step, self.run_ids = _restore(path, self.policy, self.optimizer, self.scheduler, self.generators)
        if self.ema is not None:
            from vlarl_cli.training.ema import restore_from

            restore_from(self.ema, path)
        return step

    def _bad_frames(self, step: int, batches: list[Any]) -> int:
        """Stop on a frame that cannot be read, or (``sft.skip_bad_frames``) print and count it."""
        bad = [b for mb in batches for b in mb.bad]
        if bad and not self.config.sft.skip_bad_frames:
            raise VlarlError(f"Step {step} cannot read its sample {bad[0].problem}",
                             "Repair or re-download that file, or set sft.skip_bad_frames=true to skip unreadable "
                             "frames (they are counted in train/sft/skipped_frames).")
        for b in bad:
            print(f"[rank {self.ctx.rank}] skipped {b.where}: {b.problem}", flush=True)
        if not sum(len(mb) for mb in batches):
            raise VlarlError(f"Every sample of step {step} on rank {self.ctx.rank} was unreadable ({bad[0].problem}).",
                             "Repair the dataset's files; skipping cannot train on nothing.")
        self.skipped += len(bad)
        return len(bad)

    def step(self, step: int, batches: list[Any]) -> tuple[float, float, float]:
        """One optimizer step on this rank's share of the global batch (its micro-batches ``batches``):
        (loss over all ranks, gradient norm, learning rate used)."""
        self._bad_frames(step, batches)
        n = sum(len(mb) for mb in batches)
        self.flow_gen.manual_seed(derived_seed(self.config.actor.seed, self.ctx.rank, 12, step))
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), dtype=torch.float64)
        for mb in batches:
            if not len(mb):
                continue
            with self.compute():
                loss = self.loss_fn(mb.obs, mb.actions.to(self.ctx.device))
            if not torch.isfinite(loss):
                raise VlarlError(f"The SFT loss became {loss.item()} at step {step}.",
                                 "Lower actor.optim.lr or check the demonstrations for outliers.")
            (loss * (len(mb) / n)).backward()
            total += loss.detach().double().cpu() * (len(mb) / n)
        if not self.sharded:
            dist.gradient_all_reduce(self.policy)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.config.actor.optim.clip_grad)
        full = getattr(grad_norm, "full_tensor", None)  # FSDP2: a DTensor norm
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update(self.policy)
        self.scheduler.step()
        for hook in self.hooks:
            hook(step)
        return float(dist.all_reduce_mean_(total).item()), float(full() if callable(full) else grad_norm), lr

    def _precision_and_ema(self, model_cfg: Any, say: Any) -> None:
        """The compute policy (fp32 master weights, bf16 compute, as openpi's JAX trainer; FSDP2's own
        mixed-precision policy when sharded) and openpi's weight EMA (training/ema.py)."""
        from vlarl_cli.distributed import mixed_precision
        from vlarl_cli.training import ema

        self.ema = ema.for_sft(self.policy, "pi05" if model_cfg.is_pi05 else model_cfg.model_type, None,
                               "lora" if model_cfg.is_lora else self.config.sft.trainable, say)
        param_dtype = self.config.actor.fsdp_config.mixed_precision.param_dtype
        self.compute = (contextlib.nullcontext if self.sharded
                        else mixed_precision.from_settings(self.policy, model_cfg.precision, param_dtype, say))

    def export_ema(self) -> Any:
        """The EMA with full tensors for :func:`_write_policy` (None without one). Collective over the ranks
        when sharded: every rank calls it."""
        return None if self.ema is None else self.ema.full()

    def export_target(self) -> torch.nn.Module:
        """The policy to write with the family's ``save_policy``: itself, or (sharded) a CPU copy rebuilt from
        the gathered full state. Collective over the ranks when sharded."""
        from vlarl_cli.distributed import fsdp
        from vlarl_cli.policies.registry import build_policy

        if not self.sharded:
            return self.policy
        state = fsdp.full_model_state(self.policy, owner=0)
        target = build_policy(self.model_cfg, "cpu")
        if self.ctx.is_main:
            target.load_state_dict(state)
        return target

    def state(self, step: int, demos: _Demos, losses: list[float]) -> SftState:
        from vlarl_cli import __version__

        return SftState(steps=step, samples=len(self.dataset), episodes=self.dataset.num_episodes, demos=demos.name,
                        first_loss=losses[0] if losses else float("nan"),
                        last_loss=losses[-1] if losses else float("nan"),
                        model_type=self.config.actor.model.model_type, version=__version__,
                        demos_format=demos.format, norm_stats=self.stats_note, skipped_frames=self.skipped)


class _MetricsLog:
    """Metrics through rl-train's sinks (``runner.logger.logger_backends``; ``sft_metrics.jsonl`` always, rank 0),
    means over every ``every`` steps, names under ``train/sft/``; a progress bar with frames/s and ETA."""

    def __init__(self, learner: _Learner, run_dir: Path, *, resumed_at: int | None, every: int, steps: int,
                 quiet: bool) -> None:
        from vlarl_cli.logging.progress import Progress
        from vlarl_cli.logging.sinks import MetricLogger

        config, is_main = learner.config, learner.ctx.is_main
        logger = config.runner.logger
        self.sinks = MetricLogger.create(run_dir, list(logger.logger_backends), project=logger.project_name,
                                         name=logger.experiment_name, config=config.model_dump(mode="json"),
                                         run_ids=learner.run_ids, main_process=is_main, jsonl_name=METRICS_FILE,
                                         resume_step=resumed_at + 1 if resumed_at is not None else None)
        learner.run_ids = self.sinks.run_ids() or learner.run_ids
        self.progress = Progress(total=steps, start=resumed_at or 0, enabled=is_main and not quiet, label="sft",
                                 unit="step")
        self.every, self.steps, self.learner = every, steps, learner
        self.window: list[tuple[float, float, float, float]] = []

    def add(self, step: int, loss: float, grad_norm: float, lr: float, seconds: float, wait: float) -> None:
        self.window.append((loss, grad_norm, seconds, wait))
        if step % self.every and step != self.steps:
            return
        w = np.asarray(self.window)
        glob, size = self.learner.glob, len(self.learner.dataset)
        skipped = torch.tensor(float(self.learner.skipped), dtype=torch.float64)
        row = {"train/sft/loss": float(w[:, 0].mean()), "train/sft/grad_norm": float(w[:, 1].mean()),
               "train/sft/lr": lr, "train/sft/frames_per_s": glob * len(w) / max(float(w[:, 2].sum()), 1e-9),
               "train/sft/epoch": step * glob / size,
               "train/sft/skipped_frames": float(dist.CrossRank().sum(skipped).item()),
               "time/sft_step": float(w[:, 2].mean()), "time/sft_data_wait": float(w[:, 3].mean())}
        self.window = []
        self.sinks.log(row, step)
        self.progress.update(step, row)

    def close(self) -> None:
        self.sinks.close()
        self.progress.close()


def train_sft(loaded: LoadedConfig, *, demos: Path | list[Path] | None = None, record: int | None = None,
              steps: int | None = None, output: Path | None = None, log_every: int | None = None,
              quiet: bool = False, resume: str | None = None) -> SftResult:
    """Behaviour cloning as described in the module docstring; returns where everything went."""
    from vlarl_cli.training import checkpoint as ckpt

    config = loaded.config
    total = _total_steps(config, steps)
    output = Path(output).expanduser().resolve() if output is not None else None
    run_dir = Path(config.runner.logger.log_path).expanduser()
    resume_path = ckpt.resolve_checkpoint(run_dir, resume) if resume else None
    check_output(output)
    check_run_dir(run_dir, resume_path is not None)
    ctx = dist.init_distributed()
    say = (lambda *a: None) if quiet else dist.print0
    given = [demos] if isinstance(demos, str | Path) else list(demos or [])
    data = _load_demos(config, given, record, run_dir, resuming=resume_path is not None, is_main=ctx.is_main, say=say)
    learner = _Learner(config, data, ctx, total, say)
    done = 0
    if resume_path is not None:
        done = learner.restore(resume_path)
        say(f"resumed from {resume_path} at step {done}")
    losses, last_saved = _train_steps(learner, data, run_dir, total, done, output=output, log_every=log_every,
                                      resumed=resume_path is not None, say=say, quiet=quiet)
    # ---- the final policy: -o OUT (a new folder), else the run's last checkpoint
    folder = ckpt.checkpoint_dir(run_dir, total)
    if output is not None:
        target = learner.export_target()
        ema = learner.export_ema()
        if ctx.is_main:
            export_policy(target, learner.config, output, learner.state(total, data, losses), ema)
            say(f"checkpoint: {output}")
        folder = output
    elif last_saved != total and ctx.is_main:  # resumed at the end: the last checkpoint is the result
        say(f"nothing left to train: step {total} was already reached")
    dist.barrier()
    return SftResult(run_dir=run_dir, checkpoint=folder, demos=data.folders[0], steps=total,
                     first_loss=losses[0] if losses else float("nan"),
                     last_loss=losses[-1] if losses else float("nan"), losses=losses)


def _loader(learner: _Learner, data: _Demos, done: int, total: int) -> tuple[Any, int]:
    """The DataLoader of steps ``done + 1 .. total`` on this rank, and the micro-batches of one step."""
    from vlarl_cli.datasets.loader import make_loader
    from vlarl_cli.datasets.sampling import GlobalOrder, MicroBatches

    config, ctx = learner.config, learner.ctx
    order = GlobalOrder(learner.dataset.sizes, learner.glob, derived_seed(config.actor.seed, 11),
                        weights=config.sft.weights, first_step=done + 1)
    sampler = MicroBatches(order, rank=ctx.rank, world=ctx.world_size, micro=learner.micro, first_step=done + 1,
                           last_step=total)
    workers = config.sft.num_workers
    if workers is None:
        workers = 0 if data.in_memory else min(4, os.cpu_count() or 1)
    return make_loader(learner.dataset, sampler, workers=workers, prefetch=config.sft.prefetch), sampler.per_step


def _train_steps(learner: _Learner, data: _Demos, run_dir: Path, total: int, done: int, *, output: Path | None,
                 log_every: int | None, resumed: bool, say: Any, quiet: bool) -> tuple[list[float], int]:
    """Steps ``done + 1 .. total`` with their metrics and checkpoints: (the losses, the last saved step)."""
    config, ctx = learner.config, learner.ctx
    loader, per_step = _loader(learner, data, done, total)
    say(f"SFT: {config.actor.model.model_type} on {data.format} data: {learner.dataset.num_episodes} episodes / "
        f"{len(learner.dataset)} samples from {data.name}; {total} steps of {learner.glob} samples "
        f"({ctx.world_size} process(es)), run dir {run_dir}")
    losses: list[float] = []
    log = _MetricsLog(learner, run_dir, resumed_at=done if resumed else None, every=log_every or max(1, total // 100),
                      steps=total, quiet=quiet)
    last_saved = done if resumed else -1
    batches = iter(loader)
    try:
        for step in range(done + 1, total + 1):
            t0 = time.perf_counter()
            micro = [next(batches) for _ in range(per_step)]
            t1 = time.perf_counter()
            loss, grad_norm, lr = learner.step(step, micro)
            losses.append(loss)
            log.add(step, loss, grad_norm, lr, time.perf_counter() - t0, t1 - t0)
            interval = config.sft.save_interval > 0 and step % config.sft.save_interval == 0 and step < total
            if interval or (step == total and output is None):
                path = _save_checkpoint(run_dir, learner, learner.state(step, data, losses))
                if path is not None:
                    say(f"checkpoint: {path}")
                last_saved = step
                dist.barrier()
    finally:
        del batches  # stops the DataLoader workers
        log.close()
    return losses, last_saved


def _check_resume(run_dir: Path, resume: str, config: VlarlConfig) -> None:
    """Before any work: the checkpoint is an SFT one, and the overrides either apply (recorded) or are refused."""
    from vlarl_cli.training import run_folder
    from vlarl_cli.training.checkpoint import locate_checkpoint

    path = locate_checkpoint(run_dir, resume)
    if not (path / STATE_FILE).is_file():
        raise ConfigError(f"--resume {resume}: {path} is not an SFT checkpoint (no {STATE_FILE}; an rl-train "
                          "checkpoint holds RL state that `vlarl sft` does not continue).",
                          "Resume a checkpoint of an SFT run, or start a new SFT run in a new folder (a model "
                          "family's rl-train checkpoint can be its actor.model.model_path).")
    run_folder.check_resume_config(run_dir, path, config)


def run_sft(*, config: str, demos: Path | list[Path] | None, overrides: list[str], steps: int | None,
            output: Path | None, record: int | None = None, resume: str | None = None) -> SftResult:
    """``vlarl sft``: load and validate the config, then :func:`train_sft`."""
    from vlarl_cli.config.loading import load_config

    # validated as a 1-process run: the RL placement rules (env ranks, pipeline stages) do not apply to SFT,
    # whose only multi-process rule (global batch split over the processes) train_sft checks itself
    from vlarl_cli.training import run_folder

    loaded = load_config(config, overrides)  # validate first: a broken config is reported as such
    if record is not None and record < 1:
        raise ConfigError(f"--record must be >= 1, got {record}.", "Pass --record N with N >= 1, or leave it out.")
    run_folder.check_resume_argument(resume)
    # one writer per run folder (train_sft refuses a new run over an old one with its own message)
    from vlarl_cli.checkpoints.atomic import check_writable_folder

    run_dir, main = Path(loaded.config.runner.logger.log_path).expanduser(), dist.env_world()[0] == 0
    check_writable_folder(run_dir, "The run folder (runner.logger.log_path)")  # before demos are recorded
    with run_folder.claim(run_dir, command="sft", main=main):
        if resume and main and not run_folder.held_by_launcher(run_dir):  # overrides: applied and recorded, or refused
            _check_resume(run_dir, resume, loaded.config)
        return train_sft(loaded, demos=demos, record=record, steps=steps, output=output, resume=resume)
