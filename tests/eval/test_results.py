"""Episode planning, the crash-safe episode log, card checks, summaries and comparisons (no simulator)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from vlarl_cli.errors import EnvError
from vlarl_cli.training.evaluation import (
    EpisodeKey,
    EvalSettings,
    batch_note,
    card_conflicts,
    compare,
    compute_note,
    make_card,
    plan_episodes,
    split_blocks,
    summarize,
    wilson_interval,
    workers_for,
    write_summary,
)
from vlarl_cli.video.episodes import CARD, EPISODES, EpisodeLog, EpisodeRecord, ResultsError


def record(suite: str, task: int, trial: int, success: bool, steps: int = 10) -> EpisodeRecord:
    return EpisodeRecord(suite=suite, task=task, trial=trial, reset_state_id=task * 50 + trial,
                         task_name=f"task_{task}", language=f"do task {task}", success=success, steps=steps,
                         seed=7, max_steps=220, settle_steps=10)


class _Policy:
    num_action_chunks = 5
    cameras = ("main", "wrist")


# ------------------------------------------------------------------ planning


def test_plan_counts_and_order() -> None:
    plan = plan_episodes("libero_spatial", (3, 1), 2)
    assert plan == [EpisodeKey("libero_spatial", 3, 0), EpisodeKey("libero_spatial", 3, 1),
                    EpisodeKey("libero_spatial", 1, 0), EpisodeKey("libero_spatial", 1, 1)]
    full = plan_episodes("all", None, 50)
    assert len(full) == 4 * 10 * 50 == len(set(full))
    assert [k.suite for k in full[::500]] == ["libero_spatial", "libero_object", "libero_goal", "libero_10"]
    assert len(plan_episodes("libero_90", None, 50)) == 4500


def test_plan_refuses_more_trials_than_a_task_has_init_states(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trial i plays init state i; LIBERO-Plus's layout tasks have one (init_files/libero_newobj): the plan names
    that before any simulator starts, instead of an index error in a worker."""
    from dataclasses import replace

    from vlarl_cli.envs.libero import suites as S

    real = S.get_task
    layout = replace(real("libero_spatial", 1), init_states_file=Path("/r/init_files/libero_newobj/x/t.pruned_init"))
    monkeypatch.setattr(S, "get_task", lambda suite, t: layout if t == 1 else real(suite, t))
    assert S.num_init_states("libero_spatial", 1) == 1 and S.num_init_states("libero_spatial", 3) == 50
    assert len(plan_episodes("libero_spatial", (3, 1), 1)) == 2
    with pytest.raises(EnvError, match=r"1 of the 2 tasks have fewer than 2 init states \(e\.g\. libero_spatial task "
                                       r"1: 1; .*--trials 1"):
        plan_episodes("libero_spatial", (3, 1), 2)


def test_plan_libero130_maps_to_original_suites() -> None:
    plan = plan_episodes("libero_130", (0, 10, 39, 40, 129), 1)
    # RLinf's libero_130 order: spatial, object, goal, 90, 10
    assert [(k.suite, k.task) for k in plan] == [("libero_spatial", 0), ("libero_object", 0), ("libero_90", 9),
                                                ("libero_90", 10), ("libero_10", 9)]
    # and back: the vector env (suite libero_130) gets the right flat reset-state ids
    assert [k.libero130_task for k in plan] == [0, 10, 39, 40, 129]
    assert EpisodeKey("libero_goal", 2, 7).libero130_reset_state_id == 22 * 50 + 7


def test_plan_rejects_bad_input() -> None:
    with pytest.raises(EnvError, match="out of range"):
        plan_episodes("libero_10", (10,), 1)
    with pytest.raises(EnvError, match="trials"):
        plan_episodes("libero_10", None, 51)
    with pytest.raises(EnvError, match="Did you mean"):
        plan_episodes("libero_spatail", None, 1)


