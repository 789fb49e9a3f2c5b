"""The training console: one short line per iteration, and dependency noise hidden unless --verbose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vlarl_cli.logging import quiet
from vlarl_cli.logging.progress import Progress, summary_line

RLINF_NAMES = {"env/success_once": 0.5, "eval/success_once": 0.625, "env/return": 1.25,
               "train/actor/total_loss": 0.012341, "train/actor/policy_loss": -0.5, "train/critic/value_loss": 2.5,
               "time/env_steps_per_s": 41.04, "time/generate_rollouts": 12.34, "time/cal_adv_and_returns": 0.06,
               "time/actor_training": 4.5, "time/eval": 3.0, "train/actor/grad_norm": 7.0}


def test_summary_line_holds_the_few_numbers_that_matter() -> None:
    assert summary_line(3, 10, RLINF_NAMES) == (
        "iter  3/10 | success 0.50 | eval success 0.62 | return 1.25 | loss 0.01234 | value loss 2.5 | "
        "env steps/s 41.0 | collect 12.3s adv 0.1s update 4.5s eval 3.0s")


def test_summary_line_reads_the_older_names_and_leaves_out_what_is_absent() -> None:
    old = {"env/success_once": 1.0, "actor/loss": 0.5, "actor/policy_loss": 9.0, "time/collect": 2.0,
           "time/actor": 1.0, "time/env_steps_per_s": 3.0, "actor/grad_norm": 5.0}
    assert summary_line(1, 3, old) == "iter 1/3 | success 1.00 | loss 0.5 | env steps/s 3.0 | collect 2.0s update 1.0s"
    assert summary_line(2, 3, {"actor/loss": float("nan")}) == "iter 2/3 | loss nan"
    assert summary_line(2, 3, {}) == "iter 2/3"


def test_progress_prints_one_line_per_iteration(capsys: pytest.CaptureFixture[str]) -> None:
    bar = Progress(total=2, enabled=True)
    bar.update(1, RLINF_NAMES)
    bar.update(2, {"env/success_once": 1.0})
    bar.close()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("iter")]
    assert lines == [summary_line(1, 2, RLINF_NAMES), "iter 2/2 | success 1.00"]


def test_disabled_progress_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    bar = Progress(total=2, enabled=False)
    bar.update(1, RLINF_NAMES)
    bar.close()
    assert capsys.readouterr().out == ""


def _import_robosuite(verbose: bool) -> str:
    code = "from vlarl_cli.logging.quiet import quiet_dependencies; quiet_dependencies(); import robosuite"
    env = {**os.environ, quiet.VERBOSE_ENV: "1" if verbose else "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


def test_robosuite_macro_notice_is_hidden_unless_verbose() -> None:
    assert "No private macro file" not in _import_robosuite(verbose=False)
    assert "No private macro file found!" in _import_robosuite(verbose=True)


def test_dependency_prints_are_swallowed_unless_verbose(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(quiet.VERBOSE_ENV, "0")
    with quiet.dependency_prints():
        print("[info] using task orders [0, 1]")
    monkeypatch.setenv(quiet.VERBOSE_ENV, "1")
    with quiet.dependency_prints():
        print("shown")
    assert capsys.readouterr().out == "shown\n"


def _noise() -> None:
    """What dependencies print: a FutureWarning raised inside torch, FSDP2's view-output advice, another
    torch UserWarning (kept), robosuite's macro notice."""
    import logging
    import warnings

    warnings.warn_explicit("torch.foo is deprecated", FutureWarning, "torch/foo.py", 1, module="torch.foo")
    warnings.warn_explicit("FSDP2-wrapped module (FSDPToyFlowPolicy) returned a view tensor. An in-place op ...",
                           UserWarning, "torch/distributed/fsdp/_fully_shard/_fsdp_state.py", 331,
                           module="torch.distributed.fsdp._fully_shard._fsdp_state")
    warnings.warn_explicit("a module returned a view tensor", UserWarning, "torch/x.py", 1, module="torch.x")
    logging.getLogger(quiet.ROBOSUITE_LOGGER).warning("No private macro file found!")


@pytest.mark.parametrize("verbose", [False, True])
def test_rl_train_ranks_follow_the_console_rules(verbose: bool, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """torchrun starts every rl-train rank in ``cli/rl_train.rank_main``: it hides what rank 0's CLI hides,
    and shows it under --verbose (passed on, or inherited through VLARL_VERBOSE)."""
    import logging
    import warnings

    from vlarl_cli.cli import rl_train
    from vlarl_cli.training import entry

    monkeypatch.delenv(quiet.VERBOSE_ENV, raising=False)
    monkeypatch.setattr(entry, "launch", lambda **kwargs: _noise())
    robosuite_log = logging.getLogger(quiet.ROBOSUITE_LOGGER)
    monkeypatch.setattr(robosuite_log, "filters", [])
    monkeypatch.setattr(robosuite_log, "handlers", [logging.StreamHandler(sys.stderr)])  # as robosuite's own
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        with pytest.raises(SystemExit) as done:
            rl_train.rank_main(["--config", "toy_reach_ppo", *(["--verbose"] if verbose else [])])
    assert done.value.code == 0
    err = capsys.readouterr().err
    shown_messages = [str(w.message).split(" (")[0] for w in shown]
    assert shown_messages == (["torch.foo is deprecated", "FSDP2-wrapped module", "a module returned a view tensor"]
                              if verbose else ["a module returned a view tensor"])  # only what is listed is hidden
    assert ("No private macro file" in err) is verbose
    assert os.environ.get(quiet.VERBOSE_ENV, "0") == ("1" if verbose else "0")
