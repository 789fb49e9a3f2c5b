"""Supervised fine-tuning (behaviour cloning) of a policy on demonstrations.

    vlarl sft --config sft_toy_reach                          # record 100 toy expert demos, train, save
    vlarl sft --config sft_quickstart --record 4 --steps 200  # LIBERO expert demos (LeRobot v3) + tiny pi0
    vlarl sft --config sft_quickstart --demos path/to/lerobot_dataset      # LeRobot v2.1 / v3.0
    vlarl sft --config sft_quickstart --demos path/to/libero_spatial       # LIBERO *_demo.hdf5 files
    vlarl sft --config sft_quickstart --resume auto                        # continue the run's last checkpoint
    torchrun --nproc-per-node 2 -m vlarl_cli.cli.main sft --config sft_toy_reach   # data parallel

What it does (:func:`train_sft`):

1. demonstrations: ``--demos PATH`` in any format :func:`vlarl_cli.datasets.load_demonstrations` reads
   (LeRobot v2.0/v2.1/v3.0, LIBERO HDF5, vlarl episode files), or, without it, ``--record N`` expert
   episodes recorded first into ``<run>/demos`` (the toy reach expert for ``env_type: toy_reach``, as episode
   files; LIBERO's scripted pick-and-place expert on ``env.train``'s suite / tasks / resolution otherwise,
   as a LeRobot v3.0 dataset, in ``sft.record_workers`` processes);
2. the policy from ``actor.model`` (:func:`vlarl_cli.policies.registry.build_policy`; ``model_path`` to start
   from a checkpoint), under ``actor.seed``; ``sft.trainable`` picks full / head / LoRA training; the
   normalisation statistics come from the data (``sft.norm_stats``, :func:`vlarl_cli.datasets.stats.apply_data_stats`)
   for a model built from a preset, from the checkpoint otherwise;
3. ``steps`` optimizer steps (``--steps``, else ``sft.steps``, else ``runner.max_steps``): each draws
   ``actor.global_batch_size`` samples (observation, action chunk ``[C, A]``) from seeded permutations of the
   dataset (epoch ``e`` shuffled by ``(seed, e)``, so the order after a resume is the uninterrupted one), in
   micro-batches of ``actor.micro_batch_size``; the loss is the family's
   ``policy.supervised_loss(obs, actions [B, C, A] env-space) -> scalar mean`` (flow matching in the family's
   own normalised action space for pi0 / GR00T / toy flow, token cross-entropy for OpenVLA-OFT / toy token,
   NLL for toy Gaussian; flow losses also take ``generator=`` for their noise and times); AdamW (``actor.optim``;
   the value head, untouched by the loss, keeps its weights), gradient-norm clipping at ``clip_grad``, the LR
   schedule of ``rl-train`` (:func:`vlarl_cli.training.common.build_scheduler` with horizon ``steps``);
4. ``sft/loss``, ``sft/grad_norm``, ``sft/lr`` every ``log_every`` steps to ``<run>/sft_metrics.jsonl``;
5. checkpoints with rl-train's machinery (:mod:`vlarl_cli.training.checkpoint`: weights, optimizer, RNG,
   ``trainer_state.json``, ``latest``) every ``sft.save_interval`` steps and at the end as
   ``<run>/checkpoints/global_step_<k>``; with ``-o OUT`` the final policy goes to ``OUT`` instead (a new
   folder: an existing one is refused, never replaced). Each holds the family's
   ``save_policy(format="vlarl")`` files (weights, ``vlarl_config.json``, norm stats, tokenizer) plus
   ``config.yaml`` and ``sft_state.json``, so ``vlarl eval --checkpoint`` and
   ``vlarl rl-train actor.model.model_path=<folder>`` load it. Toy policies: ``model.safetensors``.

A run folder that already holds an SFT run (``sft_metrics.jsonl`` or checkpoints) is refused unless
``--resume`` continues it. Randomness: model init from ``actor.seed``; the sample order from (seed, epoch),
the flow noise and times of step k from (seed, rank, k); so a run is repeatable and a resumed run (any
number of processes) repeats the uninterrupted one. Several processes (``torchrun``) split every global
batch evenly and average gradients (``distributed.dist.gradient_all_reduce``); rank 0 records and saves.
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
from vlarl_cli.keys import policy_obs_mode
from vlarl_cli.model_types import model_types_of
from vlarl_cli.training.common import derived_seed
from vlarl_cli.training.demos import ChunkDataset

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
    """Demonstrations recorded when neither ``--demos`` nor ``--record`` is given: 100 toy episodes (they
    take milliseconds), 2 LIBERO episodes (about a minute each with both cameras rendered)."""
    return 100 if config.env.train.env_type == "toy_reach" else 2


def record_demos(config: VlarlConfig, folder: Path, n: int, *, progress: Any = None) -> Path:
    """Record ``n`` successful expert episodes for ``config.env.train`` into ``folder`` (toy: episode files;
    LIBERO: a new LeRobot v3.0 dataset, ``sft.record_workers`` simulator processes)."""
    split = config.env.train
    if split.env_type == "toy_reach":
        from vlarl_cli.training.demos import record_toy_demos

        record_toy_demos(folder, n, max_steps=split.max_episode_steps, seed=split.seed)
        return folder
    from vlarl_cli.training.demos import record_expert_dataset

    report = record_expert_dataset(folder, n, suite=split.task_suite_name, task_ids=split.task_ids,
                                   resolution=split.resolution, max_episode_steps=split.max_episode_steps,
                                   settle_steps=split.settle_steps, protocol=split.protocol,
                                   first_trial=split.seed, workers=config.sft.record_workers,
                                   keep_failures=config.sft.keep_failures, progress=progress)
    return report.path


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


class _Sampler:
    """Epochs without replacement, epoch ``e`` a permutation seeded by ``(seed, e)``: the state is just the
    number of samples drawn, so a resumed run continues the same order (``skip`` = samples already drawn)."""

    def __init__(self, size: int, seed: int, skip: int = 0) -> None:
        self.size, self.seed = size, seed
        self.epoch, self.pos = divmod(skip, size)
        self.order = self._order(self.epoch)

    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.size)

    def next(self, n: int) -> np.ndarray:
        out: list[np.ndarray] = []
        while n > 0:
            if self.pos == self.size:
                self.epoch, self.pos = self.epoch + 1, 0
                self.order = self._order(self.epoch)
            take = min(n, self.size - self.pos)
            out.append(self.order[self.pos:self.pos + take])
            self.pos += take
            n -= take
        return np.concatenate(out)


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
    if output is not None and (output.exists() or output.is_symlink()):
        raise ConfigError(f"-o {output} already exists; vlarl sft writes its checkpoint into a new folder and "
                          "never replaces an existing one.",
                          "Pass a path that does not exist yet, or move the old folder away yourself.")


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

    check_output(folder)
    with atomic_directory(folder, overwrite=False) as tmp:
        _write_policy(policy, config, tmp, folder, state, ema)
    return folder


def _save_checkpoint(run_dir: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                     generators: dict[str, torch.Generator], config: VlarlConfig, state: SftState,
                     ema: Any = None) -> Path:
    """A resumable rl-train-style checkpoint ``<run>/checkpoints/global_step_<steps>`` (+ ``latest``)."""
    from vlarl_cli.config.loading import to_yaml
    from vlarl_cli.distributed import fsdp
    from vlarl_cli.training import checkpoint as ckpt

    final = ckpt.checkpoint_dir(run_dir, state.steps)
    return ckpt.save_checkpoint(
        run_dir, model_state=policy.state_dict(), optimizer_state=fsdp.full_optimizer_state(policy, optimizer),
        scheduler=scheduler, generators=generators,
        trainer_state=ckpt.TrainerState(iteration=state.steps, optimizer_steps=state.steps, version=state.version),
        config_yaml=to_yaml(_saved_config(config, final, _checkpoint_module(config) is not None)),
        export=lambda folder: _write_policy(policy, config, folder, final, state, ema))


def _restore(path: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
             generators: dict[str, torch.Generator]) -> int:
    """Load a checkpoint written by :func:`_save_checkpoint`; returns its step."""
    from vlarl_cli.distributed import fsdp
    from vlarl_cli.errors import CheckpointError
    from vlarl_cli.training import checkpoint as ckpt

    loaded = ckpt.load_checkpoint(path)
    try:
        policy.load_state_dict(loaded.model_state)
    except RuntimeError as err:
        raise CheckpointError(f"Checkpoint {path} does not match the model: {str(err).splitlines()[0]}",
                              "Resume with the config the run was started with.") from None
    fsdp.load_full_optimizer_state(policy, optimizer, loaded.optimizer_state)
    if loaded.scheduler_state is not None:
        scheduler.load_state_dict(loaded.scheduler_state)
    ckpt.restore_rng(loaded, generators)
    return loaded.trainer_state.iteration


def _trim_metrics(path: Path, last_step: int) -> None:
    """After a resume at ``last_step``: drop logged rows of steps the checkpoint does not contain."""
    from vlarl_cli.checkpoints.atomic import atomic_write_text

    if path.is_file():
        rows = [line for line in path.read_text().splitlines() if line.strip()]
        kept = [line for line in rows if json.loads(line)["step"] <= last_step]
        atomic_write_text(path, "".join(line + "\n" for line in kept))


def _demonstrations(config: VlarlConfig, demos: Path | None, record: int | None, run_dir: Path, *,
                    resuming: bool, is_main: bool, say: Any) -> Path:
    """Where the demonstrations are, recording them first (rank 0) when asked or when none are given."""
    demo_dir = Path(demos).expanduser() if demos is not None else run_dir / "demos"
    wants_record = demos is None or record is not None
    if is_main and wants_record and not (resuming and demo_dir.exists()):
        n = record if record is not None else default_record_count(config)
        t0 = time.perf_counter()
        record_demos(config, demo_dir, n, progress=say)
        say(f"recorded {n} expert demonstrations into {demo_dir} in {time.perf_counter() - t0:.1f} s")
    return demo_dir


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
    """The run's demonstrations: their folder, format and successful episodes."""

    folder: Path
    format: str
    episodes: list[Any]


