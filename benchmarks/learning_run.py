"""The two-stage pipeline end to end in real LIBERO on CPU: expert demos -> SFT -> eval -> RL -> eval.

    python benchmarks/learning_run.py --out runs/learning_run                 # the full run (~45 min, 2 cores)
    python benchmarks/learning_run.py --out runs/learning_short --short       # a few minutes: the pipeline only
    python benchmarks/learning_run.py --out /tmp/learning_smoke --smoke       # smaller still (CI)
    python benchmarks/learning_run.py --out runs/learning_run --docs docs/learning   # also copy the report
    python benchmarks/learning_run.py --out runs/learning_image --obs-mode image      # cameras on (see below)

``--obs-mode image`` (default ``state``) gives every stage a policy that reads both cameras (main + wrist, at
``--resolution`` px, rendered at ``--render-quality``) and the 8-d proprio instead of the privileged state:
demonstrations recorded with camera frames, SFT, evaluation and RL at the same camera settings. Its cost and
what has (not) been run: docs/learning/image_mode.md.

Stages (each one resumable: run the same command again and finished stages are skipped, SFT and RL continue
from their last checkpoint with ``--resume auto``, evaluations skip finished episodes):

1. ``init_model``: a pi0 policy of the ``tiny`` architecture with a wider action expert in LIBERO ``obs_mode:
   state`` (no camera: proprio + the goal objects' positions; random weights, built with the family's own
   ``preset`` / ``save_policy``), so the SFT stage starts from a folder;
2. ``record``: ``--demos`` successful scripted-expert episodes of ``--suite`` task(s) ``--tasks`` as a LeRobot
   v3.0 dataset, from freshly sampled initial placements (``init="sampled"``: never the 50 evaluation
   states), in ``--workers`` simulator processes; the expert's own success rate is reported;
3. ``sft``: ``vlarl sft --config sft_learning_run`` on that dataset (norm stats from the data);
4. ``eval_sft``: ``vlarl eval`` under the standard protocol (openpi / OpenVLA: trial i = init state i, 220 steps
   + 10 settle steps on libero_spatial, env seed 7, deterministic; here without camera) on ``--eval-trials``
   (50) states;
5. ``rl``: ``vlarl rl-train`` GRPO from the SFT checkpoint (``--rl-envs`` envs in groups of ``--group-size``
   sharing an init state, sparse success reward, ``--rl-iters`` iterations, a checkpoint every iteration);
6. ``eval_rl``: the same evaluation of the RL checkpoint;
7. ``report``: ``learning_run.json`` (rates, 95% Wilson intervals, whether they overlap, sample budget, wall
   time per stage, versions, the exact command) and ``learning_run.png`` (RL training success per iteration
   and the two evaluations). Prints ONE JSON line.

The RL stage trains on LIBERO's fixed init states (as RLinf does), which the evaluation also uses; the
demonstrations come from other placements. Nothing here claims learning: the report gives the measured
rates and intervals, and ``intervals_overlap`` says whether the improvement is significant.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _bench import add_smoke, emit

STAGES = ("init_model", "record", "sft", "eval_sft", "rl", "eval_rl", "report")
# The policy sees no image: LIBERO ``obs_mode: state`` gives it the 8-d proprio state plus the positions of the
# goal's object and target (14-d, privileged, like ManiSkill's state mode). On 2 CPU cores a 128 px render costs
# 70-300 ms (llvmpipe), 10-50x the physics step, so image policies could not learn within the budget here
# (``--obs-mode image`` runs them all the same: docs/learning/image_mode.md measures and projects that run).
OBS_MODE = "state"
#: the pi0 ``tiny`` architecture with a wider action expert (the VLM reads only the prompt in state mode)
MODEL = {"obs_mode": OBS_MODE, "state_env_dim": 14, "expert_width": 64, "expert_mlp": 256, "num_action_chunks": 5,
         "add_value_head": True}
#: ``--obs-mode image``: the same policy reading both cameras (main + wrist) and the 8-d proprio instead of the
#: privileged state. The env renders at ``--resolution`` (128 px at least: envs/libero/env.py RESOLUTIONS); the
#: policy resizes each frame to 64 px and cuts it into 16 px patches (16 tokens per camera, as many as the
#: ``tiny`` preset's 32 px / 8 px), so its vision tower costs about what the tiny preset's does on CPU.
MODEL_IMAGE = {"obs_mode": "rgb", "image_size": 64, "patch_size": 16, "expert_width": 64, "expert_mlp": 256,
               "num_action_chunks": 5, "add_value_head": True}
CAMERAS = ("main", "wrist")


def _image(args: argparse.Namespace) -> bool:
    return bool(args.obs_mode == "image")


def _model(args: argparse.Namespace) -> dict[str, Any]:
    return MODEL_IMAGE if _image(args) else MODEL


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "vlarl_cli.cli.main", *args]


def _run(cmd: list[str], log: Path) -> None:
    """Run a vlarl command, its output appended to ``log``; a failure stops the script with its tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(f"\n$ {shlex.join(cmd)}\n")
        f.flush()
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if code != 0:
        tail = "\n".join(log.read_text().splitlines()[-30:])
        raise SystemExit(f"stage command failed ({code}): {shlex.join(cmd)}\n{tail}")