def test_split_blocks_cover_each_item_once() -> None:
    for n_items in range(0, 23):
        items = list(range(n_items))
        for parts in range(1, 6):
            blocks = split_blocks(items, parts)
            assert len(blocks) == parts
            assert [x for b in blocks for x in b] == items  # contiguous, in order, each once
            sizes = [len(b) for b in blocks]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_ranks_partition_the_remaining_episodes() -> None:
    plan = plan_episodes("libero_goal", None, 50)
    finished = set(plan[::7])
    todo = [k for k in plan if k not in finished]
    per_rank = [split_blocks(todo, 3)[r] for r in range(3)]
    assert sorted(k for part in per_rank for k in part) == sorted(todo)


def test_workers_divide_envs() -> None:
    assert workers_for(6, 4) == 3
    assert workers_for(5, None) in (1, 5)
    assert workers_for(1, 8) == 1


# ------------------------------------------------------------------ episode log


def test_log_round_trip_and_torn_line(tmp_path: Path) -> None:
    log = EpisodeLog(tmp_path / EPISODES)
    recs = [record("libero_10", 0, i, i % 2 == 0) for i in range(3)]
    for r in recs:
        log.append(r)
    back = log.read()
    assert [(r.key, r.success, r.steps) for r in back] == [(r.key, r.success, r.steps) for r in recs]
    # a crash in the middle of a write leaves a partial last line: reading ignores it, repair cuts it
    full = log.path.read_bytes()
    log.path.write_bytes(full + b'{"suite":"libero_10","task":0,"tri')
    assert len(log.read()) == 3
    assert log.repair() == len(b'{"suite":"libero_10","task":0,"tri')
    assert log.path.read_bytes() == full
    log.append(record("libero_10", 0, 3, True))
    assert [r.trial for r in log.read()] == [0, 1, 2, 3]


def test_log_bad_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / EPISODES
    path.write_text('{"a": 1\n' + record("libero_10", 0, 0, True).to_json() + "\n")
    with pytest.raises(ResultsError, match="line 1"):
        EpisodeLog(path).read()


# ------------------------------------------------------------------ card, summary


def test_card_conflicts_ignore_plan_only() -> None:
    s = EvalSettings(suite="libero_10", trials=5, max_steps=20, resolution=128)
    plan = plan_episodes("libero_10", (0,), 5)
    card = make_card(s, _Policy(), None, plan)
    more = make_card(EvalSettings(suite="libero_10", trials=10, max_steps=20, resolution=128), _Policy(), None,
                     plan_episodes("libero_10", (0, 1), 10))
    assert card_conflicts(card, more) == []
    other = make_card(EvalSettings(suite="libero_10", trials=5, max_steps=30, resolution=128), _Policy(), None, plan)
    assert card_conflicts(card, other) == ["max_steps"]
    rlinf = make_card(EvalSettings(suite="libero_10", protocol="rlinf", resolution=128), _Policy(), None, plan)
    assert {"protocol", "settle_steps"} <= set(card_conflicts(card, rlinf))
    assert card["replan_size"] == 5 and card["max_steps"] == {"libero_10": 20}
    assert any("max_steps=20" in d for d in card["deviations"])
    standard = make_card(EvalSettings(suite="libero_10"), _Policy(), None, plan_episodes("libero_10", None, 50))
    assert standard["deviations"] == [] and standard["max_steps"] == {"libero_10": 520}
    assert standard["settle_steps"] == 10 and standard["env_seed"] == 7


def test_a_resume_at_another_policy_batch_is_said_not_refused() -> None:
    plan = plan_episodes("libero_10", (0,), 5)
    four, two = (make_card(EvalSettings(suite="libero_10", trials=5, num_envs=n), _Policy(), None, plan) for n in (4, 2))
    assert four["policy_batch"] == 4 and card_conflicts(four, two) == []
    note = batch_note(four, two)
    assert note is not None and "batch of 2 where the first run used 4" in note and "--num-envs 4" in note
    assert batch_note(four, four) is None
    assert batch_note({k: v for k, v in four.items() if k != "policy_batch"}, two) is None  # a card from before it


