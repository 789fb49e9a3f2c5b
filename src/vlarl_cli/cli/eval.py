"""Evaluate a policy on LIBERO with the standard protocol; success rates with 95% Wilson intervals.

Standard protocol by default (openpi/OpenVLA: 50 trials per task from the fixed init states, per-suite
step limits + 10 settle steps, env seed 7); every number is stored with its protocol card. An
interrupted evaluation resumes: run the same command again and finished episodes are skipped.

With neither --checkpoint nor --config it evaluates the newest checkpoint of the newest run under runs/
(or of --run DIR) and prints which checkpoint and config it took.

Examples:
  vlarl eval --suite libero_10                                           # what you trained last
  vlarl eval --suite libero_10 --checkpoint runs/x/checkpoints/global_step_100
  vlarl eval --suite all --checkpoint runs/x --num-envs 4 --out eval/x
  vlarl eval --suite libero_spatial --config quickstart --tasks 0,1 --trials 5 actor.model.preset=tiny
  vlarl eval --suite libero_10 --checkpoint PATH --temperature 1.0       # sampled actions
  vlarl eval --compare eval/a eval/b                                     # B - A per task, significance
  vlarl eval --suite libero_pro_spatial --checkpoint PATH                # LIBERO-PRO: lan, swap, task
  vlarl eval --suite libero_pro --categories swap,task --trials 10       # a robustness report per category
  vlarl eval --robustness eval/sft/pro --robustness eval/rl/pro          # two checkpoints side by side
  vlarl setup-sim libero_pro && vlarl eval --suite libero_pro --categories object   # PRO's _object suites
  vlarl setup-sim libero_plus && vlarl eval --suite libero_plus_goal --categories camera,noise   # LIBERO-Plus
  vlarl eval --task PickCube-v1 --checkpoint PATH --episodes 100         # ManiSkill3 (env_type maniskill)
  torchrun --nproc-per-node 2 -m vlarl_cli.cli.main eval --suite libero_90 --checkpoint PATH
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from vlarl_cli.training.evaluation import EvalSettings

#: far above any real evaluation (LIBERO's longest step limit is 520; a node runs tens of simulators), far below
#: what overflows a C integer or runs for ever: a mistyped value is a usage error, not a crash in a worker
MAX_STEPS = 100_000
MAX_ENVS = 4096
MAX_EPISODES = 1_000_000


# the options, one alias each (typer's Annotated form), so that the command's signature stays a list of names
_Suite = Annotated[str, typer.Option("--suite", "-s", help="libero_spatial, libero_object, libero_goal, "
    "libero_10, libero_90, libero_130, all (the four standard suites), a LIBERO-PRO "
    "suite (libero_goal_swap ...) or split: libero_pro, libero_pro_<spatial|object|goal|10>; "
    "LIBERO-Plus: libero_plus, libero_plus_<base> or one suite libero_plus_<base>_<category> "
    "(its own environment: vlarl setup-sim libero_plus).")]
_Categories = Annotated[str | None, typer.Option("--categories", help="Perturbation categories of a robustness "
    "split, comma-separated. LIBERO-PRO: lan, swap, task (default: all "
    "three; object: in PRO's own environment, vlarl setup-sim libero_pro), original (the unperturbed "
    "base suites too). LIBERO-Plus: camera, robot, "
    "language, light, background, noise, layout.")]
_Checkpoint = Annotated[Path | None, typer.Option("--checkpoint", help="A vlarl training checkpoint folder "
    "(model.safetensors + config.yaml) or a run folder (its latest). "
    "Default: the newest checkpoint of the newest run under runs/.")]
_Run = Annotated[Path | None, typer.Option("--run", help="Evaluate the newest checkpoint of this run folder "
    "(what rl-train / sft wrote: runner.logger.log_path).")]
_Config = Annotated[str | None, typer.Option("--config", "-c", help="Build the policy from this config (preset "
    "name or YAML); with --checkpoint it replaces the checkpoint's config.")]
_Overrides = Annotated[list[str] | None, typer.Argument(help="KEY=VALUE config overrides, e.g. "
    "actor.model.preset=tiny.", show_default=False)]
_Tasks = Annotated[str | None, typer.Option("--tasks", help="Comma-separated task ids of the suite (default all).")]
_Trials = Annotated[int | None, typer.Option("--trials", min=1, max=50, help="Trials per task; trial i = init "
    "state i (default: the protocol's, 50; LIBERO-Plus 1).")]
_Protocol = Annotated[str, typer.Option("--protocol", help="standard (openpi/OpenVLA) or rlinf.")]
_Temperature = Annotated[float | None, typer.Option("--temperature", help="Sample actions at this temperature "
    "(flow policies: 1 = their configured noise). Default: deterministic.")]
_Deterministic = Annotated[bool, typer.Option("--deterministic", help="Deterministic actions (the default).")]
_NumEnvs = Annotated[int, typer.Option("--num-envs", min=1, max=MAX_ENVS, help="Simulators of this process.")]
_NumWorkers = Annotated[int | None, typer.Option("--num-workers", min=1, max=MAX_ENVS, help="Simulator processes "
    "(default: one per CPU core, a divisor of --num-envs).")]
_Out = Annotated[Path | None, typer.Option("--out", "-o", help="Results folder (default eval/<name>/<suite>_<protocol>).")]
_Resume = Annotated[bool, typer.Option("--resume/--no-resume", help="Skip episodes already in --out "
    "(--no-resume discards them).")]
_MaxSteps = Annotated[int | None, typer.Option("--max-steps", min=1, max=MAX_STEPS, help="Override the protocol's step limit "
    "(recorded as a deviation).")]
_SettleSteps = Annotated[int | None, typer.Option("--settle-steps", min=0, max=MAX_STEPS, help="Override the settle steps.")]
_Resolution = Annotated[int, typer.Option("--resolution", help="Camera render size: 128, 224 or 256.")]
_LiveVideo = Annotated[int, typer.Option("--live-video", min=0, help="Also record the first K episodes' frames "
    "live (renders every step; `vlarl video` can re-simulate any episode instead).")]
_Seed = Annotated[int, typer.Option("--seed", min=0, max=2**31 - 1, help="Seed of the policy's sampling noise.")]
_RenderQuality = Annotated[str, typer.Option("--render-quality", help="LIBERO rendering: exact (the protocols'), "
    "fast (reflection pass off) or fast_noaa (also anti-aliasing off); not "
    "exact is recorded as a deviation.")]
_EnvSeed = Annotated[int | None, typer.Option("--env-seed", min=0, max=2**31 - 1, help="Env seed (default: the protocol's for the "
    "policy family: standard 7 openpi / 0 OFT; rlinf 0). A change from "
    "the standard protocol's is recorded as a deviation.")]
_Task = Annotated[str | None, typer.Option("--task", help="Evaluate on this ManiSkill3 built-in task (e.g. "
    "PickCube-v1) instead of LIBERO: episode i from episode seed (--env-seed or 0) + i, --episodes of "
    "them, --live-video K records the first K, cameras at the config's size unless --resolution "
    "is given (training/evaluation/maniskill.py).")]
_Episodes = Annotated[int, typer.Option("--episodes", min=1, max=MAX_EPISODES, help="ManiSkill (--task): number of episodes.")]
_Compare = Annotated[tuple[Path, Path] | None, typer.Option("--compare", help="Compare two results folders A B "
    "(B - A per task, Newcombe 95% interval) and exit; with --out, also "
    "write comparison.json there.")]
_Robustness = Annotated[list[Path] | None, typer.Option("--robustness", help="Per-category robustness report of "
    "one or two LIBERO-PRO results folders (repeat the option); "
    "writes robustness.json / .png into --out (default: the first).")]


def command(
    suite: _Suite = "libero_10",
    categories: _Categories = None,
    checkpoint: _Checkpoint = None,
    run: _Run = None,
    config: _Config = None,
    overrides: _Overrides = None,
    tasks: _Tasks = None,
    trials: _Trials = None,
    protocol: _Protocol = "standard",
    temperature: _Temperature = None,
    deterministic: _Deterministic = False,
    num_envs: _NumEnvs = 2,
    num_workers: _NumWorkers = None,
    out: _Out = None,
    resume: _Resume = True,
    max_steps: _MaxSteps = None,
    settle_steps: _SettleSteps = None,
    resolution: _Resolution = 256,
    live_video: _LiveVideo = 0,
    seed: _Seed = 0,
    render_quality: _RenderQuality = "exact",
    env_seed: _EnvSeed = None,
    task: _Task = None,
    episodes: _Episodes = 50,
    compare: _Compare = None,
    robustness: _Robustness = None,
) -> None:
    """Evaluate a policy on LIBERO with the standard protocol."""
    if compare is not None:
        _compare(compare, out)
        return
    if robustness:
        _robustness(list(robustness), out)
        return
    _check_options(deterministic, temperature, num_workers, num_envs)
    task_ids = _task_ids(tasks)
    _check_suite(suite, task)
    if task is not None:
        from vlarl_cli.training.evaluation.maniskill import ManiSkillEvalSettings, evaluate_maniskill

        ms = ManiSkillEvalSettings(task=task, episodes=episodes, num_envs=num_envs, max_steps=max_steps,
                                   temperature=temperature, policy_seed=seed, first_seed=env_seed or 0,
                                   videos=live_video, resolution=resolution if resolution != 256 else None)
        evaluate_maniskill(_policy_source(checkpoint, config, run), config, list(overrides or []), settings=ms,
                           out_dir=out)
        return
    from vlarl_cli.training.evaluation import EvalSettings

    settings = EvalSettings(suite=suite, tasks=task_ids, trials=_default_trials(suite, trials), protocol=protocol,
                            deterministic=temperature is None, temperature=temperature, num_envs=num_envs,
                            num_workers=num_workers, resolution=resolution, max_steps=max_steps,
                            settle_steps=settle_steps, policy_seed=seed, live_video=live_video,
                            env_seed=env_seed, render_quality=render_quality,
                            categories=tuple(c.strip() for c in categories.split(",") if c.strip()) if categories is not None else None)
    _evaluate_libero(settings, (checkpoint, config, run), list(overrides or []), out, resume)


def _check_options(deterministic: bool, temperature: float | None, num_workers: int | None, num_envs: int) -> None:
    """Options that exclude each other, or do not fit together, refused before anything is built."""
    from vlarl_cli.errors import ConfigError

    if deterministic and temperature is not None:
        raise ConfigError("--deterministic and --temperature exclude each other.", "Pass only one of them.")
    if num_workers is not None and (num_workers > num_envs or num_envs % num_workers):
        divisors = ", ".join(str(d) for d in range(1, num_envs + 1) if num_envs % d == 0)
        raise ConfigError(f"--num-workers {num_workers} does not divide --num-envs {num_envs}: every simulator "
                          "process hosts the same number of simulators.", f"Pass --num-workers one of {divisors}.")


def _check_suite(suite: str, task: str | None) -> None:
    """A ManiSkill task given as --suite is named, with the option that takes it."""
    from vlarl_cli.envs.maniskill.tasks import BUILTIN_TASKS
    from vlarl_cli.errors import ConfigError

    if task is None and suite in BUILTIN_TASKS:
        raise ConfigError(f'--suite takes LIBERO suites; "{suite}" is a ManiSkill task.', f"Use --task {suite}.")


def _default_trials(suite: str, trials: int | None) -> int:
    """--trials as given, else the protocol's: 50 per task; LIBERO-Plus's README evaluates with
    num_trials_per_task 1."""
    from vlarl_cli.envs.libero_plus import catalog as plus
    from vlarl_cli.envs.libero_plus import suites as plus_suites

    if trials is not None:
        return trials
    return 1 if plus.is_plus_split(suite) or plus_suites.is_plus_suite(suite) else 50


def _evaluate_libero(settings: EvalSettings, source: tuple[Path | None, str | None, Path | None], overrides: list[str],
                     out: Path | None, resume: bool) -> None:
    """Validate the settings (a mistyped suite or protocol is named before the choice of checkpoint), evaluate,
    and write the robustness report of a finished LIBERO-PRO / LIBERO-Plus split."""
    from vlarl_cli.envs.libero_plus import catalog as plus
    from vlarl_cli.envs.libero_plus import suites as plus_suites
    from vlarl_cli.envs.libero_pro.catalog import is_pro_split
    from vlarl_cli.training.evaluation import evaluate

    settings.validate()
    left_out = plus_suites.left_out(settings.categories) if plus.is_plus_split(settings.suite) else None
    if left_out:  # the split runs without them; said, never silent
        typer.echo(f"vlarl: {left_out}", err=True)
    checkpoint, config, run = source
    summary = evaluate(_policy_source(checkpoint, config, run), config, overrides, settings=settings,
                       out_dir=out, resume=resume)
    robustness_split = is_pro_split(settings.suite) or plus.is_plus_split(settings.suite)
    if robustness_split and summary.out_dir is not None and summary.complete:
        _robustness([Path(summary.out_dir)], None)


def _task_ids(tasks: str | None) -> tuple[int, ...] | None:
    """``--tasks 0,1,5`` as task ids (None: every task of the suite)."""
    from vlarl_cli.errors import ConfigError

    try:
        task_ids = tuple(int(t) for t in tasks.split(",") if t.strip()) if tasks is not None else None
    except ValueError:
        raise ConfigError(f'--tasks "{tasks}" is not a comma-separated list of integers.', "Use e.g. --tasks 0,1,5.") from None
    if task_ids == ():  # an empty value is a mistake (an unset shell variable), not "all tasks"
        raise ConfigError(f'--tasks "{tasks}" names no task.', "Use e.g. --tasks 0,1,5, or leave --tasks out for all.")
    twice = sorted({t for t in task_ids or () if task_ids.count(t) > 1}) if task_ids else []
    if twice:  # each would be planned (and simulated) twice, and counted twice in the episode total
        raise ConfigError(f'--tasks "{tasks}" names task {", ".join(map(str, twice))} more than once.',
                          "Name each task once, e.g. --tasks 0,1,5.")
    return task_ids


def _compare(folders: tuple[Path, Path], out: Path | None) -> None:
    """Print B - A; with --out, also write it there as comparison.json."""
    from vlarl_cli.training.evaluation.comparison import compare, write_comparison

    if out is not None:
        from vlarl_cli.checkpoints.atomic import check_writable_folder

        check_writable_folder(out, "The comparison's folder (--out)")  # before the folders are read
    result = compare(folders[0], folders[1])
    if out is not None:
        typer.echo(f"vlarl: comparison written to {write_comparison(result, out)}")


def _robustness(folders: list[Path], out: Path | None) -> None:
    """Print and write the per-category report of one or two LIBERO-PRO / LIBERO-Plus results folders."""
    from vlarl_cli.training.evaluation.robustness import print_report, report_from_folders, write_report

    report = report_from_folders(folders)
    print_report(report)
    paths = write_report(out or folders[0], report)
    typer.echo(f"robustness report: {paths[0]} and {paths[1]}")


def _policy_source(checkpoint: Path | None, config: str | None, run: Path | None) -> Path | None:
    """--checkpoint as given, else the newest checkpoint of --run or of the newest run (printed)."""
    from vlarl_cli.errors import ConfigError

    if run is not None and checkpoint is not None:
        raise ConfigError("--run and --checkpoint both name what to evaluate.", "Pass only one of them.")
    if checkpoint is not None or (config is not None and run is None):
        return checkpoint
    from vlarl_cli.distributed.dist import print0
    from vlarl_cli.training.runs import choose_checkpoint

    chosen = choose_checkpoint(run)
    where = f"of {run}" if run is not None else "of the newest run under runs/"
    print0(f"Evaluating the newest checkpoint {where}: {chosen}\n"
           f"  config: {config if config is not None else chosen / 'config.yaml'}")
    return chosen