def _load_demos(config: VlarlConfig, demos: Path | None, record: int | None, run_dir: Path, *, resuming: bool,
                is_main: bool, say: Any) -> _Demos:
    """Rank 0 writes the run's config and records the demonstrations when asked; everyone waits and reads."""
    from vlarl_cli.checkpoints.atomic import atomic_write_text
    from vlarl_cli.config.loading import to_yaml
    from vlarl_cli.datasets import load_demonstrations

    sft = config.sft
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.yaml", to_yaml(config))
    demo_dir = _demonstrations(config, demos, record, run_dir, resuming=resuming, is_main=is_main, say=say)
    dist.barrier()
    episodes, demo_format = load_demonstrations(demo_dir, state_key=sft.state_key, action_key=sft.action_key,
                                                main_camera_key=sft.main_camera_key,
                                                wrist_camera_key=sft.wrist_camera_key)
    return _Demos(demo_dir, demo_format, [e for e in episodes if e.success])


class _Learner:
    """This rank's policy (the same init on every rank), its data and optimizer, and one SFT step."""

    def __init__(self, config: VlarlConfig, demos: _Demos, ctx: dist.DistContext, steps: int, say: Any) -> None:
        from vlarl_cli.policies.registry import build_policy
        from vlarl_cli.training.common import build_scheduler, resolve_model_path, seed_everything

        seed_everything(config.actor.seed)
        model_cfg = trainable_model(config.actor.model, config.sft.trainable)
        self.config = config = config.model_copy(update={"actor": config.actor.model_copy(update={"model": model_cfg})})
        model_cfg = model_cfg.model_copy(update={"model_path": resolve_model_path(model_cfg.model_path)})
        self.policy = policy = build_policy(model_cfg, ctx.device)
        dist.broadcast_module_(policy)
        self.stats_note = self._statistics(demos, say)
        # chunks as long as the policy executes (C of the loaded model, normally actor.model.num_action_chunks)
        self.dataset = ChunkDataset(demos.episodes,
                                    int(getattr(policy, "num_action_chunks", config.actor.model.num_action_chunks)))
        check_dataset(self.dataset, policy, config, demos.folder)
        # eval mode: dropout off (the families disable it for RL too) and frozen backbones stay frozen
        policy.eval()
        self.params = [p for p in policy.parameters() if p.requires_grad]
        if not self.params:
            raise ConfigError("The policy has no trainable parameters.",
                              "Check sft.trainable / actor.model.train_expert_only / is_lora.")
        optim = config.actor.optim
        self.optimizer = torch.optim.AdamW(self.params, lr=optim.lr, betas=optim.betas, eps=optim.adam_eps,
                                           weight_decay=optim.weight_decay)
        self.scheduler = build_scheduler(self.optimizer, config, steps)
        from vlarl_cli.distributed import mixed_precision
        from vlarl_cli.training import ema

        self.ema = ema.for_sft(policy, "pi05" if model_cfg.is_pi05 else model_cfg.model_type, None,
                               "lora" if model_cfg.is_lora else config.sft.trainable, say)
        self.compute = mixed_precision.from_settings(policy, model_cfg.precision,
                                                     config.actor.fsdp_config.mixed_precision.param_dtype, say)
        self.ctx, self.glob, self.micro = ctx, config.actor.global_batch_size, config.actor.micro_batch_size
        if self.glob % (self.micro * ctx.world_size):
            raise ConfigError(f"actor.global_batch_size ({self.glob}) must be divisible by micro_batch_size x "
                              f"processes ({self.micro} x {ctx.world_size}).", "Adjust the batch sizes.")
        self.local = self.glob // ctx.world_size
        # the flow noise / times of step k come from (seed, rank, k): nothing to carry across a resume, on any rank
        self.flow_gen = torch.Generator()
        self.generators: dict[str, torch.Generator] = {}
        self.loss_fn = _loss_fn(policy, self.flow_gen)

    def _statistics(self, demos: _Demos, say: Any) -> str:
        """The normalisation statistics: the demonstrations' (a preset model), else the checkpoint's."""
        from vlarl_cli.datasets.stats import apply_data_stats

        if not use_data_stats(self.config):
            return "the checkpoint's"
        unnorm = getattr(getattr(self.policy, "cfg", None), "unnorm_key", None) or "vlarl_demos"
        note = apply_data_stats(self.policy, demos.episodes, dataset_name=unnorm) or "none (toy policy)"
        say(f"normalisation statistics from the demonstrations: {note}")
        return note

    def restore(self, path: Path) -> int:
        """The step the checkpoint at ``path`` reached, with weights, optimizer and schedule restored."""
        step = _restore(path, self.policy, self.optimizer, self.scheduler, self.generators)
        if self.ema is not None:
            from vlarl_cli.training.ema import restore_from

            restore_from(self.ema, path)
        return step

    def step(self, step: int, ids: np.ndarray) -> tuple[float, float, float]:
        """One optimizer step on this rank's share of the global batch ``ids``: (loss over all ranks,
        gradient norm, learning rate used)."""
        ctx, local, micro = self.ctx, self.local, self.micro
        ids = ids[ctx.rank * local:(ctx.rank + 1) * local]
        self.flow_gen.manual_seed(derived_seed(self.config.actor.seed, ctx.rank, 12, step))
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), dtype=torch.float64)
        for k in range(0, local, micro):
            obs, actions = self.dataset.batch(ids[k:k + micro])
            with self.compute():
                loss = self.loss_fn(obs, actions.to(ctx.device))
            if not torch.isfinite(loss):
                raise VlarlError(f"The SFT loss became {loss.item()} at step {step}.",
                                 "Lower actor.optim.lr or check the demonstrations for outliers.")
            (loss * (len(ids[k:k + micro]) / local)).backward()
            total += loss.detach().double().cpu() * (len(ids[k:k + micro]) / local)
        dist.gradient_all_reduce(self.policy)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.config.actor.optim.clip_grad)
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update(self.policy)
        self.scheduler.step()
        return float(dist.all_reduce_mean_(total).item()), float(grad_norm), lr

    def state(self, step: int, demos: _Demos, losses: list[float]) -> SftState:
        from vlarl_cli import __version__

        return SftState(steps=step, samples=len(self.dataset), episodes=len(demos.episodes),
                        demos=str(demos.folder.resolve()), first_loss=losses[0] if losses else float("nan"),
                        last_loss=losses[-1] if losses else float("nan"),
                        model_type=self.config.actor.model.model_type, version=__version__,
                        demos_format=demos.format, norm_stats=self.stats_note)


