"""LIBERO evaluation with the literature's protocol: success rates with Wilson intervals, resumable.

    vlarl eval --suite libero_10 --checkpoint runs/x/checkpoints/global_step_100
    vlarl eval --suite all --config quickstart --trials 5 --num-envs 2
    torchrun --nproc-per-node 2 -m vlarl_cli.cli.main eval --suite libero_90 --checkpoint PATH   # ranks

What one call does (:func:`evaluate`):
1. load the policy (a training checkpoint folder, or a config), hash its weights;
2. write the protocol card (``card.json``): protocol, step limits, settle steps, env seed, action mode,
   replan size, resolution, checkpoint hash, vlarl version. Resuming into a folder whose card differs in
   anything but the episode plan is refused, so every number in a folder comes from one setup;
3. plan the episodes ((suite, task, trial) for trial < ``trials``, trial i from LIBERO's fixed init
   state i), drop those already in ``episodes.jsonl``, split the rest over ranks (contiguous,
   task-major blocks) and over the envs of this rank's vector env (contiguous blocks again, so an env
   rarely switches task: a switch rebuilds the simulator, ~4 s);
4. run them in waves of ``num_envs`` episodes (one per env, ``auto_reset`` off, the env renders only at
   chunk boundaries), appending each finished episode atomically (:mod:`vlarl_cli.video.episodes`);
5. rank 0 summarises: per task, per suite and overall success rate with a 95% Wilson interval, printed
   as a table and written as ``summary.json`` / ``summary.csv`` (every CSV row carries the card).

Statistics: Wilson score interval (Wilson 1927, JASA 22:209) for one rate; for the difference of two
rates (:func:`compare`) Newcombe's hybrid score interval, his method 10 (Newcombe 1998, Stat. Med.
17:873), significant when it excludes 0. Trials of two checkpoints start from the same init states, but
their outcomes are not paired tightly enough (sampling noise, different trajectories) for McNemar to be
the safer default.

Sampling noise is seeded per wave from ``policy_seed`` and the wave's episodes, so a rerun with the same
``num_envs`` and no resume reproduces every episode; resumed waves differ in composition and therefore
in noise (deterministic ODE sampling still starts from seeded noise).
"""

from __future__ import annotations

import hashlib
import inspect
import math
import os
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vlarl_cli import __version__, keys
from vlarl_cli.errors import CheckpointError, ConfigError, EnvError
from vlarl_cli.video.episodes import (
    CARD,
    EPISODES,
    SUMMARY_CSV,
    SUMMARY_JSON,
    EpisodeData,
    EpisodeLog,
    EpisodeRecord,
    ResultsError,
    episode_paths,
    save_frames,
    unique_episodes,
)

if TYPE_CHECKING:
    import torch

STANDARD_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
Z95 = 1.96


# --------------------------------------------------------------------------------------------------
# statistics


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (Wilson 1927).

    centre = (p + z^2 / 2n) / (1 + z^2 / n), half width = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2).
    Unlike the normal approximation it stays inside [0, 1] and is not degenerate at 0/n or n/n, which is
    exactly where small LIBERO evaluations land. ``n == 0`` gives the uninformative (0, 1).
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # clamp rounding noise only (the exact interval is within [0, 1])
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_interval(k1: int, n1: int, k2: int, n2: int, z: float = Z95) -> tuple[float, float, float]:
    """Difference ``p2 - p1`` and its Newcombe hybrid score interval (Newcombe 1998, method 10).

    With Wilson limits (l_i, u_i) of each rate: lower = d - sqrt((p2 - l2)^2 + (u1 - p1)^2),
    upper = d + sqrt((u2 - p2)^2 + (p1 - l1)^2), d = p2 - p1.

    Returns:
        (difference, lower, upper).
    """
    if n1 == 0 or n2 == 0:
        return float("nan"), -1.0, 1.0
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson_interval(k1, n1, z)
    l2, u2 = wilson_interval(k2, n2, z)
    d = p2 - p1
    return d, d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2), d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)


# --------------------------------------------------------------------------------------------------
# episode plan


@dataclass(frozen=True, order=True)
class EpisodeKey:
    """One evaluation episode: task ``task`` of the original ``suite``, started from init state ``trial``."""

    suite: str
    task: int
    trial: int

    @property
    def libero130_task(self) -> int:
        """The task's id in libero_130 (spatial, object, goal, 10, 90 concatenated)."""
        from vlarl_cli.envs.libero.protocol import SUITE_ORDER
        from vlarl_cli.envs.libero.suites import SUITE_SIZES

        return sum(SUITE_SIZES[s] for s in SUITE_ORDER[: SUITE_ORDER.index(self.suite)]) + self.task

    @property
    def libero130_reset_state_id(self) -> int:
        from vlarl_cli.envs.libero.suites import TRIALS_PER_TASK

        return self.libero130_task * TRIALS_PER_TASK + self.trial


def expand_suite(suite: str) -> tuple[str, ...]:
    """``all`` -> the 4 standard suites; ``libero_130`` -> all 5; a suite name -> itself."""
    from vlarl_cli.envs.libero.protocol import SUITE_ORDER
    from vlarl_cli.envs.libero.suites import check_suite

    if suite == "all":
        return STANDARD_SUITES
    check_suite(suite)
    return tuple(SUITE_ORDER) if suite == "libero_130" else (suite,)


