"""GRPO vs RLOO vs dynamic sampling on the LIBERO state-mode learning setup, at one sample budget.

    python benchmarks/algorithm_comparison.py --out runs/algorithms --docs docs/learning   # ~1 h on 2 cores

Every run starts from the SFT checkpoint of ``docs/learning`` (``builtin:pi0_state_libero_spatial_t0_sft``) with
the RL stage of ``benchmarks/learning_run.py`` (libero_spatial task 0, 16 envs in groups of 4 sharing an init
state, sparse success reward, lr 2e-5, 1 update epoch, every weight) and differs only in the algorithm:

* ``grpo``: ``adv_type grpo`` (group-normalised scores), 30 iterations;
* ``rloo``: ``adv_type rloo`` (leave-one-out baseline, not normalised, as verl's ``rloo``), 30 iterations;
* ``dynamic_sampling``: ``grpo`` with ``dynamic_sampling`` (``max_sampling_draws`` 4): each iteration draws
  until its 4 group slots hold groups whose episodes differ, so it trains on fewer iterations.

The sample budget is the number of trajectories collected, ``--budget`` (480 = 30 iterations x 16); a dynamic
sampling run stops at the last iteration that stays within it (``rollout/drawn_trajectories``). Each result
is the final checkpoint evaluated on all 50 init states (standard protocol, deterministic), with 95% Wilson
intervals. Resumable: run the command again (training resumes with ``--resume auto``, evaluations skip
finished episodes); ``--piece-s`` bounds one training command and ``--lock FILE`` runs each heavy command under
``flock FILE`` (the machine is shared). Prints ONE JSON line. ``--smoke``: GRPO only, 2 envs, one iteration,
one evaluation episode (the code path, in minutes).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import learning_run
from _bench import add_smoke, emit

SFT = "builtin:pi0_state_libero_spatial_t0_sft"
ALGORITHMS: dict[str, list[str]] = {
    "grpo": [],
    "rloo": ["algorithm.adv_type=rloo", "algorithm.normalize_advantages=False"],
    "dynamic_sampling": ["algorithm.dynamic_sampling=True", "algorithm.max_sampling_draws=4"],
}


def _drawn(run: Path, envs: int) -> list[float]:
    """Trajectories collected by each finished iteration (from ``metrics.jsonl``)."""
    path = run / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return [row.get("rollout/drawn_trajectories", float(envs)) for row in rows if "train/actor/optimizer_steps" in row]


def _iterations_within(drawn: list[float], budget: int) -> int:
    total, n = 0.0, 0
    for d in drawn:
        if total + d > budget:
            break
        total, n = total + d, n + 1
    return n


def train(name: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Train ``name`` in pieces until the budget is spent; the iteration of the checkpoint to evaluate."""
    run = out / name
    base = learning_run.rl_overrides(out, args, Path(SFT))
    base = [o for o in base if not o.startswith(("runner.logger.log_path=", "runner.max_epochs=",
                                                 "actor.model.model_path="))]
    base += [f"runner.logger.log_path={run}", f"actor.model.model_path={SFT}", *ALGORITHMS[name]]
    per_iter_max = args.rl_envs * (4 if name == "dynamic_sampling" else 1)
    while True:
        drawn = _drawn(run, args.rl_envs)
        used = sum(drawn)
        if used >= args.budget or (name != "dynamic_sampling" and len(drawn) >= args.budget // args.rl_envs):
            break
        target = len(drawn) + max(1, int((args.budget - used) // per_iter_max))
        cmd = [*learning_run._cli("rl-train", "--config", "libero_tiny_ppo", *base, f"runner.max_epochs={target}")]
        if (run / "checkpoints" / "latest").is_file():
            cmd += ["--resume", "auto"]
        piece = [*_lock(args), "timeout", "-s", "INT", str(args.piece_s), "nice", "-n", "10", *cmd]
        log = out / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(f"\n$ {shlex.join(piece)}\n")
            f.flush()
            code = subprocess.run(piece, stdout=f, stderr=subprocess.STDOUT).returncode
        if code not in (0, 124, 130):
            raise SystemExit(f"{name}: training failed ({code}), see {log}")
    drawn = _drawn(run, args.rl_envs)
    n = _iterations_within(drawn, args.budget)
    return {"iterations": n, "trajectories": sum(drawn[:n]), "iterations_run": len(drawn),
            "checkpoint": str(run / "checkpoints" / f"global_step_{n}")}


def _lock(args: argparse.Namespace) -> list[str]:
    return ["flock", args.lock] if args.lock else []


def evaluate(name: str, out: Path, args: argparse.Namespace, checkpoint: str) -> dict[str, Any]:
    results = out / f"eval_{name}"
    cmd = learning_run._cli("eval", "--suite", args.suite, "--tasks", ",".join(map(str, args.tasks)), "--trials",
                            str(args.eval_trials), "--checkpoint", checkpoint, "--resolution", "128", "--num-envs",
                            str(args.workers), "--num-workers", str(args.workers), "--out", str(results))
    log = out / "logs" / f"eval_{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        code = subprocess.run([*_lock(args), "nice", "-n", "10", *cmd], stdout=f,
                              stderr=subprocess.STDOUT).returncode
    if code:
        raise SystemExit(f"evaluation of {name} failed ({code}), see {log}")
    summary = json.loads((results / "summary.json").read_text())
    overall = next(r for r in summary["rows"] if r["level"] == "overall")
    return {k: overall[k] for k in ("n", "successes", "success_rate", "ci95_low", "ci95_high")}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/algorithms")
    ap.add_argument("--docs", default=None, help="Also write algorithms.json into this folder.")
    ap.add_argument("--only", default=",".join(ALGORITHMS), help="Comma-separated subset of " + ",".join(ALGORITHMS))
    ap.add_argument("--budget", type=int, default=480, help="Trajectories collected per run.")
    ap.add_argument("--piece-s", type=int, default=1140, help="Wall-clock bound of one training command.")
    ap.add_argument("--no-sft-eval", action="store_true", help="Skip evaluating the SFT checkpoint itself.")
    ap.add_argument("--lock", default=None, help="Run each training / evaluation command under `flock LOCK`.")
    add_smoke(ap)
    args, rest = ap.parse_known_args(argv)
    if args.smoke:
        args.only, args.budget, args.no_sft_eval = "grpo", 2, True
        rest = [*rest, "--smoke"]
    lr = learning_run.parse(rest)
    for k, v in vars(args).items():
        setattr(lr, k, v)
    out = Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / "comparison.json"
    state: dict[str, Any] = json.loads(state_path.read_text()) if state_path.is_file() else {}
    todo = ([] if args.no_sft_eval else ["sft"]) + [a for a in args.only.split(",") if a]
    for name in todo:
        entry = state.setdefault(name, {})
        t0 = time.perf_counter()
        if name != "sft" and "train" not in entry:
            entry["train"] = train(name, out, lr)
        ckpt = SFT if name == "sft" else entry["train"]["checkpoint"]
        if "eval" not in entry:
            entry["eval"] = evaluate(name, out, lr, ckpt)
        entry["wall_s"] = entry.get("wall_s", 0.0) + time.perf_counter() - t0
        state_path.write_text(json.dumps(state, indent=1))
    report = {"command": shlex.join([sys.executable, *sys.argv]), "budget_trajectories": args.budget,
              "rl_settings": learning_run.rl_overrides(out, lr, Path(SFT)), "algorithms": ALGORITHMS,
              "results": state, "versions": learning_run._versions()}
    if args.docs:
        Path(args.docs, "algorithms.json").write_text(json.dumps(report, indent=1) + "\n")
        Path(args.docs, "algorithms_table.md").write_text(markdown_table(report))
    emit({"benchmark": "algorithm_comparison", **{k: v.get("eval") for k, v in state.items()}}, smoke=args.smoke)
    return report


LABELS = {"sft": "SFT checkpoint (the start of every arm)", "grpo": "GRPO", "rloo": "RLOO",
          "dynamic_sampling": "GRPO + dynamic sampling"}


def markdown_table(report: dict[str, Any]) -> str:
    """The comparison as a markdown table: per arm the iterations and trajectories trained on, the evaluation on
    all init states with its 95% Wilson interval, and its difference from the SFT checkpoint and from GRPO
    (Newcombe's 95% interval, as ``vlarl eval --compare``)."""
    from vlarl_cli.training.evaluation.stats import newcombe_interval

    results = report["results"]

    def versus(base: str, ev: dict[str, Any]) -> str:
        other = results.get(base, {}).get("eval")
        if other is None or other is ev:
            return ""
        d, lo, hi = newcombe_interval(other["successes"], other["n"], ev["successes"], ev["n"])
        return f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]"

    lines = ["| arm | iterations | trajectories | success | 95% Wilson | vs SFT | vs GRPO |", "|---|---|---|---|---|---|---|"]
    for name in ("sft", *ALGORITHMS):
        entry = results.get(name, {})
        ev, tr = entry.get("eval"), entry.get("train", {})
        if ev is not None:
            lines.append(f"| {LABELS[name]} | {tr.get('iterations', 0)} | {int(tr.get('trajectories', 0))} | "
                         f"{ev['successes']} / {ev['n']} ({ev['success_rate']:.2f}) | [{ev['ci95_low']:.2f}, "
                         f"{ev['ci95_high']:.2f}] | {versus('sft', ev)} | {versus('grpo', ev) if name != 'sft' else ''} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
