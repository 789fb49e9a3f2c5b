"""Evaluation protocols as data: a success rate means nothing without the protocol that produced it.

``standard``: openpi ``examples/libero/main.py`` and OpenVLA ``experiments/robot/libero/run_libero_eval.py``
(max steps 220/280/300/520/400 for spatial/object/goal/10/90 after ``num_steps_wait = 10`` settle steps
with the no-op action ``[0,0,0,0,0,0,-1]``, ``env.seed(7)``, 50 trials per task, trial i from init state
i, render 256 then resize to 224).
``rlinf``: RLinf's LIBERO configs (limits 240/240/320/512/512, 15 settle steps with the gripper open).
Source of both: ``/work/shared/REFERENCE.md`` section 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vlarl_cli.errors import EnvError, did_you_mean

SUITE_ORDER = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")


@dataclass(frozen=True)
class Protocol:
    """One evaluation protocol.

    Attributes:
        name: registry name.
        max_steps: policy steps per episode for each suite (settle steps not counted).
        settle_steps: no-op steps run after ``set_init_state`` so objects come to rest (they drop ~7 cm).
        settle_action: the 7-d action used for settling (LIBERO convention, gripper -1 = open).
        seed: ``env.seed`` applied before every reset.
        trials_per_task: evaluation episodes per task; trial i starts from init state i.
        render_resolution: square render size in pixels.
        policy_resolution: size the policy's image preprocessing resizes to.
    """

    name: str
    max_steps: dict[str, int]
    settle_steps: int
    settle_action: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)
    seed: int = 7
    trials_per_task: int = 50
    render_resolution: int = 256
    policy_resolution: int = 224
    notes: str = field(default="", compare=False)

    def max_steps_for(self, suite: str) -> int:
        """Max policy steps for ``suite``; libero_130 mixes suites, so use :meth:`max_steps_for_task`."""
        if suite not in self.max_steps:
            raise EnvError(
                f'Protocol "{self.name}" has no step limit for suite "{suite}".'
                f"{did_you_mean(suite, list(self.max_steps))}",
                fix=f"Use one of {list(self.max_steps)}, or pass max_episode_steps explicitly.",
            )
        return self.max_steps[suite]


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
        seed=7,
        notes="openpi examples/libero/main.py; OpenVLA run_libero_eval.py uses env.seed(0) instead of 7",
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
        seed=7,
        notes="RLinf LIBERO env configs (reward_coef 5.0 on libero_10)",
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
