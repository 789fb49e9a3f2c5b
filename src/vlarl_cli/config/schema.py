"""The run configuration: pydantic models for every section the RLinf recipes use.

Field names follow RLinf's embodied recipes (``examples/embodiment/config/*.yaml``) so that those files
load as published. Every model forbids unknown keys; RLinf keys that vlarl accepts but does not use are
listed per section in ``rlinf_ignored`` and reported once by the loader (``vlarl_cli.config.loading``).
Cross-field rules live in validators whose messages state the rule and the values. Derived values are
properties, never written back.
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from vlarl_cli import algorithm_types, model_types

COMPONENTS = ("env", "rollout", "actor")
MODEL_TYPES = tuple(model_types.MODEL_TYPES)  # the vocabulary lives in model_types.py
ADV_TYPES = tuple(algorithm_types.ADVANTAGE_TYPES)  # ... and this one in algorithm_types.py
POLICY_LOSSES = tuple(algorithm_types.POLICY_LOSSES)
NOISE_METHODS = ("ode", "flow_sde", "flow_cps", "flow_noise")
# RLinf and its docs also call flow_noise "reinflow" (arXiv 2505.22094).
_NOISE_ALIASES = {"reinflow": "flow_noise", "flow-sde": "flow_sde", "flow-noise": "flow_noise"}
#: RLinf's nested-block keys whose flat field has another name (the rest share the name)
_NESTED_TO_FLAT = {"num_steps": "denoising_steps", "use_vlm_value": "value_after_vlm"}


#: the largest seed: numpy's legacy generator and many simulators take 32-bit seeds, and vlarl adds rank and
#: episode offsets to the configured one (2^31 - 1 leaves room for them)
SEED_MAX = 2**31 - 1


class Section(BaseModel):
    """Base for every config section: frozen, unknown keys rejected."""

    # allow_inf_nan=False: every float is finite (lr=inf would skip every step, a NaN compares false)
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)
    #: RLinf keys accepted and ignored in this section (reported once by the loader)
    rlinf_ignored: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML's ``true`` / ``false`` is not a number: pydantic's lax mode would read ``seed: true`` as 1."""
        if info.field_name and _boolean_for_a_number(cls.model_fields[info.field_name].annotation, value):
            what = f"{str(value).lower()} is a boolean" if isinstance(value, bool) else "an entry is true / false, a boolean"
            raise ValueError(f"{what}, and this setting takes a number: write the number")
        return value


def _boolean_for_a_number(annotation: Any, value: Any) -> bool:
    """Whether ``value`` is, or holds, a bool where ``annotation`` takes an int or a float and not a bool
    (``int``, ``float | None``, ``str | int``; the values of a ``dict[str, str | int]``, the items of a list)."""
    parts = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    if isinstance(value, bool):
        return bool not in parts and any(part in (int, float) for part in parts)
    for part in parts:
        args = get_args(part)
        if isinstance(value, dict) and get_origin(part) is dict and len(args) == 2:
            return any(_boolean_for_a_number(args[1], item) for item in value.values())
        if isinstance(value, list | tuple) and get_origin(part) in (list, tuple) and args:
            return any(_boolean_for_a_number(args[0], item) for item in value)
    return False


# --------------------------------------------------------------------------------------------------
# cluster


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+))?\s*$")


def parse_device_set(spec: str | int, world_size: int) -> list[int]:
    """Parse a placement value: ``all``, ``3``, ``0-3``, ``0-1,4,6-7`` -> sorted rank list."""
    if isinstance(spec, int):
        ranks = [spec]
    elif spec.strip() == "all":
        return list(range(world_size))
    else:
        ranks = []
        for part in spec.split(","):
            m = _RANGE.match(part)
            if not m:
                raise ValueError(f'cannot parse device set "{spec}": use "all", "N", "A-B" or a comma list')
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) is not None else lo
            if hi < lo:
                raise ValueError(f'range "{part.strip()}" in "{spec}" runs backwards')
            if hi >= world_size:  # before the range is built: "0-4000000000" must not fill the memory
                ranks.append(hi)
                break
            ranks.extend(range(lo, hi + 1))
    bad = [r for r in ranks if r >= world_size]
    if bad:
        raise ValueError(f'device set "{spec}" names device(s) {bad} but only {world_size} exist '
                         f"(devices 0-{world_size - 1})")
    return sorted(set(ranks))


class CpuBudgetConfig(Section):
    """Overrides of the CPU budget (``distributed/cpu_budget.py``); null = decided from the machine."""

    cores: int | None = Field(None, ge=1, description="CPU cores this rank may use (null: the affinity mask, "
                              "capped by the container's cgroup CPU quota, divided by the ranks on the node).")
    env_workers: int | None = Field(None, ge=1, description="Most simulator worker processes per env rank when "
                                    "env.*.num_workers is null (null: one per core; on GPU nodes one core is "
                                    "kept for the process that drives the GPU).")
    inference_threads: int | None = Field(None, ge=1, description="torch threads of the rollout / eval "
                                          "inference (null: the cores the env workers leave, at least 1; 1 when "
                                          "the policy runs on a GPU).")
    trainer_threads: int | None = Field(None, ge=1, description="torch threads of the actor update (null: every "
                                        "core on CPU; 2 on a GPU unless fsdp_config.cpu_offload).")