def plan_episodes(suite: str, tasks: tuple[int, ...] | None, trials: int) -> list[EpisodeKey]:
    """Every (original suite, task, trial) to evaluate, task-major.

    ``tasks`` index the requested suite (``libero_130`` ids 0..129 for libero_130; with ``all`` they
    select the same task ids in each of the four suites). Out-of-range ids raise EnvError.
    """
    from vlarl_cli.envs.libero import suites as S

    if not 1 <= trials <= S.TRIALS_PER_TASK:
        raise EnvError(f"trials must be in 1..{S.TRIALS_PER_TASK} (LIBERO ships 50 init states per task), "
                       f"got {trials}.", fix="Pass --trials between 1 and 50.")
    pairs: list[tuple[str, int]] = []
    if suite == "libero_130":
        ids = tasks if tasks is not None else tuple(range(S.num_tasks("libero_130")))
        for t in ids:
            info = S.get_task("libero_130", t)  # range-checked, names the fix
            pairs.append((info.suite, info.suite_task_id))
    else:
        for s in expand_suite(suite):
            n = S.num_tasks(s)
            for t in tasks if tasks is not None else range(n):
                if not 0 <= t < n:
                    raise EnvError(f"task id {t} is out of range for {s} ({n} tasks).", fix=f"Use 0..{n - 1}.")
                pairs.append((s, t))
    ordered = list(dict.fromkeys(pairs))  # keep order, drop repeats
    return [EpisodeKey(s, t, i) for s, t in ordered for i in range(trials)]


def split_blocks(items: list[Any], parts: int) -> list[list[Any]]:
    """Split ``items`` into ``parts`` contiguous blocks whose sizes differ by at most one (earlier first)."""
    base, extra = divmod(len(items), parts)
    out, start = [], 0
    for p in range(parts):
        size = base + (p < extra)
        out.append(items[start : start + size])
        start += size
    return out


def workers_for(num_envs: int, requested: int | None) -> int:
    """Env worker processes: as requested, else one per core, always a divisor of ``num_envs``."""
    target = requested or min(num_envs, os.cpu_count() or 1)
    target = max(1, min(target, num_envs))
    while num_envs % target:
        target -= 1
    return target


# --------------------------------------------------------------------------------------------------
# settings, policy source, card


@dataclass(frozen=True)
class EvalSettings:
    """How to evaluate (everything except the policy).

    Attributes:
        suite: a LIBERO suite, ``libero_130`` or ``all`` (the four standard suites).
        tasks: task ids of ``suite`` (None = all).
        trials: episodes per task; trial i starts from init state i (standard: 50).
        protocol: ``standard`` (openpi/OpenVLA) or ``rlinf``.
        deterministic: deterministic actions (ODE denoising / argmax) instead of sampled ones.
        temperature: sampling temperature of token policies (sampled mode only).
        num_envs: simulators of this rank; num_workers: their processes (None: one per core).
        resolution: camera render size (the protocol's 256 by default; the policy resizes).
        max_steps / settle_steps / env_seed: overrides of the protocol (recorded as deviations).
        policy_seed: seeds the policy's sampling noise.
        live_video: record this many episodes' frames live (renders every step; slower).
        hard_reset: robosuite hard resets (rebuild the model every episode).
    """

    suite: str = "libero_10"
    tasks: tuple[int, ...] | None = None
    trials: int = 50
    protocol: str = "standard"
    deterministic: bool = True
    temperature: float | None = None
    num_envs: int = 1
    num_workers: int | None = None
    resolution: int = 256
    max_steps: int | None = None
    settle_steps: int | None = None
    env_seed: int | None = None
    policy_seed: int = 0
    live_video: int = 0
    hard_reset: bool = False

    def validate(self) -> None:
        from vlarl_cli.envs.libero.env import RESOLUTIONS
        from vlarl_cli.envs.libero.protocol import get_protocol

        get_protocol(self.protocol)
        expand_suite(self.suite)
        if self.resolution not in RESOLUTIONS:
            raise EnvError(f"Resolution {self.resolution} is not supported.", fix=f"Use one of {RESOLUTIONS}.")
        if self.num_envs < 1:
            raise ConfigError(f"num_envs must be >= 1, got {self.num_envs}.", "Pass --num-envs 1 or more.")
        if self.temperature is not None and (self.deterministic or self.temperature <= 0):
            raise ConfigError(f"temperature {self.temperature} needs sampled actions and a value > 0.",
                              "Pass either --deterministic or --temperature T (T > 0), not both.")
        for name in ("max_steps", "settle_steps"):
            value = getattr(self, name)
            if value is not None and value < (1 if name == "max_steps" else 0):
                raise ConfigError(f"{name} must be positive, got {value}.", f"Fix --{name.replace('_', '-')}.")

    def effective(self, suite: str) -> tuple[int, int, int]:
        """(max steps, settle steps, env seed) of an episode of ``suite``."""
        from vlarl_cli.envs.libero.protocol import get_protocol

        p = get_protocol(self.protocol)
        return (self.max_steps if self.max_steps is not None else p.max_steps_for(suite),
                self.settle_steps if self.settle_steps is not None else p.settle_steps,
                self.env_seed if self.env_seed is not None else p.seed)

    def deviations(self, suites: list[str] | tuple[str, ...] = ()) -> list[str]:
        """How these settings depart from the named protocol for ``suites`` (printed on the card)."""
        from vlarl_cli.envs.libero.protocol import get_protocol

        p = get_protocol(self.protocol)
        out = []
        if self.max_steps is not None:
            limits = ", ".join(f"{s} {p.max_steps[s]}" for s in suites or p.max_steps)
            out.append(f"max_steps={self.max_steps} (protocol: {limits})")
        if self.settle_steps is not None and self.settle_steps != p.settle_steps:
            out.append(f"settle_steps={self.settle_steps} (protocol: {p.settle_steps})")
        if self.env_seed is not None and self.env_seed != p.seed:
            out.append(f"env_seed={self.env_seed} (protocol: {p.seed})")
        if self.trials != p.trials_per_task:
            out.append(f"trials={self.trials} per task (protocol: {p.trials_per_task})")
        if self.resolution != p.render_resolution:
            out.append(f"render resolution {self.resolution} (protocol: {p.render_resolution})")
        if self.hard_reset:
            out.append("hard resets")
        return out