class Stages:
    """Which stages are done and how long each took (``stages.json``, updated after every stage)."""

    def __init__(self, out: Path) -> None:
        self.path = out / "stages.json"
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def done(self, name: str) -> bool:
        return bool(self.data.get(name, {}).get("done"))

    def record(self, name: str, seconds: float, **info: Any) -> None:
        from vlarl_cli.checkpoints.atomic import atomic_write_json

        entry = self.data.setdefault(name, {"wall_s": 0.0})
        entry["wall_s"] = entry.get("wall_s", 0.0) + seconds
        entry.update(info, done=True)
        atomic_write_json(self.path, self.data)


def stage_init_model(out: Path, seed: int, model: dict[str, Any]) -> Path:
    import torch

    from vlarl_cli.policies.pi0.checkpoint import save_policy
    from vlarl_cli.policies.pi0.config import preset
    from vlarl_cli.policies.pi0.policy import Pi0Policy

    folder = out / "init_model"
    saved = folder / "vlarl_config.json"
    if saved.is_file():  # a resumed run: the folder must hold the policy of this --obs-mode
        had = json.loads(saved.read_text()).get("model", {}).get("obs_mode")
        if had != model["obs_mode"]:
            raise SystemExit(f"{out} holds a run with a policy of obs_mode {had}, not {model['obs_mode']}: pass "
                             "another --out, or the --obs-mode that run used.")
    else:
        torch.manual_seed(seed)
        cfg = preset("tiny", "pi0", **model)
        save_policy(Pi0Policy(cfg), folder, format="vlarl")
    return folder


