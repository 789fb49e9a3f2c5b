"""What to evaluate: the episode plan ((suite, task, trial) keys), its split over ranks and envs, and
:class:`EvalSettings` (everything except the policy, with the protocol deviations it implies).

Episodes are planned task-major, trial i from LIBERO's fixed init state i, and split into contiguous
blocks (over ranks, then over the envs of a rank's vector env) so an env rarely switches task: a switch
rebuilds the simulator, ~4 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vlarl_cli.errors import ConfigError, EnvError

STANDARD_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")


@dataclass(frozen=True, order=True)
class EpisodeKey:
    """One evaluation episode: task ``task`` of the original ``suite``, started from init state ``trial``."""

    suite: str
    task: int
    trial: int

    @property
    def libero130_task(self) -> int:
        """The task's id in libero_130 (spatial, object, goal, 90, 10 concatenated, RLinf's order), extended
        past 129 by the LIBERO-PRO suites (``suites.LIBERO_ALL``: ids of the 130 are unchanged)."""
        from vlarl_cli.envs.libero.suites import all_suite_order, num_tasks

        order = all_suite_order()
        return sum(num_tasks(s) for s in order[: order.index(self.suite)]) + self.task

    @property
    def libero130_reset_state_id(self) -> int:
        from vlarl_cli.envs.libero.suites import TRIALS_PER_TASK

        return self.libero130_task * TRIALS_PER_TASK + self.trial


def expand_suite(suite: str, categories: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """``all`` -> the 4 standard suites; ``libero_130`` -> all 5; ``libero_pro`` / ``libero_pro_<base>`` -> the
    LIBERO-PRO suites of the split in ``categories`` (None: those vlarl's LIBERO runs, lan / swap / task); a
    suite name -> itself."""
    from vlarl_cli.envs.libero.protocol import SUITE_ORDER
    from vlarl_cli.envs.libero.suites import check_suite

    if suite == "all":
        _check_categories(suite, categories, is_split=False)
        return STANDARD_SUITES
    from vlarl_cli.envs.libero_plus import catalog as plus
    from vlarl_cli.envs.libero_plus import suites as plus_suites
    from vlarl_cli.envs.libero_pro import catalog as pro
    from vlarl_cli.envs.libero_pro.data import RUNS_IN_VLARL_LIBERO, check_runnable
    from vlarl_cli.envs.libero_pro.simulator import built_python

    if plus.is_plus_split(suite) or plus_suites.is_plus_suite(suite):
        _check_categories(suite, categories, is_split=plus.is_plus_split(suite))
        return plus_suites.expand(suite, categories)  # runs in LIBERO-Plus's environment (runner._vector_spec)
    if pro.is_pro_split(suite) and (categories or suite not in pro.pro_suites()):
        _check_categories(suite, categories, is_split=True)
        # "original": the split's unperturbed base suites too, the reference column of PRO's own table
        wanted = [c for c in categories or sorted(RUNS_IN_VLARL_LIBERO) if c != "original"]
        bases = tuple(dict.fromkeys(s.base_suite for s in pro.resolve(suite)))
        chosen = pro.resolve(suite, wanted) if wanted else []
        names = tuple(check_suite(s.name) for s in chosen)
        check_runnable(chosen, python=built_python())  # PRO's files; _object: `vlarl setup-sim libero_pro` done
        return (bases if categories and "original" in categories else ()) + names
    if suite in pro.pro_suites():
        check_runnable([pro.pro_suites()[suite]], python=built_python())
    check_suite(suite)
    _check_categories(suite, categories, is_split=pro.is_pro_split(suite))
    return tuple(SUITE_ORDER) if suite == "libero_130" else (suite,)


def _check_categories(suite: str, categories: tuple[str, ...] | None, *, is_split: bool) -> None:
    """Categories pick the perturbations of a robustness split; anywhere else they would be ignored without a
    word, and an empty list would silently mean the default ones."""
    if categories is None:
        return
    if not categories:
        raise ConfigError("--categories names no category.", "Name some, e.g. --categories swap,task, or leave "
                          "--categories out for the split's default ones.")
    if not is_split:
        raise ConfigError(f'--categories {",".join(categories)} picks perturbations of a robustness split, but '
                          f'"{suite}" is not one (it has no categories to pick).',
                          "Use a split (libero_pro, libero_pro_<spatial|object|goal|10>, libero_plus, "
                          "libero_plus_<base>) with --categories, or leave --categories out.")


def plan_episodes(suite: str, tasks: tuple[int, ...] | None, trials: int,
                  order: str = "task_major", categories: tuple[str, ...] | None = None) -> list[EpisodeKey]:
    """Every (original suite, task, trial) to evaluate, ``task_major`` (openpi / OFT: task 0 trials
    0..n-1, task 1, ...) or ``trial_major`` (RLinf ``build_interleaved_eval_reset_state_ids``: trial 0 of
    every task, then trial 1, ...).

    ``tasks`` index the requested suite (``libero_130`` ids 0..129 for libero_130; with ``all`` they
    select the same task ids in each of the four suites, with a LIBERO-PRO split in each of its suites;
    ``categories`` pick a PRO split's perturbations). Out-of-range ids raise EnvError.
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
        for s in expand_suite(suite, categories):
            n = S.num_tasks(s)
            for t in tasks if tasks is not None else range(n):
                if not 0 <= t < n:
                    raise EnvError(f"task id {t} is out of range for {s} ({n} tasks).", fix=f"Use 0..{n - 1}.")
                pairs.append((s, t))
    ordered = list(dict.fromkeys(pairs))  # keep order, drop repeats
    if trials > 1:
        _check_init_states(ordered, trials)
    if order == "trial_major":
        return [EpisodeKey(s, t, i) for i in range(trials) for s, t in ordered]
    return [EpisodeKey(s, t, i) for s, t in ordered for i in range(trials)]


def _check_init_states(pairs: list[tuple[str, int]], trials: int) -> None:
    """Trial i plays init state i: every task must have ``trials`` of them (LIBERO-Plus's layout tasks have one)."""
    from vlarl_cli.envs.libero import suites as S

    short = [(s, t) for s, t in pairs if S.num_init_states(s, t) < trials]
    if short:
        s, t = short[0]
        raise EnvError(f"{len(short)} of the {len(pairs)} tasks have fewer than {trials} init states (e.g. {s} task "
                       f"{t}: {S.num_init_states(s, t)}; LIBERO-Plus's layout tasks have one each), and trial i plays "
                       "init state i.",
                       fix="Pass --trials 1 (LIBERO-Plus's protocol plays each task once), or leave those tasks out.")


def split_blocks(items: list[Any], parts: int) -> list[list[Any]]:
    """Split ``items`` into ``parts`` contiguous blocks whose sizes differ by at most one (earlier first)."""
    base, extra = divmod(len(items), parts)
    out, start = [], 0
    for p in range(parts):
        size = base + (p < extra)
        out.append(items[start : start + size])
        start += size
    return out


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
        hard_reset: robosuite hard resets (rebuild the model every episode); None = the protocol's.
        model_type: the policy family (``actor.model.model_type``): selects the protocol's family entry
            (replan size, denoising steps, env seed); filled in once the policy is known.
        render_quality: ``exact`` (the protocols' rendering), ``fast`` or ``fast_noaa``
            (``envs.libero.env.RENDER_QUALITIES``; a deviation on the card when not exact).
        categories: perturbation categories of a LIBERO-PRO split (None: lan, swap, task).
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
    hard_reset: bool | None = None
    model_type: str | None = None
    render_quality: str = "exact"
    categories: tuple[str, ...] | None = None

    def validate(self) -> None:
        from vlarl_cli.envs.libero.env import RESOLUTIONS
        from vlarl_cli.envs.libero.protocol import get_protocol

        get_protocol(self.protocol)
        expand_suite(self.suite, self.categories)
        if self.plus:  # its own environment, named with the command that builds it before a policy is loaded
            from vlarl_cli.envs.libero_plus.install import source_root

            source_root()
        if self.resolution not in RESOLUTIONS:
            raise EnvError(f"Resolution {self.resolution} is not supported.", fix=f"Use one of {RESOLUTIONS}.")
        if self.num_envs < 1:
            raise ConfigError(f"num_envs must be >= 1, got {self.num_envs}.", "Pass --num-envs 1 or more.")
        from vlarl_cli.envs.libero.env import RENDER_QUALITIES

        if self.render_quality not in RENDER_QUALITIES:
            raise ConfigError(f'Unknown render quality "{self.render_quality}".',
                              f"Use one of {', '.join(RENDER_QUALITIES)}.")
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
                self.env_seed if self.env_seed is not None else p.seed_for(self.model_type))

    def deviations(self, suites: list[str] | tuple[str, ...] = ()) -> list[str]:
        """How these settings depart from the named protocol for ``suites`` (printed on the card)."""
        from vlarl_cli.envs.libero.protocol import get_protocol

        p = get_protocol(self.protocol)
        out = []
        if self.max_steps is not None:
            limits = ", ".join(f"{s} {p.max_steps_for(s)}" for s in suites or p.max_steps)
            out.append(f"max_steps={self.max_steps} (protocol: {limits})")
        if self.settle_steps is not None and self.settle_steps != p.settle_steps:
            out.append(f"settle_steps={self.settle_steps} (protocol: {p.settle_steps})")
        # RLinf's seed is a parameter of its rule (cfg.seed); openpi / OFT fix theirs
        if p.seeding == "once_per_task" and self.env_seed is not None and self.env_seed != p.seed_for(self.model_type):
            out.append(f"env_seed={self.env_seed} (protocol: {p.seed_for(self.model_type)})")
        published = 1 if self.plus else p.trials_per_task  # LIBERO-Plus's README: num_trials_per_task 1
        if self.trials != published:
            out.append(f"trials={self.trials} per task (protocol: {published})")
        if self.resolution != p.render_resolution:
            out.append(f"render resolution {self.resolution} (protocol: {p.render_resolution})")
        if self.hard_reset is not None and self.hard_reset != p.hard_reset:
            out.append(f"{'hard' if self.hard_reset else 'soft'} resets (protocol: {'hard' if p.hard_reset else 'soft'})")
        if self.render_quality != "exact":
            out.append(render_quality_deviation(self.render_quality))
        return out

    @property
    def plus(self) -> bool:
        """A LIBERO-Plus split: its envs run in LIBERO-Plus's own environment, one trial per task."""
        from vlarl_cli.envs.libero_plus import catalog, suites

        return catalog.is_plus_split(self.suite) or suites.is_plus_suite(self.suite)

    @property
    def pro_object(self) -> bool:
        """The plan holds LIBERO-PRO ``_object`` suites: its envs run in LIBERO-PRO's environment (all of them:
        one vector env plays the plan; same robosuite / mujoco as vlarl's LIBERO)."""
        from vlarl_cli.envs.libero.suites import pro_object_suite_names

        return bool(set(expand_suite(self.suite, self.categories)) & set(pro_object_suite_names()))

    @property
    def effective_env_seed(self) -> int:
        from vlarl_cli.envs.libero.protocol import get_protocol

        return self.env_seed if self.env_seed is not None else get_protocol(self.protocol).seed_for(self.model_type)

    @property
    def effective_hard_reset(self) -> bool:
        from vlarl_cli.envs.libero.protocol import get_protocol

        return get_protocol(self.protocol).hard_reset if self.hard_reset is None else self.hard_reset

    def replan(self, chunk: int) -> int:
        """Actions executed per predicted chunk: the family's replan size under the protocol (openpi
        executes 5 of pi0's chunk), else the whole chunk."""
        from vlarl_cli.envs.libero.protocol import get_protocol

        fam = get_protocol(self.protocol).family(self.model_type or "")
        return min(chunk, fam.replan_steps) if fam is not None and fam.replan_steps else chunk

    def policy_deviations(self, chunk: int, denoising_steps: int | None) -> list[str]:
        """Where the policy's chunk size or denoising steps depart from the protocol's family entry."""
        from vlarl_cli.envs.libero.protocol import get_protocol

        fam = get_protocol(self.protocol).family(self.model_type or "")
        out: list[str] = []
        if fam is None:
            return out
        if fam.replan_steps and chunk < fam.replan_steps:
            out.append(f"replans every {chunk} steps (protocol: {fam.replan_steps}; the policy predicts only {chunk})")
        if fam.denoising_steps and denoising_steps is not None and denoising_steps != fam.denoising_steps:
            out.append(f"{denoising_steps} denoising steps (protocol: {fam.denoising_steps}, {fam.source})")
        return out


def render_quality_deviation(quality: str) -> str:
    """The deviation line of a ``render_quality`` other than ``exact`` (cards; LIBERO's, ``envs/libero/make.py``)."""
    from vlarl_cli.envs.libero.make import render_quality_deviation as line

    return line(quality)