@dataclass
class PolicyInfo:
    """Where the evaluated weights came from (for the card)."""

    source: str  # "checkpoint" | "config"
    path: str
    sha256: str
    hash_of: str  # what the hash covers
    model_type: str
    config: str = ""


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def state_dict_sha256(module: torch.nn.Module) -> str:
    """sha256 over (name, dtype, shape, raw bytes) of every state-dict entry, in name order."""
    import torch

    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def resolve_checkpoint_folder(path: Path) -> Path:
    """A training checkpoint folder from itself, a folder with ``latest``, or a run folder."""
    from vlarl_cli.training.checkpoint import LATEST

    path = Path(path).expanduser()
    for pointer in (path / LATEST, path / "checkpoints" / LATEST):
        if pointer.is_file():
            path = pointer.parent / pointer.read_text().strip()
            break
    if not path.is_dir():
        raise CheckpointError(f"Checkpoint folder {path} does not exist.",
                              "Pass a folder like runs/<name>/checkpoints/global_step_<k> (or the run folder).")
    path = path.resolve()
    has_weights = (path / "model.safetensors").is_file() or bool(list(path.glob("*.safetensors")))
    missing = [f for f, ok in (("model.safetensors", has_weights), ("config.yaml", (path / "config.yaml").is_file()))
               if not ok]
    if missing:
        raise CheckpointError(f"{path} is not a vlarl training checkpoint (missing {', '.join(missing)}).",
                              "Pass a folder written by `vlarl rl-train` (it holds model.safetensors and "
                              "config.yaml), or use --config to build the policy from a config.")
    return path


def _weights_sha256(folder: Path) -> tuple[str, str]:
    """(sha256, what it covers) of a folder's weights: model.safetensors itself, or all shards."""
    if (folder / "model.safetensors").is_file():
        return _sha256_file(folder / "model.safetensors"), "model.safetensors"
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.safetensors")):
        h.update(f.name.encode() + _sha256_file(f).encode())
    return h.hexdigest(), "sha256 of the *.safetensors files' sha256s"


#: A family policy folder (``save_policy(format="vlarl")``): the family loads weights AND side files (norm
#: stats, tokenizer) from it, which a bare state dict lacks.
FAMILY_POLICY_MARKER = "vlarl_config.json"


def load_policy(checkpoint: Path | None, config: str | None, overrides: list[str] | tuple[str, ...] = (),
                device: Any = "cpu") -> tuple[torch.nn.Module, PolicyInfo, Any]:
    """Build the policy to evaluate.

    ``checkpoint``: a vlarl training checkpoint: rebuild the model from its ``config.yaml`` (or from
    ``config`` when given), then load ``model.safetensors`` strictly. ``config`` alone: build the configured
    policy (e.g. ``actor.model.preset=tiny``), seeding torch with ``actor.seed`` so the random init is the
    same on every rank and on resume.

    Returns:
        (policy in eval mode, :class:`PolicyInfo`, the loaded VlarlConfig).
    """
    import torch

    from vlarl_cli.config.loading import load_config
    from vlarl_cli.policies.registry import build_policy
    from vlarl_cli.training.rl import resolve_model_path

    if checkpoint is None and config is None:
        raise ConfigError("Nothing to evaluate: neither --checkpoint nor --config was given.",
                          "Pass --checkpoint runs/<name>/checkpoints/global_step_<k>, or --config with a "
                          "model (e.g. --config quickstart actor.model.preset=tiny).")
    ckpt = resolve_checkpoint_folder(checkpoint) if checkpoint is not None else None
    cfg_source = config if config is not None else str(ckpt / "config.yaml")  # type: ignore[operator]
    loaded = load_config(cfg_source, list(overrides))
    model_cfg = loaded.config.actor.model
    family_folder = ckpt is not None and (ckpt / FAMILY_POLICY_MARKER).is_file()
    # a family policy folder is loaded by the family itself (weights + norm stats + tokenizer); otherwise the
    # model is rebuilt from the config (its original model_path provides the side files) and the state dict
    # of model.safetensors is loaded strictly on top
    model_path = str(ckpt) if family_folder else resolve_model_path(model_cfg.model_path)
    model = model_cfg.model_copy(update={"model_path": model_path})
    torch.manual_seed(loaded.config.actor.seed)
    policy = build_policy(model, device)
    if ckpt is not None and family_folder:
        sha, hash_of = _weights_sha256(ckpt)
        info = PolicyInfo("checkpoint", str(ckpt), sha, hash_of, model_cfg.model_type, str(cfg_source))
    elif ckpt is not None:
        from safetensors.torch import load_file

        fix = "Evaluate with the config the checkpoint was trained with (drop --config, or fix the overrides)."
        state = load_file(str(ckpt / "model.safetensors"))
        try:
            result = policy.load_state_dict(state, strict=False)
        except RuntimeError as err:  # shape mismatches raise even when strict=False
            first = str(err).splitlines()[1:2] or [str(err)[:200]]
            raise CheckpointError(f"Checkpoint {ckpt} does not match the model built from "
                                  f"{Path(cfg_source).name}: {first[0].strip()}", fix) from None
        if result.missing_keys or result.unexpected_keys:
            raise CheckpointError(
                f"Checkpoint {ckpt} does not match the model built from {Path(cfg_source).name}: "
                f"{len(result.missing_keys)} missing keys (e.g. {result.missing_keys[:3]}), "
                f"{len(result.unexpected_keys)} unexpected (e.g. {result.unexpected_keys[:3]}).", fix)
        info = PolicyInfo("checkpoint", str(ckpt), _sha256_file(ckpt / "model.safetensors"), "model.safetensors",
                          model_cfg.model_type, str(cfg_source))
    elif model_path is not None and list(Path(model_path).glob("*.safetensors")):
        sha, hash_of = _weights_sha256(Path(model_path))
        info = PolicyInfo("config", model_path, sha, hash_of, model_cfg.model_type, str(loaded.source))
    else:
        info = PolicyInfo("config", model_path or f"preset={model_cfg.preset}", state_dict_sha256(policy),
                          "state dict", model_cfg.model_type, str(loaded.source))
    policy.eval()
    return policy, info, loaded.config