def stage_record(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    from vlarl_cli.training.demos import read_recording_report, record_expert_dataset

    if (out / "demos" / "meta" / "info.json").is_file():  # written before an interruption: keep it
        report = read_recording_report(out / "demos")
    else:
        # image mode: every step's two camera frames go into the dataset (rendered at the chosen quality)
        env: dict[str, Any] = ({"resolution": args.resolution, "cameras": CAMERAS, "obs_mode": "rgb",
                                "render_quality": args.render_quality} if _image(args)
                               else {"resolution": 128, "cameras": (), "obs_mode": OBS_MODE})
        report = record_expert_dataset(out / "demos", args.demos, suite=args.suite, task_ids=args.tasks,
                                       max_episode_steps=220, settle_steps=10, protocol="standard",
                                       init="sampled", workers=args.workers, progress=print, **env)
    return {"attempts": report.attempts, "successes": report.successes, "kept": report.kept,
            "expert_success_rate": report.success_rate}


def _image_env(args: argparse.Namespace, splits: tuple[str, ...]) -> list[str]:
    """Image mode's camera size and render quality on the recipe's env splits (none in state mode)."""
    if not _image(args):
        return []
    return [f"env.{s}.{k}" for s in splits for k in (f"init_params.camera_heights={args.resolution}",
                                                      f"init_params.camera_widths={args.resolution}",
                                                      f"render_quality={args.render_quality}")]


def _sft_checkpoint(out: Path, steps: int) -> Path:
    return out / "sft" / "checkpoints" / f"global_step_{steps}"


def stage_sft(out: Path, args: argparse.Namespace, init: Path) -> None:
    run = out / "sft"
    cmd = _cli("sft", "--config", "sft_learning_run", "--demos", str(out / "demos"), "--steps", str(args.sft_steps),
               f"runner.logger.log_path={run}", f"actor.model.model_path={init}",
               "actor.model.openpi.config_name=pi0",  # plain pi0 processing: no delta-action transform
               f"sft.save_interval={max(1, args.sft_steps // 8)}", f"env.train.task_ids={list(args.tasks)}",
               *_image_env(args, ("train", "eval")))
    if (run / "checkpoints" / "latest").is_file():
        cmd += ["--resume", "auto"]
    _run(cmd, out / "logs" / "sft.log")


def stage_eval(out: Path, args: argparse.Namespace, checkpoint: Path, name: str) -> dict[str, Any]:
    results = out / name
    image = ["--render-quality", args.render_quality] if _image(args) else []
    _run(_cli("eval", "--suite", args.suite, "--tasks", ",".join(map(str, args.tasks)), "--trials",
              str(args.eval_trials), "--checkpoint", str(checkpoint), "--resolution", str(args.resolution),
              "--num-envs", str(args.workers), "--num-workers", str(args.workers), "--out", str(results), *image),
         out / "logs" / f"{name}.log")
    summary = json.loads((results / "summary.json").read_text())
    overall = next(r for r in summary["rows"] if r["level"] == "overall")
    return {k: overall[k] for k in ("n", "successes", "success_rate", "ci95_low", "ci95_high")}


def rl_overrides(out: Path, args: argparse.Namespace, sft_ckpt: Path) -> list[str]:
    """``vlarl rl-train --config libero_tiny_ppo`` turned into the learning run's GRPO stage."""
    steps = 220
    chunk_steps = steps // 5
    samples = args.rl_envs * chunk_steps
    batch = next(b for b in (64, 44, 32, 22, 16, 11, 8, 4, 2, 1) if samples % b == 0)
    return [
        f"runner.logger.log_path={out / 'rl'}", f"runner.max_epochs={args.rl_iters}", "runner.save_interval=1",
        "runner.val_check_interval=-1", "runner.logger.logger_backends=[]",
        f"actor.model.model_path={sft_ckpt}", "actor.model.openpi.config_name=pi0",
        "actor.model.openpi.train_expert_only=False",  # a small model: every weight trains, as in the SFT stage
        "algorithm.adv_type=grpo", "algorithm.loss_type=actor", f"algorithm.group_size={args.group_size}",
        f"algorithm.update_epoch={args.update_epochs}",
        f"env.train.group_size={args.group_size}", f"env.train.task_ids={list(args.tasks)}",
        f"env.train.total_num_envs={args.rl_envs}", f"env.train.num_workers={args.workers}",
        "env.train.protocol=standard", f"env.train.max_episode_steps={steps}",
        f"env.train.max_steps_per_rollout_epoch={steps}", "env.train.settle_steps=10",
        "env.train.use_step_penalty=False", "env.train.step_penalty=0.0", "env.train.video_cfg.save_video=False",
        f"actor.global_batch_size={batch}", f"actor.micro_batch_size={min(batch, 16) if batch % 16 == 0 else batch}",
        f"actor.optim.lr={args.rl_lr}", f"actor.seed={args.seed}", *_image_env(args, ("train",)),
    ]


def stage_rl(out: Path, args: argparse.Namespace, sft_ckpt: Path) -> None:
    cmd = _cli("rl-train", "--config", "libero_tiny_ppo", *rl_overrides(out, args, sft_ckpt))
    if (out / "rl" / "checkpoints" / "latest").is_file():
        cmd += ["--resume", "auto"]
    _run(cmd, out / "logs" / "rl.log")


def _rl_checkpoint(out: Path) -> Path:
    latest = out / "rl" / "checkpoints" / "latest"
    return latest.parent / latest.read_text().strip()


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "platform": platform.platform()}
    git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent)
    out["vlarl_commit"] = git.stdout.strip() if git.returncode == 0 else "unknown"
    for name in ("vlarl", "torch", "robosuite", "mujoco", "libero", "pyarrow", "av"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "not installed"
    return out


def stage_report(out: Path, args: argparse.Namespace, stages: Stages) -> dict[str, Any]:
    from vlarl_cli.checkpoints.atomic import atomic_write_json

    sft_eval, rl_eval = stages.data["eval_sft"]["result"], stages.data["eval_rl"]["result"]
    curve = []
    metrics = out / "rl" / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            row = json.loads(line)
            if "env/success_any_step" in row:
                curve.append({"iteration": row.get("step"), "train_success": row["env/success_any_step"]})
    episodes_per_iter = args.rl_envs
    report = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "suite": args.suite, "tasks": list(args.tasks), "policy": f"pi0 tiny architecture, {_model(args)}",
        "demonstrations": stages.data["record"]["info"], "sft_steps": args.sft_steps,
        "eval_protocol": "standard (trial i = init state i, 220 + 10 settle steps, env seed 7, deterministic), "
                         + (f"LIBERO obs_mode rgb (main + wrist cameras at {args.resolution} px, render_quality "
                            f"{args.render_quality})" if _image(args) else f"LIBERO obs_mode {OBS_MODE} (no camera)"),
        "sft": sft_eval, "rl": rl_eval,
        "improvement": rl_eval["success_rate"] - sft_eval["success_rate"],
        "intervals_overlap": not (rl_eval["ci95_low"] > sft_eval["ci95_high"]
                                  or sft_eval["ci95_low"] > rl_eval["ci95_high"]),
        "rl_budget": {"iterations": args.rl_iters, "episodes": args.rl_iters * episodes_per_iter,
                      "env_steps_max": args.rl_iters * episodes_per_iter * 220, "algorithm": "GRPO",
                      "group_size": args.group_size},
        "rl_curve": curve,
        "wall_s": {k: round(v.get("wall_s", 0.0), 1) for k, v in stages.data.items() if isinstance(v, dict)},
        "versions": _versions(),
    }
    atomic_write_json(out / "learning_run.json", report)
    _plot(out / "learning_run.png", report)
    if args.docs:
        import shutil

        docs = Path(args.docs)
        docs.mkdir(parents=True, exist_ok=True)
        for name in ("learning_run.json", "learning_run.png"):
            shutil.copyfile(out / name, docs / name)
    return report


