"""Episode protocols as data: a success rate means nothing without the protocol that produced it.

``standard`` is how openpi (``examples/libero/main.py``) and OpenVLA-OFT
(``experiments/robot/libero/run_libero_eval.py``) evaluate: one simulator per task built and seeded ONCE
(``env.seed(7)`` openpi, ``env.seed(0)`` OFT), then for trial i = 0..49 in order a (hard) ``reset()``,
``set_init_state(init_states[i])``, 10 settle steps with ``[0,0,0,0,0,0,-1]``, then at most the suite's
step limit (220/280/300/520/400 for spatial/object/goal/10/90). Because the seed is applied only once,
object-placement noise of trial i depends on the resets before it: trial i is the (i+1)-th hard reset
after the seed (``LiberoEnv`` replays the stream when trials come out of order).
Per family: openpi replans every 5 steps with 10 denoising steps (its ``Pi0Config`` default), OFT
executes 8 actions open loop.

``rlinf`` is RLinf 0.3.0's ``rlinf/envs/libero/libero_env.py`` (``LiberoEnv``): seed ``cfg.seed +
seed_offset`` (``seed_offset = rank * stage_num + stage_id``, ``env_worker.py``); before EVERY reset the
k simulators being reset together are seeded ``seed * k + i`` (``ReconfigureSubprocEnv.seed`` extends an
int to ``seed + i`` over its envs); 15 settle steps with zero actions whose gripper is -1 when
``reset_gripper_open``; step limits 240/240/320/512/512; reward ``(-1 if use_step_penalty) +
reward_coef * success``, as its change since the previous step with ``use_rel_reward``; on a training
auto-reset NEW reset-state ids are drawn; evaluation visits (task 0, trial 0), (task 1, trial 0), ...
(``build_interleaved_eval_reset_state_ids``, trial-major).

``libero_130`` is the five suites concatenated in RLinf's order (``benchmark.libero_suites``): spatial,
object, goal, 90, 10; task ids 30..119 are libero_90, 120..129 libero_10.

The family table (:attr:`Protocol.families`) holds what differs per model family; another family or a
sampling setting (e.g. a temperature) is one more :class:`FamilyProtocol` field or entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from vlarl_cli.errors import EnvError, did_you_mean
from vlarl_cli.model_types import MODEL_TYPES

#: The original suites in libero_130 order (RLinf ``rlinf/envs/libero/utils.py`` get_benchmark_overridden,
#: which walks LIBERO's ``benchmark.libero_suites``).
SUITE_ORDER = ("libero_spatial", "libero_object", "libero_goal", "libero_90", "libero_10")

#: How the env seed reaches the simulator.
#: ``once_per_task``: ``env.seed(seed)`` once when a task's simulator is built; resets continue the stream.
#: ``every_reset``: ``env.seed(s)`` right before every reset (``s`` given by the vector env, RLinf's rule).
Seeding = Literal["once_per_task", "every_reset"]


@dataclass(frozen=True)
class FamilyProtocol:
    """What a protocol prescribes for one model family.

    Attributes:
        replan_steps: actions executed from each predicted chunk before the policy is queried again.
        denoising_steps: flow-matching denoising steps at evaluation (None: not a flow policy / not fixed).
        seed: env seed this family's evaluator uses (None: the protocol's).
        source: the upstream file these numbers come from.
    """

    replan_steps: int | None
    denoising_steps: int | None = None
    seed: int | None = None
    source: str = ""


@dataclass(frozen=True)
class Protocol:
    """One episode protocol (see the module docstring for the sources).

    Attributes:
        name: registry name.
        max_steps: policy steps per episode for each suite (settle steps not counted).
        settle_steps: no-op steps after ``set_init_state`` so objects come to rest (they drop ~7 cm).
        settle_action: the 7-d settle action (LIBERO convention, gripper -1 = open).
        seed: default env seed.
        seeding: ``once_per_task`` or ``every_reset`` (see :data:`Seeding`).
        hard_reset: reset mode the protocol's numbers were produced with. For ``once_per_task`` it is part
            of the protocol (a soft reset draws fewer random numbers, so later trials see other noise).
        trials_per_task: evaluation episodes per task; trial i starts from init state i.
        eval_order: ``task_major`` (task 0 trials 0..49, task 1, ...) or ``trial_major`` (trial 0 of every
            task, then trial 1, ...: RLinf's interleaved evaluation order).
        redraw_on_auto_reset: a training auto-reset draws new reset-state ids (RLinf) instead of restarting
            the same state.
        render_resolution: square render size in pixels.
        policy_resolution: size the policy's image preprocessing resizes to.
        families: per-family replan size, denoising steps and seed (:class:`FamilyProtocol`).
        notes: where the numbers come from (printed on the card).
    """

    name: str
    max_steps: dict[str, int]
    settle_steps: int
    seeding: Seeding
    hard_reset: bool
    eval_order: Literal["task_major", "trial_major"]
    redraw_on_auto_reset: bool
    settle_action: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)
    seed: int = 7
    trials_per_task: int = 50
    render_resolution: int = 256
    policy_resolution: int = 224
    families: dict[str, FamilyProtocol] = field(default_factory=dict)
    notes: str = field(default="", compare=False)

    def max_steps_for(self, suite: str) -> int:
        """Max policy steps for ``suite``; libero_130 mixes suites, so use the task's original suite. A
        LIBERO-PRO suite takes its base suite's limit (PRO's README TASK_MAX_STEPS)."""
        from vlarl_cli.envs.libero_plus.suites import base_suite, is_plus_suite
        from vlarl_cli.envs.libero_pro.catalog import pro_suites

        if suite in pro_suites():
            suite = pro_suites()[suite].base_suite
        elif is_plus_suite(suite):  # LIBERO-Plus: LIBERO's evaluation of the base suite (its README)
            suite = base_suite(suite)
        if suite not in self.max_steps:
            raise EnvError(
                f'Protocol "{self.name}" has no step limit for suite "{suite}".'
                f"{did_you_mean(suite, list(self.max_steps))}",
                fix=f"Use one of {list(self.max_steps)}, or pass max_episode_steps explicitly.",
            )
        return self.max_steps[suite]

    def family(self, model_type: str) -> FamilyProtocol | None:
        """The entry for a policy ``model_type``, None when not prescribed. A model type without an entry of
        its own shares its family's (:mod:`vlarl_cli.model_types`: ``openpi`` -> pi0, ``gr00t_n1d6`` -> gr00t)."""
        if model_type in self.families:
            return self.families[model_type]
        known = MODEL_TYPES.get(model_type)
        return self.families.get(known.family) if known is not None else None

    def seed_for(self, model_type: str | None) -> int:
        """The env seed for a family (its evaluator's), else the protocol's."""
        fam = self.family(model_type) if model_type else None
        return fam.seed if fam is not None and fam.seed is not None else self.seed