def test_summary_rates_and_files(tmp_path: Path) -> None:
    plan = plan_episodes("libero_spatial", (0, 1), 4)
    outcomes = {0: [True, True, False, True], 1: [False, False, False, True]}
    recs = [record(k.suite, k.task, k.trial, outcomes[k.task][k.trial], steps=50 + k.trial) for k in plan]
    recs.append(record("libero_spatial", 0, 2, True))  # a duplicate line: the first one counts
    card = make_card(EvalSettings(suite="libero_spatial", tasks=(0, 1), trials=4), _Policy(), None, plan)
    summary = summarize(recs, card, plan)
    rates = {(r.level, r.task): (r.n, r.successes) for r in summary.rows}
    assert rates == {("task", 0): (4, 3), ("task", 1): (4, 1), ("suite", None): (8, 4), ("overall", None): (8, 4)}
    assert summary.complete
    overall = summary.overall
    assert (overall.ci95_low, overall.ci95_high) == wilson_interval(4, 8)
    assert summary.rows[0].mean_steps_success == pytest.approx((50 + 51 + 53) / 3)
    m = summary.metrics()
    assert m["eval/success_rate"] == 0.5 and m["eval/libero_spatial/num_episodes"] == 8.0
    write_summary(tmp_path, summary)
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert [r["level"] for r in rows] == ["task", "task", "suite", "overall"]
    assert all(r["protocol"] == "standard" and r["max_steps"] for r in rows)
    assert json.loads((tmp_path / "summary.json").read_text())["rows"][2]["successes"] == 4
    # an unfinished plan is reported as incomplete
    partial = summarize(recs[:5], card, plan)
    assert not partial.complete and partial.finished == 5


# ------------------------------------------------------------------ compare


def _folder(path: Path, outcomes: list[bool], sha: str) -> Path:
    plan = [EpisodeKey("libero_10", 0, i) for i in range(len(outcomes))]
    card = make_card(EvalSettings(suite="libero_10", tasks=(0,), trials=len(outcomes)), _Policy(), None, plan)
    card["checkpoint"] = {"sha256": sha}
    path.mkdir()
    (path / CARD).write_text(json.dumps(card))
    log = EpisodeLog(path / EPISODES)
    for k, ok in zip(plan, outcomes, strict=True):
        log.append(record(k.suite, k.task, k.trial, ok))
    return path


