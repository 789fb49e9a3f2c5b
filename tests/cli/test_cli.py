"""The `vlarl` command line as a user meets it: help, printed configs, dry runs, and clean failures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vlarl_cli.config.loading import list_presets

VLARL = [sys.executable, "-m", "vlarl_cli.cli.main"]
SUBCOMMANDS = ("download", "sft", "convert", "rl-train", "eval", "video")


def vlarl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([*VLARL, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def test_help_lists_every_subcommand_with_its_help() -> None:
    out = vlarl("--help")
    assert out.returncode == 0, out.stderr
    for name in SUBCOMMANDS:
        assert name in out.stdout
    for name in SUBCOMMANDS:
        sub = vlarl(name, "--help")
        assert sub.returncode == 0, sub.stderr
        assert "--" in sub.stdout and "Usage" in sub.stdout


def test_importing_the_cli_loads_no_heavy_module() -> None:
    # the evaluation package too (its docstring: heavy imports stay inside the functions that need them)
    code = ("import sys, vlarl_cli.cli.main, vlarl_cli.training.evaluation; "
            "print([m for m in ('torch', 'transformers', 'robosuite', 'libero', 'hydra') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _check_printed_config(name: str, stdout: str) -> None:
    data = yaml.safe_load(stdout)
    assert set(data) == {"cluster", "runner", "algorithm", "env", "rollout", "actor", "sft"}, name
    assert "${" not in stdout, name


def test_print_config_of_every_preset_is_resolved_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    """The console command once (a process of its own), then every preset through the same entry in this
    process (one subprocess per preset cost ~3 minutes of CI for the same code path)."""
    out = vlarl("rl-train", "--config", "quickstart", "--print-config")
    assert out.returncode == 0, out.stderr
    _check_printed_config("quickstart", out.stdout)
    from vlarl_cli.cli.main import run

    for name in list_presets():
        assert run(["rl-train", "--config", name, "--print-config"]) == 0, (name, capsys.readouterr().err)
        _check_printed_config(name, capsys.readouterr().out)


BROKEN = {
    "misspelled key": ("actor:\n  model: {preset: tiny}\n  optim: {lerning_rate: 0.1}\n", "lerning_rate"),
    "wrong type": ("actor:\n  model: {preset: tiny}\n  micro_batch_size: lots\n", "actor.micro_batch_size"),
    "impossible batch": ("actor:\n  model: {preset: tiny}\n  micro_batch_size: 3\n  global_batch_size: 8\n",
                         "divisible by micro_batch_size"),
    "unknown model type": ("actor:\n  model: {preset: tiny, model_type: pi7}\n", 'model_type "pi7" is not a policy vlarl supports'),
    "grpo without groups": ("algorithm: {adv_type: grpo, loss_type: actor}\nactor:\n  model: {preset: tiny}\n",
                            "group_size > 1"),
    "bad yaml": ("actor: {model: [\n", "YAML syntax error"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_configs_fail_in_one_paragraph_with_exit_code_2(case: str, tmp_path: Path) -> None:
    body, expected = BROKEN[case]
    path = tmp_path / "broken.yaml"
    path.write_text(body)
    out = vlarl("rl-train", "--config", str(path), "--print-config")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert expected in out.stderr
    assert out.stderr.startswith("error:")


def test_missing_checkpoint_and_missing_config_exit_2(tmp_path: Path) -> None:
    out = vlarl("rl-train", "--config", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2 and "neither a file nor a preset" in out.stderr and "Traceback" not in out.stderr
    out = vlarl("rl-train", "--config", "libero_tiny_ppo", "actor.model.model_path=/no/such/checkpoint")
    assert out.returncode == 2 and "/no/such/checkpoint" in out.stderr and "Traceback" not in out.stderr
    out = vlarl("rl-train", "--config", "libero_10_ppo_openpi")  # a hub id that was never downloaded
    assert out.returncode == 2 and "vlarl download RLinf/RLinf-Pi0-SFT-Long" in out.stderr


def test_dry_run_prints_placement_parameters_and_memory() -> None:
    out = vlarl("rl-train", "--config", "libero_spatial_ppo_gr00t", "--dry-run", "--world-size", "8")
    assert out.returncode == 0, out.stderr
    assert "Placement on 8 device(s)" in out.stdout
    assert "Estimated memory per device" in out.stdout


def _closed(*fds: int) -> object:
    def close() -> None:
        for fd in fds:
            os.close(fd)
    return close


def test_closed_standard_streams_are_no_traceback() -> None:
    """`vlarl ... >&-` / `<&-` start Python with that stream None; printing to it was an AttributeError."""
    env = {**os.environ, "NO_COLOR": "1"}
    printed = subprocess.run([*VLARL, "rl-train", "-c", "libero_tiny_ppo", "--print-config"], stderr=subprocess.PIPE,
                             text=True, timeout=300, env=env, preexec_fn=_closed(1))  # type: ignore[arg-type]
    assert printed.returncode == 0 and "Traceback" not in printed.stderr, printed.stderr
    refused = subprocess.run([*VLARL, "rl-train", "-c", "quikstart"], stderr=subprocess.PIPE, text=True, timeout=300,
                             env=env, preexec_fn=_closed(0, 1))  # type: ignore[arg-type]
    assert refused.returncode == 2 and 'Did you mean "quickstart"' in refused.stderr, refused.stderr
