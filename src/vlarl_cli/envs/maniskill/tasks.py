"""Which ManiSkill3 task ids vlarl runs, and which it refuses (with the reason).

Built-in tasks ship their (procedural or bundled) assets inside the ``mani-skill`` wheel and run offline.
RLinf's ManiSkill recipes use SimplerEnv-style digital-twin scenes (``PutOnPlateInScene25Main-v3`` ...,
RLinf's ``examples/embodiment/config/env/maniskill_put_on_plate_in_scene_25_main.yaml``): their ids are
accepted in configs (so the recipes load and dry-run) and refused when the env is created: first for
missing hub assets (``vlarl download RLinf/maniskill_assets``, envs/maniskill/assets.py), then because the
tasks are RLinf's own code, which vlarl does not implement.
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

#: RLinf's ManiSkill digital-twin task ids: every id RLinf registers in ``rlinf/envs/maniskill/tasks``
#: (``@register_env``, RLinf a3816b5); its env/maniskill_*.yaml and env/manikill_*.yaml name some of them.
#: RLinf's recipes load with them; creating the env needs the hub assets (envs/maniskill/assets.py) and
#: RLinf's task code, which vlarl does not implement.
DIGITAL_TWIN_TASKS: tuple[str, ...] = (
    "PutOnPlateInScene25Main-v3", "PutOnPlateInScene25MainCarrot-v3", "PutOnPlateInScene25MainImage-v3",
    "PutOnPlateInScene25Carrot-v1", "PutOnPlateInScene25EEPose-v1", "PutOnPlateInScene25Instruct-v1",
    "PutOnPlateInScene25MultiCarrot-v1", "PutOnPlateInScene25MultiPlate-v1", "PutOnPlateInScene25Plate-v1",
    "PutOnPlateInScene25Position-v1", "PutOnPlateInScene25PositionChangeTo-v1", "PutOnPlateInScene25Single-v1",
    "PutOnPlateInScene25VisionImage-v1", "PutOnPlateInScene25VisionTexture03-v1",
    "PutOnPlateInScene25VisionTexture05-v1", "PutOnPlateInScene25VisionWhole03-v1",
    "PutOnPlateInScene25VisionWhole05-v1", "PandaPutOnPlateInScene25DigitalTwin-v1",
    "PutCarrotOnPlateInScene-v2",
)


def check_task_id(task: str) -> None:
    """Config-time check: a built-in task or one of RLinf's digital-twin ids (a recipe naming one loads and
    dry-runs); anything else is an error with "did you mean"."""
    if task in BUILTIN_TASKS or task in DIGITAL_TWIN_TASKS:
        return
    known = (*BUILTIN_TASKS, *DIGITAL_TWIN_TASKS)
    raise EnvError(f'ManiSkill task "{task}" is not supported.{did_you_mean(task, known)}',
                   fix=f"Use a built-in task ({', '.join(BUILTIN_TASKS)}) in env.*.init_params.id.")


def check_task(task: str) -> str:
    """Env-creation check: the task's instruction for a built-in task; for a digital-twin id first the
    missing hub assets (naming `vlarl download`), then the plain fact that vlarl does not run RLinf's tasks."""
    check_task_id(task)
    if task in BUILTIN_TASKS:
        return BUILTIN_TASKS[task]
    from vlarl_cli.envs.maniskill.assets import check_assets

    check_assets(task)
    raise EnvError(
        f'ManiSkill task "{task}" is one of RLinf\'s digital-twin scenes (WidowX, green-screen overlays, 25 '
        "carrots); its assets are here, but the task itself is RLinf code (rlinf/envs/maniskill/tasks) that "
        "vlarl does not implement, so it cannot run in vlarl. A recipe using it loads and dry-runs.",
        fix=f"Train or evaluate on a built-in task instead: env.train.init_params.id / env.eval.init_params.id = "
        f"one of {', '.join(BUILTIN_TASKS)}.")