class ClusterConfig(Section):
    num_nodes: int = Field(1, ge=1, description="Number of nodes (machines) in the job.")
    component_placement: dict[str, str | int] = Field(
        default_factory=lambda: dict[str, str | int]({"env,rollout,actor": "all"}),
        description='Devices of each component: keys are component names (env, rollout, actor) or '
        'comma-joined names; values are "all", "N", "A-B" or comma lists of those.',
    )
    cpu_budget: CpuBudgetConfig = Field(default_factory=CpuBudgetConfig, description="Who uses this rank's CPU "
                                        "cores: env workers, inference threads, trainer threads (printed in "
                                        "the run plan and --dry-run).")

    @field_validator("component_placement")
    @classmethod
    def _known_components(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        seen: set[str] = set()
        for key in value:
            for name in (n.strip() for n in key.split(",")):
                if name not in COMPONENTS:
                    from vlarl_cli.errors import did_you_mean

                    raise ValueError(f'unknown component "{name}" in placement key "{key}"; '
                                     f"components are {', '.join(COMPONENTS)}.{did_you_mean(name, COMPONENTS)}")
                if name in seen:
                    raise ValueError(f'component "{name}" is placed twice')
                seen.add(name)
        missing = [c for c in COMPONENTS if c not in seen]
        if missing:
            raise ValueError(f"component_placement does not place {missing}; every component needs devices")
        for spec in value.values():
            if not (isinstance(spec, str) and spec.strip() == "all"):  # ("all" would list 2^20 ranks for nothing)
                parse_device_set(spec, 1 << 20)  # syntax check only; ranges are checked against the world later
        return value

    def placement(self, world_size: int) -> dict[str, list[int]]:
        """Ranks of each component for a job of ``world_size`` processes (one per device)."""
        out: dict[str, list[int]] = {}
        for key, spec in self.component_placement.items():
            ranks = parse_device_set(spec, world_size)
            for name in (n.strip() for n in key.split(",")):
                out[name] = ranks
        return out


# --------------------------------------------------------------------------------------------------
# runner


class LoggerConfig(Section):
    log_path: str = Field("runs", description="Folder for logs, checkpoints and videos of this run.")
    project_name: str = Field("vlarl", description="Project name for W&B / SwanLab.")
    experiment_name: str = Field("default", description="Run name shown by W&B / SwanLab.")
    logger_backends: list[Literal["tensorboard", "wandb", "swanlab"]] = Field(
        default_factory=list,
        description="Metric sinks besides the always-written metrics.jsonl: tensorboard, wandb, swanlab.",
    )

    @field_validator("log_path")
    @classmethod
    def _named_folder(cls, value: str) -> str:
        # '' is the current directory to pathlib: a run would write its files (config.yaml, checkpoints/)
        # among the user's own
        if not value.strip() or Path(value) == Path("."):
            raise ValueError("log_path must name a folder for the run (an empty value or '.' would write the run into "
                             "the current directory); e.g. runner.logger.log_path=runs/my_run")
        if Path(value) == Path(Path(value).anchor):
            raise ValueError(f"log_path {value!r} is the file system's root; a run writes config.yaml, checkpoints/ "
                             "and logs/ into its folder: e.g. runner.logger.log_path=runs/my_run")
        if "\x00" in value:
            raise ValueError("log_path holds a NUL character, which no file name can")
        return value


class RunnerConfig(Section):
    task_type: Literal["embodied"] = Field("embodied", description="Only embodied RL is supported.")
    logger: LoggerConfig = Field(default_factory=LoggerConfig, description="Logging destinations.")
    max_epochs: int = Field(1000, ge=1, description="Number of RL iterations (collect + update).")
    max_steps: int = Field(-1, ge=-1, description="Stop after this many optimizer steps (-1: no limit).")
    only_eval: bool = Field(False, description="Run evaluation only, no training.")
    val_check_interval: int = Field(-1, ge=-1, description="Evaluate every N iterations (-1: never).")
    val_before_train: bool = Field(False, description="Also evaluate before the first iteration (verl's "
                                   "trainer.val_before_train); the run then ends by printing the evaluation "
                                   "success before and after training. Not on a resumed run.")
    save_interval: int = Field(-1, ge=-1, description="Save a checkpoint every N iterations (-1: only at the end).")
    resume_dir: str | None = Field(None, description="Checkpoint folder to resume training from.")
    ckpt_path: str | None = Field(None, description="Weights to load after the model is built (eval).")


# --------------------------------------------------------------------------------------------------
# algorithm


class AlgorithmConfig(Section):
    # bootstrap_type: RLinf's gamma * V(final obs) at auto-reset ends, printed as a deviation (config/unsupported.py)
    rlinf_ignored: ClassVar[frozenset[str]] = frozenset({"bootstrap_type"})

    adv_type: str = Field("gae", description=f"Advantage estimator: {', '.join(ADV_TYPES)} (what each needs: "
                          "vlarl_cli/algorithm_types.py).")
    policy_loss: str = Field("vanilla", description=f"Policy loss: {', '.join(POLICY_LOSSES)} (vanilla: clipped PPO "
                             "with dual clip; gspo: the ratio of whole trajectories, arXiv 2507.18071; verl's "
                             "policy_loss.loss_mode).")
    loss_type: Literal["actor_critic", "actor"] = Field(
        "actor_critic", description="actor_critic: PPO with a value loss; actor: policy loss only (GRPO).")
    loss_agg_func: str = Field("token-mean", description="How per-unit losses are averaged: "
                               f"{', '.join(algorithm_types.LOSS_AGGS)} (algorithms/losses.py).")
    reward_type: Literal["chunk_level", "action_level"] = Field(
        "chunk_level", description="chunk_level: one reward per chunk (sum of its steps); action_level: per step.")
    logprob_type: Literal["token_level", "action_level", "chunk_level"] = Field(
        "chunk_level", description="Granularity of the PPO ratio: per element, per env step, or per chunk.")
    entropy_type: Literal["token_level", "action_level", "chunk_level"] = Field(
        "chunk_level", description="Granularity of the entropy term.")
    normalize_advantages: bool = Field(True, description="Normalise advantages: gae, rloo, reinpp, raw over the "
                                       "whole batch's valid entries; grpo by each group's std; drgrpo never.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor per chunk step.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    clip_ratio_low: float = Field(0.2, gt=0, lt=1, description="PPO clip below: ratio >= 1 - clip_ratio_low.")
    clip_ratio_high: float = Field(0.2, gt=0, description="PPO clip above: ratio <= 1 + clip_ratio_high.")
    clip_ratio_c: float | None = Field(3.0, gt=1, description="Dual-clip constant for negative advantages (>1; null: off).")
    clip_log_ratio_min: float = Field(-20.0, description="Lower clamp of log(ratio) before exp.")
    clip_log_ratio_max: float = Field(20.0, description="Upper clamp of log(ratio) before exp.")
    value_clip: float | None = Field(0.2, gt=0, description="Value clipping range around the old value (null: off).")
    huber_delta: float = Field(10.0, gt=0, description="Huber delta of the value loss.")
    entropy_bonus: float = Field(0.0, ge=0, description="Weight of the entropy bonus.")
    kl_beta: float = Field(0.0, ge=0, description="Weight of the KL penalty to the frozen reference policy.")
    kl_penalty: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"] = Field(
        "kl", description="KL estimator: kl/k1, abs, mse/k2, low_var_kl/k3.")
    group_size: int = Field(1, ge=1, description="Group size of the group estimators (grpo, drgrpo, rloo): "
                            "consecutive envs sharing one init state.")
    reward_coef: float = Field(1.0, description="Scale of the success reward (also read by env.*.reward_coef).")
    filter_rewards: bool = Field(False, description="Group estimators: drop groups whose mean score is outside "
                                 "the bounds.")
    rewards_lower_bound: float = Field(0.1, description="filter_rewards lower bound on the group mean score.")
    rewards_upper_bound: float = Field(0.9, description="filter_rewards upper bound on the group mean score.")
    dynamic_sampling: bool = Field(False, description="Group estimators: DAPO's dynamic sampling (arXiv "
                                   "2503.14476): keep collecting until every env slot of the batch holds a group "
                                   "whose scores differ (non-zero advantages); all-equal groups are dropped.")
    max_sampling_draws: int = Field(4, ge=1, description="dynamic_sampling: at most this many collections per "
                                    "rollout epoch (DAPO's max_num_gen_batches); then the slots still empty are "
                                    "filled with dropped groups, masked out of the loss, and a warning says how many.")
    update_epoch: int = Field(4, ge=1, description="Passes over the rollout per iteration.")
    rollout_epoch: int | None = Field(
        None, ge=1, description="Rollout epochs per iteration (RLinf keeps this in env.train.rollout_epoch; "
        "set here only to override it).")

    @field_validator("loss_type", mode="before")
    @classmethod
    def _known_loss(cls, value: Any) -> Any:
        if value not in ("actor_critic", "actor"):
            raise ValueError(f'loss_type "{value}" is not a loss vlarl supports (RLinf\'s embodied_sac and '
                             "decoupled_actor_critic are not implemented); supported: actor_critic (PPO with a value "
                             "loss) and actor (policy loss only, e.g. GRPO)")
        return value

    @field_validator("adv_type")
    @classmethod
    def _known_adv(cls, value: str) -> str:
        known = tuple(algorithm_types.ADVANTAGE_TYPES)  # read at validation: a row added later counts
        if value not in known:
            from vlarl_cli.errors import did_you_mean

            raise ValueError(f'adv_type "{value}" is not an advantage estimator vlarl supports (RLinf\'s '
                             f'off-policy embodied_sac is not implemented); supported: {", ".join(known)}.'
                             f"{did_you_mean(value, known)}")
        return value

    @field_validator("policy_loss", "loss_agg_func")
    @classmethod
    def _known_loss_name(cls, value: str, info: ValidationInfo) -> str:
        known = tuple(algorithm_types.POLICY_LOSSES) if info.field_name == "policy_loss" else algorithm_types.LOSS_AGGS
        if value not in known:
            from vlarl_cli.errors import did_you_mean

            raise ValueError(f'{info.field_name} "{value}" is not one vlarl supports; supported: '
                             f'{", ".join(known)}.{did_you_mean(value, known)}')
        return value

    @property
    def kind(self) -> algorithm_types.AdvantageType:
        """What the estimator needs (its row in ``algorithm_types.ADVANTAGE_TYPES``)."""
        return algorithm_types.ADVANTAGE_TYPES[self.adv_type]

    @model_validator(mode="after")
    def _rules(self) -> AlgorithmConfig:
        if self.kind.groups and self.group_size < 2:
            raise ValueError(f"adv_type {self.adv_type} compares episodes within a group, so it needs group_size > 1 "
                             f"(got group_size={self.group_size})")
        for flag in ("filter_rewards", "dynamic_sampling"):
            if getattr(self, flag) and not self.kind.groups:
                groups = ", ".join(k for k, v in algorithm_types.ADVANTAGE_TYPES.items() if v.groups)
                raise ValueError(f"algorithm.{flag} drops or redraws groups of episodes; adv_type {self.adv_type} "
                                 f"has none; use a group estimator ({groups}) or set {flag} false")
        if self.clip_ratio_c is not None and not algorithm_types.POLICY_LOSSES[self.policy_loss].dual_clip:
            raise ValueError(f"policy_loss {self.policy_loss} has no dual clip, but clip_ratio_c is "
                             f"{self.clip_ratio_c}; set algorithm.clip_ratio_c null")
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1:
            raise ValueError(f"clip_ratio_c must be > 1 for the dual clip (got {self.clip_ratio_c}); "
                             "set null to disable it")
        if self.filter_rewards and self.rewards_lower_bound >= self.rewards_upper_bound:
            raise ValueError(f"filter_rewards needs rewards_lower_bound < rewards_upper_bound "
                             f"(got {self.rewards_lower_bound} >= {self.rewards_upper_bound})")
        return self


# --------------------------------------------------------------------------------------------------
# env


class VideoConfig(Section):
    save_video: bool = Field(False, description="Record episodes to MP4.")
    info_on_video: bool = Field(True, description="Overlay task, step, action and success on the frames.")
    video_base_dir: str = Field("runs/video", description="Folder the videos are written to.")
    fps: int = Field(20, ge=1, description="Frames per second of the written videos (LIBERO runs at 20 Hz).")
    max_videos: int = Field(4, ge=0, description="At most this many episodes are recorded per iteration.")


class InitParams(Section):
    # RLinf's ManiSkill keys (examples/embodiment/config/env/maniskill_*.yaml) that vlarl does not pass on;
    # those whose value changes what runs are printed as deviations (config/unsupported.py DEVIATIONS).
    rlinf_ignored: ClassVar[frozenset[str]] = frozenset(
        {"camera_names", "control_freq", "num_envs", "obs_mode", "sim_config", "max_episode_steps",
         "sensor_configs", "render_mode", "obj_set", "use_multiple_plates", "reward_mode", "use_sparse_reward"})
    camera_heights: int = Field(256, ge=1, description="Rendered camera height in pixels.")
    camera_widths: int = Field(256, ge=1, description="Rendered camera width in pixels.")
    # ManiSkill (env_type maniskill): RLinf's env/train/PickCube.yaml keys under init_params.
    id: str = Field("PickCube-v1", description="ManiSkill task id (env_type maniskill): a built-in task, or one "
                    "of RLinf's digital-twin ids (accepted in configs, refused when the env is created).")
    control_mode: str = Field("pd_ee_delta_pose", description="ManiSkill controller (only pd_ee_delta_pose; "
                              "RLinf's None, the task's default controller, is read as pd_ee_delta_pose and "
                              "printed as a deviation).")
    sim_backend: Literal["cpu", "gpu"] = Field(
        "cpu", description="ManiSkill simulation backend: cpu (one single-env scene per env, stepped in turn) or "
        "gpu (physx_cuda: all envs in one batched scene; needs a CUDA device, refused on a CPU-only machine).")

    @field_validator("control_mode", mode="before")
    @classmethod
    def _rlinf_default_controller(cls, value: Any) -> Any:
        # RLinf writes `control_mode: None` (a string) for "the task's default"; the loader prints it
        return "pd_ee_delta_pose" if value is None or value == "None" else value


class EnvSplitConfig(Section):
    """One of ``env.train`` / ``env.eval``."""

    rlinf_ignored: ClassVar[frozenset[str]] = frozenset(
        {"group_name", "wrap_obs_mode", "enable_offload", "policy_setup", "reward_mode", "use_full_state"})

    env_type: str = Field(
        "libero", description="Simulator (envs/registry.py): libero, libero_plus (LIBERO-Plus in "
        "its own environment, `vlarl setup-sim libero_plus`), libero_pro (LIBERO-PRO suites, the _object ones "
        "included, in LIBERO-PRO's environment, `vlarl setup-sim libero_pro`), maniskill (built-in tasks), the CPU toy_reach "
        "task, or one registered from outside.")
    task_suite_name: str = Field("libero_spatial", description="LIBERO suite: libero_spatial, libero_object, "
                                 "libero_goal, libero_10, libero_90, libero_130, a LIBERO-PRO suite "
                                 "(libero_goal_swap ...: lan, swap, task of the four 10-task suites; _object with python: "
                                 "libero_pro), or with "
                                 "env_type libero_plus a LIBERO-Plus suite libero_plus_<spatial|object|goal|10>_"
                                 "<camera|robot|language|noise> (light, background: once `vlarl download "
                                 "Sylvest/LIBERO-plus` installed its assets.zip; layout, one init state per task: "
                                 "evaluation only).")
    libero_variant: Literal["standard", "pro", "plus"] = Field(
        "standard", description="RLinf's key (or its LIBERO_TYPE): pro runs task_suite_name's LIBERO-PRO suite "
        "named by perturbation_suffix, with PRO's own init states (RLinf keeps the base suite's); plus (RLinf's "
        "mix of LIBERO-Plus files into the base suite) is refused, naming env_type libero_plus instead.")
    perturbation_suffix: str | None = Field(
        None, description="RLinf's key: with libero_variant pro, the perturbation (lan, swap or task; one per split).")
    task_ids: list[int] | None = Field(None, description="Restrict to these task ids of the suite (vlarl).")
    protocol: Literal["rlinf", "standard"] = Field(
        "rlinf", description="Episode protocol: rlinf (240/240/320/512/512 steps, 15 settle) or standard "
        "(220/280/300/520/400, 10 settle).")
    settle_steps: int | None = Field(None, ge=0, description="No-op steps after reset (null: the protocol's).")
    total_num_envs: int | None = Field(None, ge=1, description="Parallel environments (all ranks together).")
    num_workers: int | None = Field(None, ge=1, description="Simulator worker processes per env rank "
                                    "(null: one per CPU core, at most one per env).")
    rollout_epoch: int = Field(1, ge=1, description="Rollout epochs collected per iteration.")
    auto_reset: bool = Field(False, description="Reset an env as soon as its episode ends; under adv_type gae a "
                             "time-limit cut then adds gamma * V(final observation) to its step's reward (RLinf).")
    ignore_terminations: bool = Field(False, description="Keep stepping after success until max_episode_steps.")
    max_episode_steps: int = Field(240, ge=1, description="Episode length limit (truncation).")
    max_steps_per_rollout_epoch: int = Field(240, ge=1, description="Env steps collected per rollout epoch.")
    use_rel_reward: bool = Field(True, description="Reward the change of success (r_t - r_{t-1}) instead of the level.")
    use_step_penalty: bool = Field(False, description="Subtract step_penalty every step.")
    step_penalty: float = Field(0.0, ge=0, description="Penalty per step when use_step_penalty is on.")
    reward_coef: float = Field(1.0, description="Scale of the success reward.")
    reward_mode: Literal["only_success", "raw"] = Field(
        "only_success", description="ManiSkill (RLinf's key): only_success = success reward (as LIBERO); raw = "
        "the task's own normalized dense reward in [0, 1] (ManiSkill's reward_mode normalized_dense).")
    reset_gripper_open: bool = Field(True, description="Open the gripper during the settle steps.")
    hard_reset: bool = Field(False, description="Rebuild the simulator model on every reset (+~2.5 s). The "
                             "default soft reset gives bit-identical episodes (tests/envs, tests/training).")
    render_quality: Literal["exact", "fast", "fast_noaa"] = Field(
        "exact", description="LIBERO camera rendering: exact (MuJoCo's defaults, as published protocols), fast "
        "(reflection pass off: ~1.75x faster per frame on CPU, 0.93/255 mean pixel difference) or fast_noaa "
        "(also multisampling off: ~3.1x, 2.8/255, edges alias; benchmarks/render_quality.py). Not exact: printed as a deviation in the run plan "
        "and on every evaluation card.")
    python: str | None = Field(None, description="Python interpreter the simulator's worker processes run in: a "
                               "path to another environment's bin/python, or a name built by `vlarl setup-sim NAME`; "
                               "null: this interpreter. For simulators with worker processes (libero).")
    is_eval: bool = Field(False, description="This split is used for evaluation.")
    seed: int = Field(0, ge=0, le=SEED_MAX, description="Seed of the env and of the init-state assignment.")
    group_size: int = Field(1, ge=1, description="Consecutive envs sharing one init state (GRPO).")
    use_fixed_reset_state_ids: bool = Field(True, description="Start from LIBERO's fixed init states.")
    use_ordered_reset_state_ids: bool = Field(False, description="Assign init states in order instead of randomly.")
    specific_reset_id: int | None = Field(None, ge=0, description="Always use this flat reset-state id.")
    video_cfg: VideoConfig = Field(default_factory=VideoConfig, description="Video recording.")
    init_params: InitParams = Field(default_factory=InitParams, description="Simulator construction parameters.")

    @property
    def resolution(self) -> int:
        return self.init_params.camera_heights

    @field_validator("task_ids")
    @classmethod
    def _names_a_task(cls, value: list[int] | None) -> list[int] | None:
        # every consumer reads an empty list as "all tasks": [] would silently train on the whole suite
        if value is not None and not value:
            raise ValueError("task_ids [] names no task; leave task_ids out (null) for every task of the suite, or "
                             "list some, e.g. task_ids=[0,1]")
        return value

    @field_validator("env_type", mode="before")
    @classmethod
    def _supported_env(cls, value: Any) -> Any:
        from vlarl_cli.envs import registry

        table = registry.simulators()
        if value not in table:
            runs = "; ".join(s.summary for s in table.values())
            raise ValueError(f'env_type "{value}" is a simulator vlarl does not run (RLinf recipes also cover '
                             f"RoboTwin, CALVIN, BEHAVIOR, IsaacLab, real robots, ...); vlarl runs {runs}")
        return value

    @model_validator(mode="after")
    def _rules(self) -> EnvSplitConfig:
        from vlarl_cli.envs import registry

        simulator = registry.get(self.env_type)
        if self.init_params.camera_heights != self.init_params.camera_widths:
            raise ValueError("camera_heights must equal camera_widths (square images), got "
                             f"{self.init_params.camera_heights} x {self.init_params.camera_widths}")
        if self.python is not None and not simulator.in_workers:
            raise ValueError(f"python {self.python}: {self.env_type} steps its envs inside the trainer's process, so "
                             "it has no workers to run in another interpreter; set python: null")
        if self.python is not None:
            from vlarl_cli.envs.interpreter import resolve

            if not resolve(self.python).is_file():
                raise ValueError(f"python {self.python}: {resolve(self.python)} does not exist, so the {self.env_type} "
                                 f"workers have no interpreter to run in; build the simulator's own environment with "
                                 f"`vlarl setup-sim {self.env_type}` and set python: {self.env_type}, or set python: null")
        if simulator.check_split is not None:  # the simulator's own load-time checks (LIBERO suites, tasks ...)
            simulator.call("check_split", self)
        if self.reward_mode not in simulator.reward_modes:
            others = [s.name for s in registry.simulators().values() if self.reward_mode in s.reward_modes]
            raise ValueError(f'reward_mode "{self.reward_mode}" exists for env_type {", ".join(others)} only; '
                             f"{self.env_type} takes reward_mode {', '.join(simulator.reward_modes)}")
        if self.total_num_envs is not None and self.total_num_envs % self.group_size:
            raise ValueError(f"total_num_envs must be a multiple of group_size "
                             f"(got {self.total_num_envs} envs, group_size {self.group_size})")
        return self


class EnvConfig(Section):
    rlinf_ignored: ClassVar[frozenset[str]] = frozenset({"group_name", "channel", "enable_offload"})
    train: EnvSplitConfig = Field(default_factory=EnvSplitConfig, description="Training environments.")
    eval: EnvSplitConfig = Field(default_factory=lambda: EnvSplitConfig(is_eval=True),
                                 description="Evaluation environments.")


# --------------------------------------------------------------------------------------------------
# rollout


class SamplingParams(Section):
    do_sample: bool = Field(True, description="Sample actions (False: deterministic).")
    temperature_train: float = Field(1.0, gt=0, description="Token-policy temperature for training rollouts.")
    temperature_eval: float = Field(1.0, gt=0, description="Token-policy temperature for evaluation.")
    top_k: int = Field(-1, description="Top-k for token policies (-1: off).")
    top_p: float = Field(1.0, gt=0, le=1, description="Top-p for token policies.")
    repetition_penalty: float = Field(1.0, description="Accepted for RLinf compatibility; must be 1.0.")


class RolloutConfig(Section):
    rlinf_ignored: ClassVar[frozenset[str]] = frozenset(
        {"group_name", "generation_backend", "backend", "recompute_logprobs", "unnorm_key", "model",
         "enable_torch_compile", "enable_cuda_graph", "gpu_memory_utilization", "enforce_eager"})
    pipeline_stage_num: int = Field(1, ge=1, description="Split the envs into this many stages so env "
                                    "stepping of one stage overlaps inference of another.")
    enable_offload: bool = Field(False, description="Move rollout weights off the device while the actor trains.")
    sampling_params: SamplingParams = Field(default_factory=SamplingParams, description="Sampling settings.")


# --------------------------------------------------------------------------------------------------
# actor


class OpenpiOptions(Section):
    """RLinf's ``actor.model.openpi`` block; values here override the flat model fields."""

    rlinf_ignored: ClassVar[frozenset[str]] = frozenset(
        {"action_chunk", "num_images_in_input", "action_env_dim", "use_dsrl", "dsrl_state_dim",
         "dsrl_action_noise_dim", "dsrl_num_q_heads", "dsrl_agg_q", "dsrl_image_latent_dim",
         "dsrl_state_latent_dim", "dsrl_hidden_dims", "value_vlm_mode", "noise_params"})
    config_name: str | None = Field(None, description="openpi config: pi0_libero, pi05_libero, pi0_maniskill ...")
    action_horizon: int | None = Field(None, ge=1, description="Actions the model predicts per chunk (null: the "
                                       "checkpoint's or the variant's; RLinf's ManiSkill recipes use 8).")
    noise_level: float | None = Field(None, description="See actor.model.noise_level.")
    noise_method: str | None = Field(None, description="See actor.model.noise_method.")
    num_steps: int | None = Field(None, description="See actor.model.denoising_steps.")
    train_expert_only: bool | None = Field(None, description="See actor.model.train_expert_only.")
    add_value_head: bool | None = Field(None, description="See actor.model.add_value_head.")
    value_after_vlm: bool | None = Field(None, description="See actor.model.value_after_vlm.")
    detach_critic_input: bool | None = Field(None, description="See actor.model.detach_critic_input.")
    joint_logprob: bool | None = Field(None, description="See actor.model.joint_logprob.")


class RlHeadOptions(Section):
    """RLinf's ``actor.model.rl_head_config`` block (GR00T); values here override the flat model fields."""

    rlinf_ignored: ClassVar[frozenset[str]] = frozenset(
        {"ignore_last", "safe_get_logprob", "noise_anneal", "noise_params", "chunk_critic_input"})
    joint_logprob: bool | None = Field(None, description="See actor.model.joint_logprob.")
    noise_method: str | None = Field(None, description="See actor.model.noise_method.")
    noise_level: float | None = Field(None, description="See actor.model.noise_level.")
    add_value_head: bool | None = Field(None, description="See actor.model.add_value_head.")
    detach_critic_input: bool | None = Field(None, description="See actor.model.detach_critic_input.")
    disable_dropout: bool | None = Field(None, description="See actor.model.disable_dropout.")
    action_noise_scale: float | None = Field(None, description="See actor.model.action_noise_scale.")
    padding_value: int | None = Field(None, ge=1, description="Fixed padded prompt length; GR00T checks it "
                                      "against the model's own (570 in the full presets) and refuses another.")
    use_vlm_value: bool | None = Field(None, description="Critic reads only the mean VL token (RLinf's name "
                                       "for actor.model.value_after_vlm).")
    value_vlm_mode: str | None = Field(None, description="Critic pooling of the VL tokens: only mean_token "
                                       "(the mean of all VL tokens) is implemented; others are refused.")


def _family_default(model_type: str, name: str) -> Any:
    """What a null flat key means for ``model_type``'s family. ``train_expert_only``: true (expert only) for
    every family but GR00T, whose null keeps the checkpoint config's trainable set (Isaac-GR00T / RLinf)."""
    if name == "train_expert_only" and model_types.MODEL_TYPES[model_type].family != "gr00t":
        return True
    return None


class ModelConfig(Section):
    rlinf_ignored: ClassVar[frozenset[str]] = frozenset(
        {"trust_remote_code", "policy_setup", "obs_converter_type", "no_split_modules", "model_name",
         "attn_implementation", "low_cpu_mem_usage", "sharding_strategy"})

    model_type: str = Field("openpi", description=f"Policy family: {', '.join(MODEL_TYPES)}.")
    model_path: str | None = Field(None, description="Checkpoint folder (or hub id after `vlarl download`).")
    preset: Literal["tiny", "small", "full"] | None = Field(
        None, description="Build the family's preset instead of loading weights: tiny (CPU tests), small "
        "(pi0 only: a mid-size model for benchmarks) or full (real size). With model_path set, it is ignored.")
    precision: str | None = Field(None, description="bf16, fp16 or fp32 (null: the checkpoint's; CPU uses fp32).")
    action_dim: int = Field(7, ge=1, description="Env action dimensionality.")
    obs_dim: int | None = Field(None, ge=1, description="Toy (MLP) policies: size of the state vector they read "
                                "(RLinf's mlp_policy key; null: 4, the toy reach task's; 42 for ManiSkill "
                                "PickCube-v1 state observations).")
    num_action_chunks: int = Field(5, ge=1, description="Env steps executed per sampled chunk.")
    denoising_steps: int | None = Field(None, ge=1, description="Flow-matching denoising steps (K).")
    num_steps: int | None = Field(None, ge=1, description="RLinf's name for denoising_steps (openpi).")
    noise_method: str = Field("flow_sde", description=f"Stochastic denoising: {', '.join(NOISE_METHODS)}.")
    noise_level: float = Field(0.5, ge=0, description="flow_sde / flow_cps noise level a.")
    joint_logprob: bool = Field(False, description="Log-prob over the whole denoising chain instead of one step.")
    action_noise_scale: float = Field(0.0, ge=0, description="Extra N(0, s^2) noise on executed actions "
                                      "outside the log-prob (GR00T N1.6 exploration).")
    add_value_head: bool = Field(True, description="Attach a value head (needed by PPO with GAE).")
    value_after_vlm: bool | None = Field(None, description="pi0.5: value head reads the VLM prefix (True) "
                                         "or the action expert (False).")
    detach_critic_input: bool | None = Field(None, description="Stop value gradients into the backbone (pi0, OpenVLA-OFT; GR00T never detaches, as RLinf's GR00T code, and says so when this is true).")
    is_lora: bool = Field(False, description="Train LoRA adapters on the VLM.")
    lora_rank: int = Field(32, ge=1, description="LoRA rank.")
    train_expert_only: bool | None = Field(
        None, description="Train the action expert / head only (VLM frozen). null: the family's default: true for "
        "pi0; for GR00T the checkpoint config's tune_* flags, as Isaac-GR00T and RLinf (N1.6: the top 4 LLM layers "
        "and the whole head; true there is a printed deviation from RLinf).")
    disable_dropout: bool = Field(True, description="Replace dropout by identity so log-probs are exact.")
    embodiment_tag: str | None = Field(None, description="GR00T embodiment tag, e.g. libero_franka.")
    tokenizer_path: str | None = Field(None, description="Tokenizer file/folder for real checkpoints when the "
                                       "checkpoint folder has none (tiny presets use a built-in byte tokenizer).")
    norm_stats_path: str | None = Field(None, description="pi0 / pi0.5: the norm_stats.json to use when the "
                                        "checkpoint folder has none (a real checkpoint without any is refused).")
    sft_loss_reduction: Literal["executed", "openpi"] | None = Field(
        None, description="pi0 / pi0.5 SFT loss: executed (default: mean over the executed chunk and real action "
        "dims) or openpi (mean over all H x 32 entries, comparable with openpi's logs).")
    asset_id: str | None = Field(None, description="pi0 / pi0.5: asset id under which the checkpoint keeps its "
                                 "norm stats (assets/<id>/ or <id>/; default physical-intelligence/libero).")
    unnorm_key: str | None = Field(None, description="Key of the action statistics to un-normalise with "
                                   "(OpenVLA dataset_statistics.json, e.g. libero_10_no_noops).")
    use_proprio: bool | None = Field(None, description="Feed the robot state to the policy (null: the family's "
                                     "default; OpenVLA-OFT's RL variant takes no state).")
    max_prompt_length: int | None = Field(None, ge=1, description="Prompt token budget (null: the family's).")
    center_crop: bool | None = Field(None, description="OpenVLA-OFT: centre-crop images as in augmented "
                                     "training (null: the family's default, off).")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward (also turned on "
                                         "by RLinf's actor.fsdp_config.gradient_checkpointing).")
    # OpenVLA-OFT keys of RLinf's model yaml (policies/openvla_oft/config.py ModelSettings says what each does)
    implement_version: str | None = Field(None, description="OpenVLA-OFT: rlinf or official (null: the "
                                          "checkpoint decides; official when it has action_head--* files).")
    num_images_in_input: int | None = Field(None, ge=1, description="OpenVLA-OFT: images per observation "
                                            "(1 third-person, 2 + wrist).")
    value_type: str | None = Field(None, description="OpenVLA-OFT and toy critics: chunk_level (one value per "
                                   "chunk) or action_level (one per action; needed by GAE with reward_type "
                                   "action_level).")
    proprio_dim: int | None = Field(None, ge=1, description="OpenVLA-OFT official: robot state size fed to the "
                                    "proprio projector (null: from the checkpoint's proprio_projector file).")
    use_film: bool | None = Field(None, description="OpenVLA-OFT FiLM conditioning: not implemented, true is refused.")
    lora_path: str | None = Field(None, description="OpenVLA-OFT: a PEFT LoRA adapter folder merged into model_path.")
    image_size: Any = Field(None, description="OpenVLA-OFT: checked against the model's input size.")
    vocab_size: int | None = Field(None, description="OpenVLA-OFT: checked against the model's text vocabulary.")
    hidden_size: int | None = Field(None, description="OpenVLA-OFT: checked against the model's width.")
    openpi: OpenpiOptions | None = Field(None, description="RLinf's openpi block (overrides flat fields).")
    rl_head_config: RlHeadOptions | None = Field(None, description="RLinf's GR00T RL head block.")

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("noise_method"), str):
            data = {**data, "noise_method": _NOISE_ALIASES.get(data["noise_method"], data["noise_method"])}
        return data

    @field_validator("model_type")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in MODEL_TYPES:
            from vlarl_cli.errors import did_you_mean

            raise ValueError(f'model_type "{value}" is not a policy vlarl supports (RLinf also has MLP / CNN / '
                             f'flow state policies and others vlarl does not); supported: {", ".join(MODEL_TYPES)}.'
                             f"{did_you_mean(value, MODEL_TYPES)}")
        return value

    # One rule for RLinf's nested blocks (``openpi:``, ``rl_head_config:``) and the flat keys: a key set in a
    # block wins (RLinf reads the block), the flat key gives the value otherwise, and a config that sets both
    # to different values is refused (_one_source). Every key follows it (setting()); the registry fills the
    # families' settings by name from it.

    def _nested_values(self) -> dict[str, tuple[str, Any]]:
        """Flat field name -> (``block.key``, value) for every key set in a nested block."""
        out: dict[str, tuple[str, Any]] = {}
        for block_name in ("openpi", "rl_head_config"):
            block = getattr(self, block_name)
            for key in sorted(block.model_fields_set) if block is not None else ():
                value = getattr(block, key)
                if value is None:
                    continue
                if key == "noise_method":
                    value = _NOISE_ALIASES.get(value, value)
                flat = _NESTED_TO_FLAT.get(key, key)
                where = f"actor.model.{block_name}.{key}"
                if flat in out and out[flat][1] != value:
                    raise ValueError(f"{out[flat][0]} is {out[flat][1]!r} but {where} is {value!r}; set it once")
                out[flat] = (where, value)
        return out

    def setting(self, name: str) -> Any:
        """The value of setting ``name`` (a flat field name, or a nested-only key such as ``config_name``):
        the nested block's when set there, else the flat field's, else the family's default for a flat key whose
        null depends on the family (None when neither exists)."""
        nested = self._nested_values()
        if name in nested:
            return nested[name][1]
        value = getattr(self, name, None)
        return _family_default(self.model_type, name) if value is None else value

    @property
    def nested_only(self) -> dict[str, Any]:
        """Keys set in a nested block that have no flat field (``config_name``, ``padding_value`` ...)."""
        return {k: v for k, (_, v) in self._nested_values().items() if k not in type(self).model_fields}

    @model_serializer(mode="wrap")
    def _dump_effective(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A dump (the run's resolved config.yaml) leaves out a flat key whose default a nested block overrides
        (the block holds the value that runs), so the dump reloads to the same config without a conflict."""
        data: dict[str, Any] = handler(self)
        for flat, (_, value) in self._nested_values().items():
            if flat in data and getattr(self, flat) != value:
                del data[flat]
        return data

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        nested = self._nested_values()
        given = self.model_fields_set
        for flat, (where, value) in nested.items():
            if flat in given and getattr(self, flat) is not None and getattr(self, flat) != value:
                raise ValueError(f"actor.model.{flat} is {getattr(self, flat)!r} but {where} is {value!r}: RLinf "
                                 f"reads the nested block, so the flat key would be ignored; set it once (in one "
                                 "place, or both to the same value)")
        if None not in (self.num_steps, self.denoising_steps) and self.num_steps != self.denoising_steps:
            raise ValueError(f"actor.model.denoising_steps is {self.denoising_steps} but actor.model.num_steps (RLinf's "
                             f"name for it) is {self.num_steps}; set it once")
        return self

    # Effective values (setting(): a nested block's value wins over the flat field)
    @property
    def effective_noise_method(self) -> str:
        return str(self.setting("noise_method"))

    @property
    def effective_noise_level(self) -> float:
        return float(self.setting("noise_level"))

    @property
    def effective_denoising_steps(self) -> int:
        for value in (self.setting("denoising_steps"), self.num_steps):
            if value is not None:
                return int(value)
        return 4

    @property
    def effective_add_value_head(self) -> bool:
        return bool(self.setting("add_value_head"))

    @property
    def effective_joint_logprob(self) -> bool:
        return bool(self.setting("joint_logprob"))

    @property
    def is_pi05(self) -> bool:
        name = self.openpi.config_name if self.openpi else None
        return self.model_type == "pi05" or (name is not None and name.startswith("pi05"))

    @model_validator(mode="after")
    def _rules(self) -> ModelConfig:
        method = self.effective_noise_method
        if method not in NOISE_METHODS:
            from vlarl_cli.errors import did_you_mean

            raise ValueError(f'unknown noise_method "{method}"; known: {", ".join(NOISE_METHODS)}.'
                             f"{did_you_mean(method, NOISE_METHODS)}")
        if self.model_path is None and self.preset is None:
            raise ValueError("actor.model needs model_path (a checkpoint folder) or preset (tiny / full)")
        if self.precision is not None and self.precision not in ("bf16", "fp16", "fp32", "bfloat16",
                                                                 "float16", "float32"):
            raise ValueError(f'unknown precision "{self.precision}"; use bf16, fp16 or fp32')
        return self


class OptimConfig(Section):
    lr: float = Field(5e-6, gt=0, description="Learning rate of the policy parameters.")
    value_lr: float = Field(1e-4, gt=0, description="Learning rate of the value head.")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="AdamW beta1.")
    adam_beta2: float = Field(0.95, ge=0, lt=1, description="AdamW beta2.")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay.")
    clip_grad: float = Field(1.0, gt=0, description="Gradient-norm clipping threshold.")
    critic_warmup_steps: int = Field(0, ge=0, description="Optimizer steps that train only the value head.")
    lr_scheduler: Literal["constant", "cosine", "linear"] = Field("constant", description="LR schedule.")
    lr_warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps of the LR schedule.")
    total_training_steps: int | None = Field(None, ge=1, description="Horizon of cosine/linear decay "
                                             "(null: max_epochs x updates per epoch).")
    min_lr_rate: float = Field(0.0, ge=0, le=1, description="Cosine/linear decay floor as a fraction of lr.")

    @property
    def betas(self) -> tuple[float, float]:
        return (self.adam_beta1, self.adam_beta2)


class MixedPrecision(Section):
    param_dtype: str | None = Field(None, description="FSDP parameter dtype (GPU only).")
    reduce_dtype: str | None = Field(None, description="FSDP gradient-reduction dtype (GPU only).")
    buffer_dtype: str | None = Field(None, description="FSDP buffer dtype (GPU only).")


class WrapPolicy(Section):
    transformer_layer_cls_to_wrap: list[str] = Field(default_factory=list,
                                                     description="Module class names sharded as units.")


class FsdpConfig(Section):
    rlinf_ignored: ClassVar[frozenset[str]] = frozenset(
        {"offload_pin_memory", "enable_gradient_accumulation", "forward_prefetch", "limit_all_gathers",
         "backward_prefetch", "use_orig_params", "use_liger_kernel", "amp_autocast", "grad_scaler"})
    strategy: Literal["fsdp", "fsdp2"] = Field("fsdp", description="Both map to FSDP2 (fully_shard).")
    sharding_strategy: Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"] = Field(
        "full_shard", description="What is sharded across the actor ranks.")
    gradient_checkpointing: bool = Field(False, description="RLinf's spelling of actor.model.gradient_checkpointing "
                                         "(the same switch: recomputation is on when either is true).")
    cpu_offload: bool = Field(False, description="Keep sharded parameters on the host.")
    reshard_after_forward: bool = Field(True, description="Free gathered parameters after forward.")
    mixed_precision: MixedPrecision = Field(default_factory=MixedPrecision, description="FSDP dtypes.")
    wrap_policy: WrapPolicy = Field(default_factory=WrapPolicy, description="Sharding units.")


class ActorConfig(Section):
    rlinf_ignored: ClassVar[frozenset[str]] = frozenset({"group_name", "training_backend", "num_gpus"})
    micro_batch_size: int = Field(32, ge=1, description="Samples per forward/backward pass per rank.")
    global_batch_size: int = Field(256, ge=1, description="Samples per optimizer step (all ranks).")
    seed: int = Field(1234, ge=0, le=SEED_MAX, description="Seed of model init, sampling and shuffling.")
    enable_offload: bool = Field(False, description="Move actor weights and optimizer state to the host "
                                 "while envs and rollout run.")
    model: ModelConfig = Field(default_factory=lambda: ModelConfig(preset="tiny"), description="The policy.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimizer.")
    fsdp_config: FsdpConfig = Field(default_factory=FsdpConfig, description="Sharding.")

    @model_validator(mode="before")
    @classmethod
    def _one_gradient_checkpointing(cls, data: Any) -> Any:
        """RLinf turns recomputation on with ``actor.fsdp_config.gradient_checkpointing`` (its FSDP manager);
        vlarl's policies read ``actor.model.gradient_checkpointing``: on when either says so (RLinf's hybrid-engine
        file sets its key False, so a False there cannot override vlarl's True)."""
        fsdp = data.get("fsdp_config") if isinstance(data, dict) else None
        if not isinstance(fsdp, dict) or not fsdp.get("gradient_checkpointing"):
            return data
        model = data.get("model")
        if model is None:
            model = {"preset": "tiny"}  # the field's default
        if not isinstance(model, dict):
            return data
        return {**data, "model": {**model, "gradient_checkpointing": True}}


class SftConfig(Section):
    """``vlarl sft``: behaviour cloning on demonstrations (batch size, learning rate and schedule come from
    ``actor.global_batch_size`` / ``actor.micro_batch_size`` / ``actor.optim``, as for rl-train)."""

    steps: int | None = Field(None, ge=1, description="Optimizer steps (null: runner.max_steps; --steps wins).")
    save_interval: int = Field(-1, ge=-1, description="Write a resumable checkpoint every N steps (-1: only at the end).")
    trainable: Literal["full", "head", "lora"] | None = Field(
        None, description="What trains: full (every weight), head (pi0: the action expert; the VLM frozen), "
        "lora (LoRA adapters on the VLM); null: as actor.model says (train_expert_only / is_lora).")
    norm_stats: Literal["auto", "data", "checkpoint"] = Field(
        "auto", description="Normalisation statistics: data (computed from the demonstrations in the family's "
        "format and saved with the checkpoint), checkpoint (the loaded model's), auto (data for a model built "
        "from a preset, the checkpoint's when actor.model.model_path is set).")
    state_key: str | None = Field(None, description="LeRobot column of the robot state (null: guessed).")
    action_key: str | None = Field(None, description="LeRobot column of the actions (null: guessed).")
    main_camera_key: str | None = Field(None, description="LeRobot column of the main camera (null: guessed).")
    wrist_camera_key: str | None = Field(None, description="LeRobot column of the wrist camera (null: guessed).")
    record_workers: int = Field(1, ge=1, description="Parallel simulator processes when recording expert demos.")
    keep_failures: bool = Field(False, description="Keep the expert's failed episodes when recording "
                                "(marked unsuccessful; training still uses only successful ones).")
    demos: list[str] = Field(default_factory=list, description="Demonstration datasets to train on together "
                             "(paths; --demos, which may be repeated, replaces this list). Empty: record expert demos.")
    weights: list[float] | None = Field(None, description="Sampling weight of each dataset, in the order of "
                                        "--demos / sft.demos (null: every frame once per epoch, datasets "
                                        "concatenated). Each dataset then runs its own epochs.")
    num_workers: int | None = Field(None, ge=0, description="DataLoader worker processes decoding frames (null: "
                                    "0 when every frame is already in memory, else min(4, CPU cores)).")
    prefetch: int = Field(2, ge=1, description="Micro-batches each worker decodes ahead (bounded prefetch).")
    video_backend: Literal["auto", "pyav", "torchcodec"] = Field(
        "auto", description="Video decoder: torchcodec where installed (auto), else PyAV.")
    skip_bad_frames: bool = Field(False, description="Skip samples whose camera frame cannot be decoded "
                                  "(counted in train/sft/skipped_frames and printed) instead of stopping.")

    @model_validator(mode="after")
    def _weights_match(self) -> SftConfig:
        if self.weights is not None and self.demos and len(self.weights) != len(self.demos):
            raise ValueError(f"sft.weights has {len(self.weights)} entries for {len(self.demos)} sft.demos datasets")
        if self.weights is not None and (any(w < 0 for w in self.weights) or sum(self.weights) <= 0):
            raise ValueError(f"sft.weights {self.weights} must be non-negative and not all 0")
        return self


# --------------------------------------------------------------------------------------------------
# root


class VlarlConfig(Section):
    """A whole run. ``vlarl rl-train --print-config`` prints it resolved."""

    rlinf_ignored: ClassVar[frozenset[str]] = frozenset({"reward", "critic", "weight_syncer", "profile"})
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="Nodes and component placement.")
    runner: RunnerConfig = Field(default_factory=RunnerConfig, description="Iterations, logging, checkpoints.")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="PPO / GRPO settings.")
    env: EnvConfig = Field(default_factory=EnvConfig, description="Training and evaluation environments.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Inference side of the rollout.")
    actor: ActorConfig = Field(default_factory=ActorConfig, description="Training side: model, optimizer, FSDP.")
    sft: SftConfig = Field(default_factory=SftConfig, description="Supervised fine-tuning (vlarl sft).")

    @property
    def rollout_epoch(self) -> int:
        return self.algorithm.rollout_epoch or self.env.train.rollout_epoch

    @property
    def bootstrap_truncation(self) -> bool:
        """GAE adds ``gamma * V(final observation)`` to the reward of a step where the time limit cut the episode
        (``algorithms.advantages.bootstrap_truncated``): with auto-reset and a critic, as RLinf 0.3.0 does
        (``EnvWorker.compute_bootstrap_rewards``, on whenever ``env.train.auto_reset`` and a value head; vlarl
        reads the value head only under adv_type gae). Without auto-reset a cut episode ends the env's rollout
        and its last step is terminal, as in RLinf."""
        return self.env.train.auto_reset and self.algorithm.kind.critic

    @property
    def chunk_steps_per_epoch(self) -> int:
        """Chunk steps each env collects per rollout epoch."""
        return self.env.train.max_steps_per_rollout_epoch // self.actor.model.num_action_chunks

    @property
    def train_group_size(self) -> int:
        """Consecutive training envs sharing one init state: algorithm.group_size under a group estimator."""
        return self.algorithm.group_size if self.algorithm.kind.groups else self.env.train.group_size

    @property
    def train_num_envs(self) -> int:
        return self.env.train.total_num_envs or 1

    def samples_per_iteration(self) -> int:
        """Chunk-step samples one iteration collects: envs x chunk steps x rollout epochs."""
        return self.train_num_envs * self.chunk_steps_per_epoch * self.rollout_epoch

    def _check_simulator_fits(self) -> None:
        """The policy fits env.train's simulator (``envs/registry.py`` facts): observations, action size, stages."""
        from vlarl_cli.envs import registry

        sim, model = registry.get(self.env.train.env_type), self.actor.model
        toy_model = model_types.MODEL_TYPES[model.model_type].family == "toy"
        if (sim.only_state_policies and not toy_model) or (toy_model and not sim.state_policies):
            table = registry.simulators().values()
            state, only = [s.name for s in table if s.state_policies], [s.name for s in table if s.only_state_policies]
            raise ValueError(f"the toy policies ({', '.join(model_types.model_types_of('toy'))}) read state vectors: "
                             f"they run on {', '.join(state)} (state observations), and {', '.join(only)} runs only "
                             f"them (got env_type {sim.name} with model_type {model.model_type})")
        if sim.action_dim is not None and model.action_dim != sim.action_dim:
            raise ValueError(f"{sim.name} has {sim.action_dim}-d actions: set actor.model.action_dim {sim.action_dim}")
        if not sim.pipelines and self.rollout.pipeline_stage_num != 1:
            raise ValueError(f"{sim.name} steps its envs in-process: pipelining stages are not supported; set "
                             "rollout.pipeline_stage_num 1")

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> VlarlConfig:
        world_size = int((info.context or {}).get("world_size", 1))
        self._check_chunking()
        self._check_algorithm_fits()
        self._check_simulator_fits()
        self._check_batches(world_size)
        return self

    def _check_chunking(self) -> None:
        chunks = self.actor.model.num_action_chunks
        if self.env.train.max_steps_per_rollout_epoch < chunks:
            raise ValueError(
                f"env.train.max_steps_per_rollout_epoch ({self.env.train.max_steps_per_rollout_epoch}) is shorter "
                f"than one action chunk (actor.model.num_action_chunks = {chunks})")
        if self.env.train.max_steps_per_rollout_epoch % chunks:
            raise ValueError(
                f"env.train.max_steps_per_rollout_epoch ({self.env.train.max_steps_per_rollout_epoch}) must be a "
                f"multiple of actor.model.num_action_chunks ({chunks}): every env step belongs to a chunk")

    def _check_algorithm_fits(self) -> None:
        model = self.actor.model
        flow_model = model_types.MODEL_TYPES[model.model_type].flow
        if self.algorithm.entropy_bonus > 0 and flow_model and model.effective_noise_method != "flow_noise":
            raise ValueError(
                f"algorithm.entropy_bonus {self.algorithm.entropy_bonus} > 0 needs a policy entropy, but "
                f"{model.model_type} with noise_method {model.effective_noise_method} has a fixed noise schedule "
                "and none; set entropy_bonus 0, or use noise_method flow_noise (learned noise)")
        if self.env.train.group_size not in (1, self.algorithm.group_size):
            raise ValueError(
                f"GRPO groups are built by the envs: env.train.group_size must equal algorithm.group_size "
                f"(got {self.env.train.group_size} and {self.algorithm.group_size})")
        if self.train_num_envs % self.train_group_size:
            raise ValueError(f"env.train.total_num_envs must be a multiple of the group size "
                             f"(got {self.train_num_envs} envs, group_size {self.train_group_size})")
        if self.algorithm.loss_type == "actor_critic" and not self.actor.model.effective_add_value_head:
            raise ValueError("loss_type actor_critic trains a value function: set actor.model.add_value_head "
                             "true, or use loss_type actor (e.g. with adv_type grpo)")
        if self.algorithm.kind.critic and not self.actor.model.effective_add_value_head:
            raise ValueError(f"adv_type {self.algorithm.adv_type} needs value estimates: set "
                             "actor.model.add_value_head true")
        if (self.algorithm.kind.critic and self.algorithm.reward_type == "action_level"
                and self.actor.model.value_type != "action_level"):
            raise ValueError("reward_type action_level with adv_type gae needs one value per executed action: set "
                             "actor.model.value_type: action_level (OpenVLA-OFT, toy policies); a policy with one "
                             "value per chunk needs reward_type chunk_level (or adv_type grpo)")

    def _check_batches(self, world_size: int) -> None:
        """Micro / global batch against data-parallel size, whole trajectories per micro-batch for a sequence-level
        loss, samples per iteration, envs over env ranks and pipeline stages."""
        placement = self.cluster.placement(world_size)
        dp = len(placement["actor"])
        micro, glob = self.actor.micro_batch_size, self.actor.global_batch_size
        if glob % (micro * dp):
            raise ValueError(
                f"actor.global_batch_size must be divisible by micro_batch_size x data-parallel size "
                f"(got {glob} vs {micro} x {dp} = {micro * dp})")
        steps = self.chunk_steps_per_epoch
        if algorithm_types.POLICY_LOSSES[self.algorithm.policy_loss].trajectory and micro % steps:
            raise ValueError(
                f"policy_loss {self.algorithm.policy_loss} takes one ratio per trajectory, so every micro-batch "
                f"holds whole trajectories: actor.micro_batch_size ({micro}) must be a multiple of the {steps} chunk "
                "steps of one (env.train.max_steps_per_rollout_epoch / actor.model.num_action_chunks)")
        samples = self.samples_per_iteration()
        if self.env.train.total_num_envs is not None and samples % glob:
            raise ValueError(
                f"one iteration collects total_num_envs x (max_steps_per_rollout_epoch / num_action_chunks) x "
                f"rollout_epoch = {self.train_num_envs} x {self.chunk_steps_per_epoch} x {self.rollout_epoch} "
                f"= {samples} samples, which must be a multiple of actor.global_batch_size ({glob})")
        n_envs = self.train_num_envs
        stages = self.rollout.pipeline_stage_num
        n_env_ranks = len(placement["env"])
        if n_envs % (n_env_ranks * stages):
            raise ValueError(
                f"env.train.total_num_envs must split evenly over env ranks x pipeline stages "
                f"(got {n_envs} envs, {n_env_ranks} env ranks x {stages} stages)")