def make_card(settings: EvalSettings, policy: Any, info: PolicyInfo | None,
              plan: list[EpisodeKey]) -> dict[str, Any]:
    """The protocol card: everything a success rate depends on. ``plan`` fills its ``plan`` part."""
    from vlarl_cli.envs.libero.protocol import get_protocol

    p = get_protocol(settings.protocol)
    suites = sorted({k.suite for k in plan}, key=lambda s: expand_suite("libero_130").index(s))
    temperature = settings.temperature if not settings.deterministic else None
    mode = "deterministic" if settings.deterministic else "sampled"
    return {
        "protocol": p.name,
        "protocol_source": p.notes,
        "init_states": "LIBERO fixed init states (task order 0); trial i starts from init state i",
        "max_steps": {s: settings.effective(s)[0] for s in suites},
        "settle_steps": settings.effective(suites[0])[1] if suites else p.settle_steps,
        "settle_action": list(p.settle_action),
        "env_seed": settings.effective(suites[0])[2] if suites else p.seed,
        "env_seed_applied": "before every reset",
        "reset": "hard" if settings.hard_reset else "soft (checked bit-identical to hard)",
        "action_mode": mode if temperature is None else f"{mode} (temperature {temperature})",
        "temperature": temperature,
        "replan_size": int(getattr(policy, "num_action_chunks", 0)),
        "resolution": settings.resolution,
        "cameras": list(getattr(policy, "cameras", ("main", "wrist"))),
        "policy_seed": settings.policy_seed,
        "checkpoint": asdict(info) if info is not None else None,
        "deviations": settings.deviations(suites),
        "vlarl_version": __version__,
        "plan": {
            "suite": settings.suite,
            "trials_per_task": settings.trials,
            "tasks": {s: sorted({k.task for k in plan if k.suite == s}) for s in suites},
            "episodes": len(plan),
        },
    }