def _plot(path: Path, report: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    if report["rl_curve"]:
        a.plot([c["iteration"] for c in report["rl_curve"]], [c["train_success"] for c in report["rl_curve"]], "o-")
    a.set(xlabel="RL iteration", ylabel="training success rate", title="GRPO rollouts", ylim=(-0.02, 1.02))
    for i, key in enumerate(("sft", "rl")):
        r = report[key]
        b.errorbar([i], [r["success_rate"]], yerr=[[r["success_rate"] - r["ci95_low"]], [r["ci95_high"] - r["success_rate"]]],
                   fmt="o", capsize=6)
        b.annotate(f"{r['successes']}/{r['n']}", (i, r["success_rate"]), textcoords="offset points", xytext=(8, 0))
    b.set(xticks=[0, 1], xticklabels=["after SFT", "after RL"], ylabel="success (95% Wilson)", ylim=(-0.02, 1.02),
          xlim=(-0.5, 1.5), title=f"{report['suite']} tasks {report['tasks']}, standard protocol")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/learning_run")
    ap.add_argument("--docs", default=None, help="Also copy learning_run.json / .png into this folder.")
    ap.add_argument("--short", action="store_true", help="Pipeline check: 4 demos, 40 SFT steps, 1 RL iteration "
                    "of 4 envs, 4 evaluation trials. Proves the stages run, measures nothing.")
    ap.add_argument("--suite", default="libero_spatial")
    ap.add_argument("--tasks", default="0", help="Comma-separated task ids.")
    ap.add_argument("--demos", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2, help="Simulator processes (recording, evaluation, RL).")
    ap.add_argument("--sft-steps", type=int, default=None,
                    help="Default 2000 in state mode, 8000 in image mode (2000 left the image policy at 1 / 50 on "
                         "the 50 init states, 8000 at 20 / 50: docs/learning/image_mode.md).")
    ap.add_argument("--eval-trials", type=int, default=50)
    ap.add_argument("--rl-iters", type=int, default=30)
    ap.add_argument("--rl-envs", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--update-epochs", type=int, default=1)
    ap.add_argument("--rl-lr", type=float, default=2e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--obs-mode", choices=("state", "image"), default="state",
                    help="state: no camera, privileged object positions (docs/learning); image: the policy reads "
                         "both cameras and the proprio (docs/learning/image_mode.md).")
    ap.add_argument("--resolution", type=int, default=None, choices=(128, 224, 256),
                    help="Image mode: the cameras' size in px (default 128; the policy resizes to 64).")
    ap.add_argument("--render-quality", default=None, choices=("exact", "fast", "fast_noaa"),
                    help="Image mode: LIBERO rendering (default exact; fast = reflection pass off, ~1.7x cheaper "
                         "frames, printed as a deviation on the evaluation cards).")
    add_smoke(ap)
    args = ap.parse_args(argv)
    if args.obs_mode == "state" and (args.resolution is not None or args.render_quality is not None):
        ap.error("--resolution and --render-quality apply to --obs-mode image only (state mode renders no "
                 "camera); drop them or add --obs-mode image.")
    args.resolution = args.resolution or 128
    args.render_quality = args.render_quality or "exact"
    if args.sft_steps is None:
        args.sft_steps = 8000 if args.obs_mode == "image" else 2000
    if args.smoke:
        args.demos, args.sft_steps, args.eval_trials = 1, 2, 1
        args.rl_iters, args.rl_envs, args.group_size = 1, 2, 2
    elif args.short:
        args.demos, args.sft_steps, args.eval_trials = 4, 40, 4
        args.rl_iters, args.rl_envs, args.group_size = 1, 4, 2
    args.tasks = tuple(int(t) for t in str(args.tasks).split(",") if t.strip())
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    out = Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    stages = Stages(out)
    init = stage_init_model(out, args.seed, _model(args))
    sft_ckpt = _sft_checkpoint(out, args.sft_steps)
    for name in STAGES[1:]:
        if stages.done(name) and name != "report":
            continue
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        info: dict[str, Any] = {}
        if name == "record":
            info["info"] = stage_record(out, args)
        elif name == "sft":
            stage_sft(out, args, init)
        elif name == "eval_sft":
            info["result"] = stage_eval(out, args, sft_ckpt, "eval_sft")
        elif name == "rl":
            stage_rl(out, args, sft_ckpt)
        elif name == "eval_rl":
            info["result"] = stage_eval(out, args, _rl_checkpoint(out), "eval_rl")
        else:
            report = stage_report(out, args, stages)
            summary = {k: report[k] for k in ("sft", "rl", "improvement", "intervals_overlap", "wall_s")}
            emit({"benchmark": "learning_run", **summary}, smoke=args.smoke)
            return report
        stages.record(name, time.perf_counter() - t0, **info)
    raise AssertionError("unreachable")


if __name__ == "__main__":
    main()
