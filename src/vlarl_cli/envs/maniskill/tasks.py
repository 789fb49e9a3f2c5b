"""Which ManiSkill3 task ids vlarl runs, and which it refuses (with the reason).

Built-in tasks ship their (procedural or bundled) assets inside the ``mani-skill`` wheel and run offline.
RLinf's ManiSkill recipes use SimplerEnv-style digital-twin scenes (``PutOnPlateInScene25Main-v3`` ...,
``examples/embodiment/config/env/train/PutOnPlateInScene25Main.yaml`` in RLinf) whose assets come from
the hub; vlarl cannot fetch them yet, so those ids are an error rather than a failure deep inside sapien.
"""

from __future__ import annotations

from vlarl_cli.errors import EnvError, did_you_mean

#: Built-in tasks checked to build and step offline with mani-skill 3.0.1 on the CPU backend, with the
#: language instruction we give policies that read ``task_descriptions`` (ManiSkill has none for them).
BUILTIN_TASKS: dict[str, str] = {
    "PickCube-v1": "pick up the cube and move it to the goal position",
    "PushCube-v1": "push the cube to the goal region",
    "StackCube-v1": "stack the red cube on top of the green cube",
    "PullCube-v1": "pull the cube to the goal region",
    "LiftPegUpright-v1": "lift the peg upright",
}

#: RLinf's ManiSkill digital-twin task ids (its env/maniskill_*.yaml and env/{train,eval}/*.yaml).
DIGITAL_TWIN_TASKS: tuple[str, ...] = (
    "PutOnPlateInScene25Main-v3",
    "PutOnPlateInScene25Main",
    "PutCarrotOnPlateInScene-v1",
    "PutCarrotOnPlateInScene",
)


def check_task(task: str) -> str:
    """Return the task's instruction; a clear error for digital-twin and unknown ids."""
    if task in BUILTIN_TASKS:
        return BUILTIN_TASKS[task]
    if task in DIGITAL_TWIN_TASKS or task.startswith(("PutOnPlateInScene", "PutCarrotOnPlate")):
        raise EnvError(
            f'ManiSkill task "{task}" is one of RLinf\'s digital-twin scenes: its assets come from the hub and '
            "`vlarl download` cannot fetch ManiSkill assets yet (issue #21), so it cannot run here.",
            fix=f"Use a built-in task in env.*.init_params.id ({', '.join(BUILTIN_TASKS)}).",
        )
    raise EnvError(f'ManiSkill task "{task}" is not supported.{did_you_mean(task, tuple(BUILTIN_TASKS))}',
                   fix=f"Use one of: {', '.join(BUILTIN_TASKS)}.")