def card_conflicts(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Card fields (outside the plan and the per-suite step limits of new suites) that differ."""
    out = []
    for k in sorted(set(old) | set(new)):
        if k in ("plan", "deviations", "protocol_source"):
            continue
        a, b = old.get(k), new.get(k)
        if k == "max_steps" and isinstance(a, dict) and isinstance(b, dict):
            if any(a[s] != b[s] for s in set(a) & set(b)):
                out.append(k)
        elif k == "checkpoint" and isinstance(a, dict) and isinstance(b, dict):
            if a.get("sha256") != b.get("sha256"):
                out.append("checkpoint.sha256")
        elif a != b:
            out.append(k)
    return out


# --------------------------------------------------------------------------------------------------
# running episodes


def _subset(obs: dict[str, Any], rows: list[int]) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    for k, v in obs.items():
        out[k] = v[rows] if isinstance(v, torch.Tensor) else [v[i] for i in rows] if isinstance(v, list) else v
    return out


def _sampler(policy: Any) -> tuple[bool, bool]:
    """(policy.sample takes ``generator``, policy has a ``temperature`` attribute)."""
    try:
        takes_gen = "generator" in inspect.signature(policy.sample).parameters
    except (TypeError, ValueError):
        takes_gen = False
    return takes_gen, hasattr(policy, "temperature")


def _wave_seed(policy_seed: int, wave: list[EpisodeKey]) -> int:
    return (policy_seed * 1_000_003 + zlib.crc32(repr([(k.suite, k.task, k.trial) for k in wave]).encode())) % 2**63


@dataclass
class RunStats:
    episodes: int = 0
    waves: int = 0
    env_time_s: float = 0.0
    policy_time_s: float = 0.0
    wall_s: float = 0.0
    worker_restarts: int = 0


def run_episodes(policy: Any, settings: EvalSettings, items: list[EpisodeKey], *,
                 on_episode: Any = None, rank: int = 0, out_dir: Path | None = None,
                 log: bool = True) -> tuple[list[EpisodeRecord], RunStats]:
    """Evaluate ``items`` (each exactly once) in this process's vector env.

    Args:
        on_episode: called with each finished :class:`EpisodeRecord` (already holding its data paths).
        out_dir: where per-episode data (actions, fingerprints, live frames) are written; None = nowhere.

    Returns:
        (records in completion order, timing stats).
    """
    import torch

    from vlarl_cli.envs.libero.suites import get_task
    from vlarl_cli.envs.vector import EPISODE_DONE, ERRORS, LiberoVectorEnv, VectorEnvSpec

    stats = RunStats()
    if not items:
        return [], stats
    takes_gen, has_temp = _sampler(policy)
    if settings.temperature is not None:
        if has_temp:
            policy.temperature = settings.temperature
        elif settings.temperature != 1.0:
            raise ConfigError(f"{type(policy).__name__} has no sampling temperature (a flow policy samples "
                              "with its configured noise).",
                              "Use --temperature 1 to sample with the configured noise, or --deterministic.")
    chunk = int(policy.num_action_chunks)
    n = min(settings.num_envs, len(items))
    spec = VectorEnvSpec(
        suite="libero_130", num_envs=n, num_workers=workers_for(n, settings.num_workers),
        resolution=settings.resolution, cameras=tuple(getattr(policy, "cameras", ("main", "wrist"))),
        max_episode_steps=settings.max_steps, settle_steps=settings.settle_steps, protocol=settings.protocol,
        env_seed=settings.env_seed, auto_reset=False, record_video=settings.live_video > 0,
        hard_reset=settings.hard_reset,
    )
    blocks = split_blocks(items, n)
    queue = [[b[k] if k < len(b) else None for b in blocks] for k in range(len(blocks[0]))]
    records: list[EpisodeRecord] = []
    live_left = settings.live_video
    start = time.perf_counter()
    vec = LiberoVectorEnv(spec)
    try:
        retried: set[EpisodeKey] = set()
        retry: list[EpisodeKey] = []
        last: dict[int, EpisodeKey] = {}
        while queue or retry:
            if not queue:  # episodes lost to a worker crash get one more run, packed into fresh waves
                more = split_blocks(retry, n)
                queue = [[b[k] if k < len(b) else None for b in more] for k in range(len(more[0]))]
                retry = []
            wave = queue.pop(0)
            # envs without an episode this wave restart their previous one (same task: no rebuild) and
            # end it at once with a NaN chunk (the env fails a malformed chunk without stepping)
            filler = [wave[e] is None for e in range(n)]
            fallback = next(x for x in wave if x is not None)
            keys_ = [w if w is not None else last.get(e, fallback) for e, w in enumerate(wave)]
            last.update({e: w for e, w in enumerate(wave) if w is not None})
            restarts = vec.restarts
            t0 = time.perf_counter()
            obs = vec.reset([k.libero130_reset_state_id for k in keys_])
            stats.env_time_s += time.perf_counter() - t0
            active = np.array([not f for f in filler])
            sent: list[list[np.ndarray]] = [[] for _ in range(n)]
            states = [[obs[keys.STATES][e].numpy().copy()] for e in range(n)]
            joints = [[obs["joint_pos"][e].numpy().copy()] for e in range(n)]
            gen = torch.Generator().manual_seed(_wave_seed(settings.policy_seed, [k for k in wave if k]))
            ended: dict[int, tuple[bool, int, str]] = {}
            frames: dict[int, dict[str, np.ndarray]] = {}
            first = True
            while active.any() or first:
                rows = [int(e) for e in np.flatnonzero(active)]
                actions = np.full((n, chunk, 7), np.nan, np.float32)  # NaN ends filler episodes at once
                if rows:
                    t0 = time.perf_counter()
                    kwargs = {"generator": gen} if takes_gen else {}
                    with torch.no_grad():
                        out = policy.sample(_subset(obs, rows), deterministic=settings.deterministic, **kwargs)
                    stats.policy_time_s += time.perf_counter() - t0
                    a = out.actions.detach().to("cpu", torch.float32).numpy()
                    if a.shape != (len(rows), chunk, 7):
                        raise ConfigError(f"The policy returned actions of shape {list(a.shape)}, expected "
                                          f"[{len(rows)}, {chunk}, 7].", "Check actor.model.num_action_chunks.")
                    actions[rows] = a
                first = False
                t0 = time.perf_counter()
                obs, _, _, info = vec.step_chunk(actions)
                stats.env_time_s += time.perf_counter() - t0
                done = info[EPISODE_DONE].numpy()
                for e in rows:
                    sent[e].append(actions[e])
                    states[e].append(obs[keys.STATES][e].numpy().copy())
                    joints[e].append(obs["joint_pos"][e].numpy().copy())
                    if done[e]:
                        active[e] = False
                        ended[e] = (bool(info[keys.SUCCESS_ONCE][e]), int(info[keys.EPISODE_LEN][e]),
                                    info[ERRORS].get(e, ""))
                        if spec.record_video:
                            got = vec.episode_frames(e)
                            if got and live_left > 0:
                                frames[e] = got[-1]
                                live_left -= 1
                if spec.record_video:
                    for e in np.flatnonzero(done):
                        if filler[int(e)]:
                            vec.episode_frames(int(e))  # drop
            wall = time.perf_counter() - start
            lost = vec.restarts > restarts
            stats.worker_restarts += vec.restarts - restarts
            stats.waves += 1
            for e, key in enumerate(wave):
                if key is None:
                    continue
                success, steps, error = ended[e]
                if error and lost and key not in retried:  # a worker died: not the policy's fault, run again
                    retried.add(key)
                    retry.append(key)
                    continue
                task = get_task(key.suite, key.task)
                max_steps, settle, seed = settings.effective(key.suite)
                rec = EpisodeRecord(suite=key.suite, task=key.task, trial=key.trial,
                                    reset_state_id=key.task * 50 + key.trial, task_name=task.name,
                                    language=task.language, success=success and not error, steps=steps,
                                    seed=seed, max_steps=max_steps, settle_steps=settle, error=error, rank=rank,
                                    wall_s=round(wall, 3), root=out_dir)
                if out_dir is not None:
                    rec.data, frames_path = episode_paths(rec.label, key.suite)
                    EpisodeData(np.stack(sent[e]), np.stack(states[e]), np.stack(joints[e])).save(out_dir / rec.data)
                    if e in frames:
                        save_frames(out_dir / frames_path, frames[e])
                        rec.frames = frames_path
                records.append(rec)
                stats.episodes += 1
                if on_episode is not None:
                    on_episode(rec)
                if log:
                    status = "success" if rec.success else ("ERROR " + error if error else "fail")
                    rate = 60 * stats.episodes / max(wall, 1e-9)
                    print(f"[rank {rank}] {stats.episodes}/{len(items)} {rec.label}: {status} ({steps} steps) "
                          f"| {rate:.2f} episodes/min", flush=True)
    finally:
        vec.close()
    stats.wall_s = time.perf_counter() - start
    return records, stats


# --------------------------------------------------------------------------------------------------
# summary


@dataclass
class RateRow:
    """A success rate with its 95% Wilson interval. ``level``: task, suite or overall."""

    level: str
    suite: str
    task: int | None
    task_name: str
    n: int
    successes: int
    success_rate: float
    ci95_low: float
    ci95_high: float
    mean_steps_success: float | None

    @classmethod
    def of(cls, level: str, suite: str, task: int | None, name: str, records: list[EpisodeRecord]) -> RateRow:
        k = sum(r.success for r in records)
        lo, hi = wilson_interval(k, len(records))
        steps = [r.steps for r in records if r.success]
        return cls(level, suite, task, name, len(records), k, k / len(records) if records else float("nan"),
                   lo, hi, float(np.mean(steps)) if steps else None)


@dataclass
class EvalSummary:
    """Result of an evaluation: the card and the rates (tasks, then suites, then overall)."""

    card: dict[str, Any]
    rows: list[RateRow]
    planned: int
    finished: int
    run_now: int = 0
    skipped: int = 0
    out_dir: Path | None = None
    stats: RunStats = field(default_factory=RunStats)

    @property
    def complete(self) -> bool:
        return self.finished == self.planned

    @property
    def overall(self) -> RateRow:
        return next(r for r in self.rows if r.level == "overall")

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        """Flat metrics for loggers: ``eval/success_rate``, ``eval/<suite>/success_rate``, CI bounds."""
        out: dict[str, float] = {}
        for r in self.rows:
            if r.level == "task":
                continue
            base = prefix if r.level == "overall" else f"{prefix}/{r.suite}"
            out[f"{base}/success_rate"] = r.success_rate
            out[f"{base}/ci95_low"] = r.ci95_low
            out[f"{base}/ci95_high"] = r.ci95_high
            out[f"{base}/num_episodes"] = float(r.n)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"card": self.card, "complete": self.complete, "planned": self.planned, "finished": self.finished,
                "statistics": "95% Wilson score interval (z = 1.96)",
                "rows": [asdict(r) for r in self.rows], "run": asdict(self.stats)}


def summarize(records: list[EpisodeRecord], card: dict[str, Any], plan: list[EpisodeKey]) -> EvalSummary:
    """Rates over the planned episodes found in ``records`` (one record per episode)."""
    unique = unique_episodes(records)
    done = [unique[(k.suite, k.task, k.trial)] for k in plan if (k.suite, k.task, k.trial) in unique]
    rows: list[RateRow] = []
    suites = list(dict.fromkeys(k.suite for k in plan))
    for s in suites:
        for t in dict.fromkeys(k.task for k in plan if k.suite == s):
            rs = [r for r in done if r.suite == s and r.task == t]
            if rs:
                rows.append(RateRow.of("task", s, t, rs[0].task_name, rs))
    for s in suites:
        rs = [r for r in done if r.suite == s]
        if rs:
            rows.append(RateRow.of("suite", s, None, "", rs))
    rows.append(RateRow.of("overall", "+".join(suites), None, "", done))
    return EvalSummary(card=card, rows=rows, planned=len(plan), finished=len(done))


CSV_CARD_COLUMNS = ("protocol", "max_steps", "settle_steps", "env_seed", "action_mode", "replan_size",
                    "resolution", "checkpoint_sha256", "vlarl_version", "deviations")


def write_summary(out_dir: Path, summary: EvalSummary) -> None:
    """``summary.json`` and ``summary.csv`` (atomic; every CSV row carries the card columns)."""
    import csv
    import io

    from vlarl_cli.checkpoints.atomic import atomic_write_json, atomic_write_text

    atomic_write_json(out_dir / SUMMARY_JSON, summary.to_json())
    card = summary.card
    buf = io.StringIO()
    rate_cols = [f for f in RateRow.__dataclass_fields__]
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(rate_cols + list(CSV_CARD_COLUMNS))
    for r in summary.rows:
        max_steps = card["max_steps"].get(r.suite) if r.level != "overall" else \
            "/".join(str(v) for v in card["max_steps"].values())
        ckpt = card.get("checkpoint") or {}
        extra = [card["protocol"], max_steps, card["settle_steps"], card["env_seed"], card["action_mode"],
                 card["replan_size"], card["resolution"], ckpt.get("sha256", ""), card["vlarl_version"],
                 "; ".join(card["deviations"])]
        row = asdict(r)
        writer.writerow([("" if row[c] is None else round(row[c], 6) if isinstance(row[c], float) else row[c])
                         for c in rate_cols] + extra)
    atomic_write_text(out_dir / SUMMARY_CSV, buf.getvalue())


def _console() -> Any:
    """A rich console at least 120 columns wide (logs and pipes default to 80, which folds the table)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal and console.width >= 120 else Console(width=max(console.width, 120))


def print_summary(summary: EvalSummary, console: Any = None) -> None:
    """The rich table: one row per task, per suite and overall, with the card underneath."""
    from rich.table import Table

    console = console or _console()
    card = summary.card
    table = Table(title=f"LIBERO evaluation ({card['protocol']} protocol)", show_lines=False)
    for col, just in (("suite", "left"), ("task", "right"), ("name", "left"), ("n", "right"),
                      ("success", "right"), ("95% CI (Wilson)", "right"), ("steps (succ.)", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in summary.rows:
        style = "bold" if r.level != "task" else None
        name = r.task_name if len(r.task_name) < 48 else r.task_name[:45] + "..."
        table.add_row(r.suite if r.level != "overall" else f"ALL ({r.suite})" if "+" in r.suite else "ALL",
                      "" if r.task is None else str(r.task), name, str(r.n), f"{r.successes} ({r.success_rate:.1%})",
                      f"[{r.ci95_low:.1%}, {r.ci95_high:.1%}]",
                      "" if r.mean_steps_success is None else f"{r.mean_steps_success:.0f}", style=style)
    console.print(table)
    ckpt = card.get("checkpoint") or {}
    console.print(
        f"protocol {card['protocol']} | max steps {card['max_steps']} + {card['settle_steps']} settle | "
        f"env seed {card['env_seed']} | {card['action_mode']} | replan every {card['replan_size']} steps | "
        f"{card['resolution']} px | weights {ckpt.get('sha256', '?')[:12]} ({ckpt.get('source', '?')}) | "
        f"vlarl {card['vlarl_version']}", highlight=False)
    for d in card["deviations"]:
        console.print(f"[yellow]deviation from the protocol:[/] {d}", highlight=False)
    if not summary.complete:
        console.print(f"[red]incomplete:[/] {summary.finished} of {summary.planned} planned episodes finished; "
                      "run the same command again to finish them.", highlight=False)


# --------------------------------------------------------------------------------------------------
# entry points


def evaluate_policy(policy: Any, settings: EvalSettings, *, info: PolicyInfo | None = None,
                    out_dir: Path | None = None, resume: bool = True, rank: int = 0, world_size: int = 1,
                    show: bool = True, log_episodes: bool = True, group: Any = None) -> EvalSummary:
    """Evaluate an already built policy (what ``rl-train``'s ``val_check_interval`` calls).

    ``rank`` / ``world_size`` index the evaluating ranks, which form the process ``group`` (default: all
    ranks; rl-train with a separated placement evaluates on its rollout ranks).

    With ``out_dir``: card, crash-safe episode log, resume, summary files (written by rank 0).
    Without: nothing is written; with several ranks the counts are summed over ranks, so every rank
    returns the same summary.
    """
    from vlarl_cli.checkpoints.atomic import atomic_write_json
    from vlarl_cli.distributed import dist

    settings.validate()
    plan = plan_episodes(settings.suite, settings.tasks, settings.trials)
    card = make_card(settings, policy, info, plan)
    log = EpisodeLog(out_dir / EPISODES) if out_dir is not None else None
    if out_dir is not None and rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        _prepare_folder(out_dir, card, resume)
    dist.barrier(group)
    finished = {r.key for r in log.read()} if log is not None else set()
    todo = [k for k in plan if (k.suite, k.task, k.trial) not in finished]
    mine = split_blocks(todo, world_size)[rank]
    if show and rank == 0:
        print(f"vlarl eval: {len(plan)} episodes planned, {len(plan) - len(todo)} already finished, "
              f"{len(todo)} to run on {world_size} rank(s)" + (f" -> {out_dir}" if out_dir else ""), flush=True)
    records, stats = run_episodes(policy, settings, mine, on_episode=log.append if log else None, rank=rank,
                                  out_dir=out_dir, log=log_episodes)
    dist.barrier(group)
    if log is not None:
        summary = summarize(log.read(), card, plan)
    else:
        summary = summarize(_gather_records(records, world_size, group), card, plan)
    summary.run_now, summary.skipped, summary.out_dir, summary.stats = len(records), len(plan) - len(todo), out_dir, stats
    if rank == 0:
        if out_dir is not None:
            write_summary(out_dir, summary)
            atomic_write_json(out_dir / CARD, card)  # the plan part follows the latest call
        if show:
            print_summary(summary)
    return summary


def _gather_records(records: list[EpisodeRecord], world_size: int, group: Any = None) -> list[EpisodeRecord]:
    if world_size <= 1:
        return records
    import torch.distributed as torch_dist

    gathered: list[Any] = [None] * world_size
    torch_dist.all_gather_object(gathered, [r.to_json() for r in records], group=group)
    import json

    return [EpisodeRecord.from_dict(json.loads(line)) for part in gathered for line in part]


def _prepare_folder(out_dir: Path, card: dict[str, Any], resume: bool) -> None:
    import json
    import shutil

    from vlarl_cli.checkpoints.atomic import atomic_write_json

    card_path, log = out_dir / CARD, EpisodeLog(out_dir / EPISODES)
    if card_path.is_file() and log.path.is_file():
        if resume:
            old = json.loads(card_path.read_text())
            conflicts = card_conflicts(old, card)
            if conflicts:
                raise ResultsError(
                    f"{out_dir} holds results produced under a different setup ({', '.join(conflicts)} differ: "
                    + "; ".join(f"{c}: {old.get(c.split('.')[0])!s:.80} -> {card.get(c.split('.')[0])!s:.80}"
                                for c in conflicts[:3]) + ").",
                    "Write to another folder with --out, or pass --no-resume to discard the old results.")
            cut = log.repair()
            if cut:
                print(f"vlarl eval: removed a torn last line ({cut} bytes) from {log.path}", flush=True)
        else:
            log.path.unlink()
            for sub in ("episodes", "frames"):
                shutil.rmtree(out_dir / sub, ignore_errors=True)
    atomic_write_json(card_path, card)


def evaluate(checkpoint: Path | None = None, config: str | None = None, overrides: list[str] | None = None, *,
             settings: EvalSettings, out_dir: Path | None = None, resume: bool = True) -> EvalSummary:
    """``vlarl eval``: load the policy, evaluate it (spread over this launch's ranks), write the results.

    ``out_dir`` defaults to ``eval/<checkpoint or config name>/<suite>_<protocol>``.
    """
    from vlarl_cli.distributed import dist

    settings.validate()
    ctx = dist.init_distributed()
    try:
        policy, info, _ = load_policy(checkpoint, config, overrides or [], ctx.device)
        if out_dir is None:
            path = Path(info.path)
            # runs/<run>/checkpoints/global_step_<k> -> <run>_global_step_<k>
            name = (f"{path.parent.parent.name}_{path.name}" if path.parent.name == "checkpoints" else path.name) \
                if info.source == "checkpoint" else Path(info.config).stem
            out_dir = Path("eval") / name / f"{settings.suite}_{settings.protocol}"
        return evaluate_policy(policy, settings, info=info, out_dir=Path(out_dir), resume=resume,
                               rank=ctx.rank, world_size=ctx.world_size)
    finally:
        dist.shutdown()


def training_eval_metrics(policy: Any, config: Any, *, rank: int = 0, world_size: int = 1,
                          out_dir: Path | None = None, group: Any = None) -> dict[str, float]:
    """``eval/*`` metrics for ``rl-train``'s ``val_check_interval`` from ``config.env.eval``.

    Same protocol machinery as ``vlarl eval``; trials per task = enough episodes for every eval env to
    run ``rollout_epoch`` episodes (``ceil(total_num_envs * rollout_epoch / tasks)``, at most 50);
    deterministic actions. ``max_episode_steps`` / ``settle_steps`` of the split override the protocol.
    """
    split = config.env.eval
    from vlarl_cli.envs.libero import suites as S

    n_tasks = len(split.task_ids) if split.task_ids else S.num_tasks(split.task_suite_name)
    total = split.total_num_envs or 1
    trials = min(S.TRIALS_PER_TASK, max(1, math.ceil(total * split.rollout_epoch / n_tasks)))
    settings = EvalSettings(
        suite=split.task_suite_name, tasks=tuple(split.task_ids) if split.task_ids else None, trials=trials,
        protocol=split.protocol, deterministic=True, num_envs=max(1, total // world_size),
        num_workers=split.num_workers, resolution=split.resolution, max_steps=split.max_episode_steps,
        settle_steps=split.settle_steps, policy_seed=config.actor.seed,
    )
    was_training = bool(getattr(policy, "training", False))
    policy.eval()
    try:
        summary = evaluate_policy(policy, settings, out_dir=out_dir, rank=rank, world_size=world_size, show=False,
                                  log_episodes=False, resume=False, group=group)
    finally:
        if was_training:
            policy.train()
    return summary.metrics("eval")


# --------------------------------------------------------------------------------------------------
# comparing two result folders


@dataclass
class DiffRow:
    """Rate of B minus rate of A with Newcombe's 95% interval; significant when it excludes 0."""

    level: str
    suite: str
    task: int | None
    n_a: int
    rate_a: float
    n_b: int
    rate_b: float
    difference: float
    ci95_low: float
    ci95_high: float

    @property
    def significant(self) -> bool:
        return self.ci95_low > 0 or self.ci95_high < 0


@dataclass
class Comparison:
    a: Path
    b: Path
    rows: list[DiffRow]
    card_differences: list[str]
    method: str = "Newcombe (1998) hybrid score interval, method 10, 95%; significant = interval excludes 0"


def compare(a_dir: Path, b_dir: Path, *, show: bool = True) -> Comparison:
    """Per-task, per-suite and overall difference ``B - A`` between two ``vlarl eval`` result folders.

    Only episodes present in both folders' plans are compared ((suite, task, trial) matched, so both
    rates come from the same init states). Card differences other than the checkpoint are reported:
    rates from different protocols are not comparable.
    """
    import json

    from vlarl_cli.video.episodes import read_episodes

    folders = []
    for d in (Path(a_dir), Path(b_dir)):
        if not (d / CARD).is_file():
            raise ResultsError(f"{d} is not a vlarl eval results folder (no {CARD}).",
                               "Pass two folders written by `vlarl eval --out DIR`.")
        folders.append((json.loads((d / CARD).read_text()), unique_episodes(read_episodes(d))))
    (card_a, eps_a), (card_b, eps_b) = folders
    common = sorted(set(eps_a) & set(eps_b), key=lambda k: (expand_suite("libero_130").index(k[0]), k[1], k[2]))
    if not common:
        raise ResultsError(f"{a_dir} and {b_dir} have no episode in common.",
                           "Evaluate both checkpoints on the same suite, tasks and trials.")
    rows: list[DiffRow] = []

    def row(level: str, suite: str, task: int | None, ks: list[tuple[str, int, int]]) -> DiffRow:
        ka, kb = sum(eps_a[k].success for k in ks), sum(eps_b[k].success for k in ks)
        d, lo, hi = newcombe_interval(ka, len(ks), kb, len(ks))
        return DiffRow(level, suite, task, len(ks), ka / len(ks), len(ks), kb / len(ks), d, lo, hi)

    suites = list(dict.fromkeys(k[0] for k in common))
    for s in suites:
        for t in dict.fromkeys(k[1] for k in common if k[0] == s):
            rows.append(row("task", s, t, [k for k in common if k[0] == s and k[1] == t]))
    for s in suites:
        rows.append(row("suite", s, None, [k for k in common if k[0] == s]))
    rows.append(row("overall", "+".join(suites), None, common))
    diffs = [c for c in card_conflicts(card_a, card_b) if c != "checkpoint.sha256"]
    result = Comparison(Path(a_dir), Path(b_dir), rows, diffs)
    if show:
        print_comparison(result)
    return result


def print_comparison(cmp: Comparison, console: Any = None) -> None:
    from rich.table import Table

    console = console or _console()
    table = Table(title=f"B - A   (A = {cmp.a}, B = {cmp.b})")
    for col in ("suite", "task", "n", "A", "B", "B - A", "95% CI (Newcombe)", "significant"):
        table.add_column(col, justify="left" if col == "suite" else "right")
    for r in cmp.rows:
        table.add_row(r.suite if r.level != "overall" else "ALL", "" if r.task is None else str(r.task), str(r.n_a),
                      f"{r.rate_a:.1%}", f"{r.rate_b:.1%}", f"{r.difference:+.1%}",
                      f"[{r.ci95_low:+.1%}, {r.ci95_high:+.1%}]",
                      ("[green]yes[/]" if r.difference > 0 else "[red]yes[/]") if r.significant else "no",
                      style="bold" if r.level != "task" else None)
    console.print(table)
    console.print(cmp.method, highlight=False)
    if cmp.card_differences:
        console.print(f"[yellow]warning:[/] the two evaluations differ in {', '.join(cmp.card_differences)}; "
                      "their rates are not directly comparable.", highlight=False)
