"""``env.<split>`` (``env_type: libero``) -> :class:`~vlarl_cli.envs.libero.vector.LiberoVectorEnv`: LIBERO's config
mapping, its load-time checks and its deviation lines (named by ``envs/libero/simulator.py``)."""

from __future__ import annotations

from typing import Any

from vlarl_cli.envs.registry import EnvRequest

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90", "libero_130")


def make_env(split: Any, request: EnvRequest) -> Any:
    """This rank's LIBERO envs in subprocess workers (``request.workers``, else ``split.num_workers``, else one
    per core)."""
    from vlarl_cli.envs.libero.vector import LiberoVectorEnv, VectorEnvSpec, split_spec_fields
    from vlarl_cli.envs.libero_pro.catalog import pro_suites
    from vlarl_cli.envs.pool import workers_for

    if suite_of(split) in pro_suites():  # PRO's files must be in the cache before workers try to read them
        from vlarl_cli.envs.libero_pro.data import check_runnable

        check_runnable([pro_suites()[suite_of(split)]], python=split.python)  # _object: PRO's interpreter

    spec = VectorEnvSpec(
        suite=suite_of(split),
        task_ids=tuple(split.task_ids or ()),
        num_envs=request.num_envs,
        num_workers=request.workers or workers_for(request.num_envs, split.num_workers),
        resolution=split.resolution,
        cameras=request.cameras,
        obs_mode=request.obs_mode,
        max_episode_steps=split.max_episode_steps,
        settle_steps=split.settle_steps,
        protocol=split.protocol,
        **split_spec_fields(split, request.rank),  # seeds, reset-state switches, step penalty as RLinf
        auto_reset=split.auto_reset,
        group_size=request.group_size,
        init_state_order="ordered" if split.use_ordered_reset_state_ids else "random",
        reward_coef=split.reward_coef,
        use_rel_reward=split.use_rel_reward,
        ignore_terminations=split.ignore_terminations,
        record_video=request.record_video,
        stages=request.stages,
        hard_reset=split.hard_reset,
        python=split.python,
        python_key=f"env.{'eval' if split.is_eval else 'train'}.python",
    )
    spec.validate()
    return LiberoVectorEnv(spec)


def task_name(split: Any) -> str:
    return suite_of(split)


def suite_of(split: Any) -> str:
    """The suite a split runs: ``task_suite_name``, or with RLinf's ``libero_variant: pro`` the LIBERO-PRO suite
    ``<task_suite_name>_<perturbation_suffix>``."""
    if split.libero_variant != "pro":
        return str(split.task_suite_name)
    return f"{split.task_suite_name}_{str(split.perturbation_suffix).removeprefix('_')}"


def _check_variant(split: Any) -> None:
    """RLinf's LIBERO-PRO / LIBERO-Plus keys: what vlarl runs of them, refused with the reason otherwise."""
    from vlarl_cli.envs.libero_plus import catalog as plus
    from vlarl_cli.envs.libero_pro.data import NEEDS_PRO_PACKAGE, RUNS_IN_VLARL_LIBERO

    if split.libero_variant == "plus":
        name = f"libero_plus_{split.task_suite_name.removeprefix('libero_')}"
        raise ValueError(str(plus.unavailable(name if plus.is_plus_split(name) else "libero_plus")))
    suffix = str(split.perturbation_suffix or "").removeprefix("_")
    if split.libero_variant == "pro" and suffix not in RUNS_IN_VLARL_LIBERO | NEEDS_PRO_PACKAGE:
        raise ValueError(f'libero_variant pro needs perturbation_suffix lan, swap, task or object (one per split), '
                         f'got "{split.perturbation_suffix}"; "all" mixes four suites: use one split per '
                         "perturbation, or vlarl eval --suite libero_pro")


def render_quality_deviation(quality: str) -> str:
    """The deviation line of a ``render_quality`` other than ``exact`` (cards, run plan, dry-run)."""
    from vlarl_cli.envs.libero.env import RENDER_QUALITIES

    return f"render_quality {quality}: {RENDER_QUALITIES[quality]}; images differ from the published protocols' (exact)"


def deviations(name: str, split: Any) -> list[str]:
    """``env.<name>.render_quality`` other than exact."""
    return [] if split.render_quality == "exact" else [f"env.{name}.{render_quality_deviation(split.render_quality)}"]


def check_split(split: Any) -> None:
    """What a LIBERO launch would refuse, found at load time (so `--dry-run` finds it too)."""
    from vlarl_cli.envs.libero.env import RESOLUTIONS
    from vlarl_cli.envs.libero.suites import (
        TRIALS_PER_TASK,
        num_tasks,
        plus_suite_names,
        pro_object_suite_names,
        pro_suite_names,
    )
    from vlarl_cli.envs.libero_plus.suites import check_python
    from vlarl_cli.envs.libero_pro.simulator import check_pro_python
    from vlarl_cli.errors import did_you_mean

    _check_variant(split)
    check_python(split)  # a LIBERO-Plus suite: runnable category, LIBERO-Plus's interpreter
    check_pro_python(split)  # a LIBERO-PRO _object suite: an interpreter holding PRO's package
    suite = suite_of(split)
    known = (*SUITES, *pro_suite_names(), *plus_suite_names(), *pro_object_suite_names())
    if suite not in known:
        raise ValueError(f'unknown task_suite_name "{suite}"; known: {", ".join(known)}.'
                         f"{did_you_mean(suite, known)}")
    if split.resolution not in RESOLUTIONS:
        raise ValueError(f"init_params.camera_heights/camera_widths {split.resolution} is not a LIBERO render "
                         f"size vlarl supports; use one of {', '.join(map(str, RESOLUTIONS))}")
    n_tasks = num_tasks(suite)
    bad = [t for t in split.task_ids or () if not 0 <= t < n_tasks]
    if bad:
        raise ValueError(f"task_ids {bad} are out of range for {suite}, which has tasks "
                         f"0..{n_tasks - 1}")
    if split.specific_reset_id is not None:
        pool = len(split.task_ids or range(n_tasks)) * TRIALS_PER_TASK
        if split.specific_reset_id >= pool:
            raise ValueError(f"specific_reset_id {split.specific_reset_id} is out of range: the selected tasks "
                             f"have {pool} reset states (ids 0..{pool - 1})")
        raise ValueError("specific_reset_id (one fixed reset state for every env) is not implemented by vlarl; "
                         "restrict the tasks with task_ids and use use_ordered_reset_state_ids: true instead, "
                         "or set it to null")