class _MetricsLog:
    """``sft_metrics.jsonl`` (rank 0) and the console: the means of every ``every`` steps."""

    def __init__(self, run_dir: Path, *, is_main: bool, resumed_at: int | None, every: int, steps: int,
                 say: Any) -> None:
        path = run_dir / METRICS_FILE
        if is_main and resumed_at is not None:
            _trim_metrics(path, resumed_at)
        self.file = path.open("a" if resumed_at is not None else "w") if is_main else None
        self.every, self.steps, self.say = every, steps, say
        self.window: list[tuple[float, float]] = []
        self.start = time.perf_counter()

    def add(self, step: int, loss: float, grad_norm: float, lr: float) -> None:
        self.window.append((loss, grad_norm))
        if step % self.every and step != self.steps:
            return
        row = {"step": step, "sft/loss": float(np.mean([w[0] for w in self.window])),
               "sft/grad_norm": float(np.mean([w[1] for w in self.window])), "sft/lr": lr,
               "time/elapsed": time.perf_counter() - self.start}
        self.window = []
        if self.file is not None:
            self.file.write(json.dumps(row) + "\n")
            self.file.flush()
        self.say(f"step {step}/{self.steps}  loss {row['sft/loss']:.4f}  grad_norm {row['sft/grad_norm']:.3f}  "
                 f"lr {lr:.2e}")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def train_sft(loaded: LoadedConfig, *, demos: Path | None = None, record: int | None = None,
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
    data = _load_demos(config, demos, record, run_dir, resuming=resume_path is not None, is_main=ctx.is_main, say=say)
    learner = _Learner(config, data, ctx, total, say)
    done = 0
    if resume_path is not None:
        done = learner.restore(resume_path)
        say(f"resumed from {resume_path} at step {done}")
    losses, last_saved = _train_steps(learner, data, run_dir, total, done, output=output, log_every=log_every,
                                      resumed=resume_path is not None, say=say)
    # ---- the final policy: -o OUT (a new folder), else the run's last checkpoint
    folder = ckpt.checkpoint_dir(run_dir, total)
    if output is not None:
        if ctx.is_main:
            export_policy(learner.policy, learner.config, output, learner.state(total, data, losses), learner.ema)
            say(f"checkpoint: {output}")
        folder = output
    elif last_saved != total and ctx.is_main:  # resumed at the end: the last checkpoint is the result
        say(f"nothing left to train: step {total} was already reached")
    dist.barrier()
    return SftResult(run_dir=run_dir, checkpoint=folder, demos=data.folder, steps=total,
                     first_loss=losses[0] if losses else float("nan"),
                     last_loss=losses[-1] if losses else float("nan"), losses=losses)


def _train_steps(learner: _Learner, data: _Demos, run_dir: Path, total: int, done: int, *, output: Path | None,
                 log_every: int | None, resumed: bool, say: Any) -> tuple[list[float], int]:
    """Steps ``done + 1 .. total`` with their metrics and checkpoints: (the losses, the last saved step)."""
    config, ctx = learner.config, learner.ctx
    sampler = _Sampler(len(learner.dataset), derived_seed(config.actor.seed, 11), skip=done * learner.glob)
    say(f"SFT: {config.actor.model.model_type} on {len(data.episodes)} episodes / {len(learner.dataset)} samples "
        f"from {data.folder} ({data.format}); {total} steps of {learner.glob} samples ({ctx.world_size} "
        f"process(es)), run dir {run_dir}")
    losses: list[float] = []
    log = _MetricsLog(run_dir, is_main=ctx.is_main, resumed_at=done if resumed else None,
                      every=log_every or max(1, total // 100), steps=total, say=say)
    last_saved = done if resumed else -1
    try:
        for step in range(done + 1, total + 1):
            loss, grad_norm, lr = learner.step(step, sampler.next(learner.glob))
            losses.append(loss)
            log.add(step, loss, grad_norm, lr)
            interval = config.sft.save_interval > 0 and step % config.sft.save_interval == 0 and step < total
            if interval or (step == total and output is None):
                if ctx.is_main:
                    path = _save_checkpoint(run_dir, learner.policy, learner.optimizer, learner.scheduler,
                                            learner.generators, config, learner.state(step, data, losses),
                                            learner.ema)
                    say(f"checkpoint: {path}")
                last_saved = step
                dist.barrier()
    finally:
        log.close()
    return losses, last_saved

def run_sft(*, config: str, demos: Path | None, overrides: list[str], steps: int | None, output: Path | None,
            record: int | None = None, resume: str | None = None) -> SftResult:
    """``vlarl sft``: load and validate the config, then :func:`train_sft`."""
    from vlarl_cli.config.loading import load_config

    # validated as a 1-process run: the RL placement rules (env ranks, pipeline stages) do not apply to SFT,
    # whose only multi-process rule (global batch split over the processes) train_sft checks itself
    loaded = load_config(config, overrides)  # validate first: a broken config is reported as such
    if record is not None and record < 1:
        raise ConfigError(f"--record must be >= 1, got {record}.", "Pass --record N with N >= 1, or leave it out.")
    return train_sft(loaded, demos=demos, record=record, steps=steps, output=output, resume=resume)