def test_compare_significance(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", [i < 10 for i in range(50)], "aaa")  # 10/50
    b = _folder(tmp_path / "b", [i < 40 for i in range(50)], "bbb")  # 40/50
    c = _folder(tmp_path / "c", [i < 13 for i in range(50)], "ccc")  # 13/50
    big = compare(a, b, show=False)
    task = big.rows[0]
    assert (task.rate_a, task.rate_b, task.difference) == pytest.approx((0.2, 0.8, 0.6))
    assert task.significant and big.card_differences == []
    small = compare(a, c, show=False)
    assert not small.rows[0].significant  # 20% vs 26%: the interval contains 0
    with pytest.raises(ResultsError):
        compare(a, tmp_path, show=False)


def test_training_eval_maps_the_eval_split(monkeypatch: pytest.MonkeyPatch) -> None:
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training import evaluation

    seen = {}

    def fake(policy, settings, **kw):
        seen.update(settings=settings, **kw)
        plan = plan_episodes(settings.suite, settings.tasks, settings.trials)
        recs = [record(k.suite, k.task, k.trial, k.trial == 0) for k in plan]
        return summarize(recs, make_card(settings, _Policy(), None, plan), plan)

    monkeypatch.setattr(evaluation, "evaluate_policy", fake)
    config = load_config("libero_tiny_ppo", ["env.eval.total_num_envs=4", "env.eval.rollout_epoch=2"]).config

    class P(_Policy):
        training = True

        def eval(self) -> None:
            self.training = False

        def train(self) -> None:
            self.training = True

    policy = P()
    metrics = evaluation.training_eval_metrics(policy, config, rank=1, world_size=2)
    s = seen["settings"]
    assert (s.suite, s.tasks, s.trials) == ("libero_spatial", (0,), 8)  # 4 envs x 2 epochs over 1 task
    assert (s.max_steps, s.settle_steps, s.num_envs, s.resolution) == (40, 5, 2, 128)
    assert s.deterministic and seen["rank"] == 1 and seen["world_size"] == 2
    assert metrics["eval/success_rate"] == pytest.approx(1 / 8)
    assert metrics["eval/libero_spatial/num_episodes"] == 8.0
    assert policy.training  # restored


class _Pi0:
    """pi0 as the RL recipes build it: a 10-action chunk, 4 denoising steps."""

    num_action_chunks = 10
    cameras = ("main", "wrist")

    class cfg:
        num_steps = 4


def test_card_follows_the_family_entry_of_the_protocol() -> None:
    plan = plan_episodes("libero_spatial", (0,), 50)
    pi0 = EvalSettings(suite="libero_spatial", model_type="pi0")
    card = make_card(pi0, _Pi0(), None, plan)
    # openpi examples/libero/main.py: replan every 5 (the runner executes the first 5 of the 10), seed 7
    assert card["replan_size"] == 5 and pi0.replan(10) == 5 and card["env_seed"] == 7
    assert card["denoising_steps"] == 4
    assert card["deviations"] == ["4 denoising steps (protocol: 10, openpi examples/libero/main.py "
                                  "(replan_steps=5) with Pi0Config num_steps=10)"]
    assert card["env_seed_applied"].startswith("once") and card["reset"] == "hard" and card["eval_order"] == "task_major"
    # a chunk shorter than the protocol's replan size cannot be fixed: it is a deviation
    short = make_card(pi0, type("P", (_Pi0,), {"num_action_chunks": 4})(), None, plan)
    assert short["replan_size"] == 4 and any("replans every 4 steps (protocol: 5" in d for d in short["deviations"])
    # OFT: seed 0 and 8 actions open loop; an explicit --env-seed 7 is a deviation for it
    oft = EvalSettings(suite="libero_spatial", model_type="openvla_oft")
    assert oft.effective_env_seed == 0 and oft.replan(8) == 8
    assert EvalSettings(suite="libero_spatial", model_type="openvla_oft", env_seed=7).deviations(["libero_spatial"]) \
        == ["env_seed=7 (protocol: 0)"]
    # soft resets under standard break openpi's random stream: a deviation
    assert "soft resets (protocol: hard)" in EvalSettings(suite="libero_spatial", hard_reset=False).deviations()
    # rlinf: no family entry, the whole chunk; its seed is a parameter (no deviation), trial-major order
    rl = make_card(EvalSettings(suite="libero_spatial", protocol="rlinf", env_seed=3, model_type="pi0"),
                   _Pi0(), None, plan)
    assert rl["replan_size"] == 10 and rl["env_seed"] == 3 and rl["eval_order"] == "trial_major"
    assert not any("seed" in d for d in rl["deviations"])



def test_a_resume_on_other_kernels_is_said_not_refused() -> None:
    """The card records where its numbers were computed; a resume on another CPU's kernels or another torch
    is said (the last float bits may differ), not refused, and a card from before the record says nothing."""
    import torch

    plan = plan_episodes("libero_10", (0,), 5)
    here = make_card(EvalSettings(suite="libero_10", trials=5), _Policy(), None, plan)
    assert here["compute"] == {"torch": torch.__version__, "device": "cpu",
                               "cpu_kernels": torch.backends.cpu.get_cpu_capability()}
    there = {**here, "compute": {**here["compute"], "cpu_kernels": "AVX512_NOT_HERE"}}
    assert card_conflicts(there, here) == []
    note = compute_note(there, here)
    assert note is not None and f"cpu_kernels AVX512_NOT_HERE -> {here['compute']['cpu_kernels']}" in note
    assert compute_note(here, here) is None
    assert compute_note({k: v for k, v in here.items() if k != "compute"}, here) is None