_OPENPI = "openpi examples/libero/main.py (replan_steps=5) with Pi0Config num_steps=10"
_OFT = "openvla-oft experiments/robot/libero/run_libero_eval.py (env.seed(0), NUM_ACTIONS_CHUNK=8 open loop)"

PROTOCOLS: dict[str, Protocol] = {
    "standard": Protocol(
        name="standard",
        max_steps={
            "libero_spatial": 220,
            "libero_object": 280,
            "libero_goal": 300,
            "libero_10": 520,
            "libero_90": 400,
        },
        settle_steps=10,
        seeding="once_per_task",
        hard_reset=True,
        eval_order="task_major",
        redraw_on_auto_reset=False,
        seed=7,
        families={
            "pi0": FamilyProtocol(replan_steps=5, denoising_steps=10, seed=7, source=_OPENPI),
            "pi05": FamilyProtocol(replan_steps=5, denoising_steps=10, seed=7, source=_OPENPI),
            "openvla_oft": FamilyProtocol(replan_steps=8, seed=0, source=_OFT),
        },
        notes="openpi examples/libero/main.py (env.seed(7) once per task, hard reset per trial); "
        "OpenVLA-OFT run_libero_eval.py is the same with env.seed(0)",
    ),
    "rlinf": Protocol(
        name="rlinf",
        max_steps={
            "libero_spatial": 240,
            "libero_object": 240,
            "libero_goal": 320,
            "libero_10": 512,
            "libero_90": 512,
        },
        settle_steps=15,
        seeding="every_reset",
        # seeded before every reset, a soft reset gives the same episode as RLinf's rebuilt simulator
        # (tests/conformance/rlinf_env checks it against RLinf's own LiberoEnv)
        hard_reset=False,
        eval_order="trial_major",
        redraw_on_auto_reset=True,
        seed=0,
        notes="RLinf 0.3.0 rlinf/envs/libero/libero_env.py LiberoEnv (seed cfg.seed + rank * stages + stage, "
        "seed * k + i before every reset of k envs)",
    ),
}


def get_protocol(name: str) -> Protocol:
    """Look up a protocol by name; unknown names raise EnvError listing the known ones."""
    if name not in PROTOCOLS:
        raise EnvError(
            f'Unknown evaluation protocol "{name}".{did_you_mean(name, list(PROTOCOLS))}',
            fix=f"Use one of {sorted(PROTOCOLS)}.",
        )
    return PROTOCOLS[name]


def rlinf_reset_seeds(base_seed: int, env_positions: list[int], num_reset: int) -> list[int]:
    """Env seeds RLinf applies before a reset of ``num_reset`` envs of one ``LiberoEnv`` instance.

    RLinf ``LiberoEnv._reconfigure`` calls ``self.env.seed(self.seed * len(env_idx))`` and
    ``BaseVectorEnv.seed`` turns an int ``s`` into ``s + i`` for env ``i`` of the instance, whichever
    envs are being reset. ``base_seed`` = ``cfg.seed + seed_offset``; ``env_positions`` = the envs' indices
    inside the instance.
    """
    return [base_seed * num_reset + i for i in env_positions]


def rlinf_step_reward(success: bool, prev: float, *, reward_coef: float, step_penalty: float,
                      use_rel_reward: bool) -> tuple[float, float]:
    """One step's reward under RLinf's rule, and the level to remember for the next step.

    RLinf ``LiberoEnv._calc_step_reward``: ``level = -step_penalty + reward_coef * success`` (RLinf's
    penalty is 1 when ``use_step_penalty``), returned as ``level - prev`` with ``use_rel_reward``. So with
    both on, the penalty shows up only on an episode's first step.
    """
    level = -step_penalty + reward_coef * float(success)
    if use_rel_reward:
        return level - prev, level
    return level, level
