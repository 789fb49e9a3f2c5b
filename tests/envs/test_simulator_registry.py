"""The simulator table is the one place a simulator is known: nothing outside ``envs/<sim>/`` compares
``env_type`` strings (grepped), and a third simulator registered from outside (tests/envs/fake_simulator.py,
written against the registry alone) trains and evaluates through the real ``vlarl rl-train`` entry point."""

from __future__ import annotations

import json
import re
from pathlib import Path

import fake_simulator
import pytest

from vlarl_cli.envs import registry

SRC = Path(registry.__file__).resolve().parents[1]  # src/vlarl_cli
COMPARISON = re.compile(r"""env_type\s*(==|!=|(not\s+)?in\s*[(\[{"'])|"""
                        r"""(==|!=)\s*["'](libero|maniskill|toy_reach)["']|["'](libero|maniskill|toy_reach)["']\s*(==|!=)""")


def test_no_env_type_string_is_compared_outside_the_simulators_folders() -> None:
    own = [SRC / "envs" / name for name in registry.BUILTIN]
    found = [f"{p.relative_to(SRC)}:{i}: {line.strip()}" for p in sorted(SRC.rglob("*.py"))
             if not any(p.is_relative_to(d) for d in own)
             for i, line in enumerate(p.read_text().splitlines(), 1) if COMPARISON.search(line)]
    assert found == []
    # the pattern does find what it forbids (a grep that cannot fail proves nothing)
    for line in ('if split.env_type == "libero":', "x = 'maniskill' != t", 'if s.env_type in ("toy_reach",):'):
        assert COMPARISON.search(line), line
    assert not COMPARISON.search("if env_type not in table:")  # asking the table is the point


def test_envs_never_work_out_the_policy_family() -> None:
    """The policy declares its gripper convention (keys.policy_gripper); no env reads the model-type table."""
    readers = [str(p.relative_to(SRC)) for p in sorted((SRC / "envs").rglob("*.py"))
               if "MODEL_TYPES" in p.read_text() or "embodiment_tag" in p.read_text()]
    assert readers == ["envs/libero/protocol.py"]  # the evaluation protocol's per-family replan sizes (data)


def test_the_builtin_simulators_are_in_the_table_with_their_facts() -> None:
    table = registry.simulators()
    assert list(table)[:5] == ["libero", "libero_plus", "libero_pro", "maniskill", "toy_reach"]
    assert [s.name for s in table.values() if s.in_workers] == ["libero", "libero_plus", "libero_pro"]
    assert table["toy_reach"].action_dim == 2 and table["toy_reach"].only_state_policies
    for simulator in table.values():  # every named function exists
        for what in ("make_env", "check_split", "evaluate", "record_demos", "deviations", "task_name"):
            if getattr(simulator, what) is not None:
                assert callable(registry.load(getattr(simulator, what))), (simulator.name, what)


@pytest.fixture
def fake_hop():
    registry.register(fake_simulator.SIMULATOR)
    fake_simulator.MADE.clear()
    yield fake_simulator
    registry.unregister("fake_hop")


def test_an_unregistered_simulator_is_refused_naming_the_registered_ones(capsys, tmp_path, monkeypatch) -> None:
    from vlarl_cli.cli.main import run

    monkeypatch.chdir(tmp_path)
    assert run(["rl-train", "-c", "toy_reach_ppo", "env.train.env_type=fake_hop", "--dry-run"]) == 2
    err = capsys.readouterr()
    text = " ".join((err.out + err.err).split())
    assert 'env_type "fake_hop" is a simulator vlarl does not run' in text and "toy_reach" in text


def test_a_third_simulator_trains_and_evaluates_through_the_cli(fake_hop, tmp_path, monkeypatch) -> None:
    from vlarl_cli.cli.main import run

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "run"
    code = run(["rl-train", "-c", "toy_reach_ppo", f"runner.logger.log_path={folder}", "runner.max_epochs=2",
                "runner.val_check_interval=2", "env.train.env_type=fake_hop", "env.eval.env_type=fake_hop",
                "env.train.total_num_envs=8", "env.eval.total_num_envs=4", "actor.model.action_dim=1",
                "actor.model.obs_dim=2", "actor.global_batch_size=32", "actor.micro_batch_size=32"])
    assert code == 0
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert "env/success_once" in rows[0] and "eval/success_once" in rows[1] and "eval/success_once" not in rows[0]
    # one train env set of 8, one eval set of 4, each stepped with the policy's [N, 4, 1] chunks
    assert [e.num_envs for e in fake_hop.MADE] == [8, 4]
    assert {s for e in fake_hop.MADE for s in e.actions_seen} == {(8, 4, 1), (4, 4, 1)}
    saved = (folder / "config.yaml").read_text() if (folder / "config.yaml").is_file() else ""
    assert "fake_hop" in saved or any("fake_hop" in p.read_text() for p in folder.rglob("*.yaml"))


def test_libero_env_settings_are_taken_by_name_from_the_spec() -> None:
    """VectorEnvSpec -> EnvOptions is one by-name step: every option the spec has arrives, none is restated."""
    import dataclasses

    from vlarl_cli.envs.libero.env import EnvOptions
    from vlarl_cli.envs.libero.vector import VectorEnvSpec

    changed = dict(resolution=224, cameras=("main",), obs_mode="state", protocol="rlinf", max_episode_steps=7,
                   settle_steps=3, env_seed=5, seeding="every_reset", reward_coef=2.0, use_rel_reward=True,
                   step_penalty=0.5, reset_gripper_open=False, ignore_terminations=True, hard_reset=True,
                   record_video=True, render_quality="fast")
    options = VectorEnvSpec(suite="libero_10", seed=9, **changed).env_options()
    defaults = EnvOptions()
    differ = {f.name for f in dataclasses.fields(EnvOptions) if getattr(options, f.name) != getattr(defaults, f.name)}
    assert differ == (set(changed) - {"env_seed"}) | {"seed"} and options.seed == 5  # the env seed, not the draws'


def test_an_installed_package_adds_a_simulator_through_its_entry_point(tmp_path) -> None:
    """What a user from outside does: a package whose metadata names its row under ``vlarl.simulators``;
    ``vlarl rl-train`` then plans a run on it, and a broken plug-in beside it is named, not fatal."""
    import subprocess
    import sys

    dist = tmp_path / "hop_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hop-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\nfake_hop = fake_simulator:SIMULATOR\n"
                                           "broken = no_such_module_here:SIMULATOR\n")
    path = [str(tmp_path), str(Path(fake_simulator.__file__).parent)]
    env = {**__import__("os").environ, "PYTHONPATH": ":".join(path)}
    command = [sys.executable, "-m", "vlarl_cli.cli.main", "rl-train", "-c", "toy_reach_ppo",
               "env.train.env_type=fake_hop", "env.eval.env_type=fake_hop", "actor.model.action_dim=1",
               "actor.model.obs_dim=2", "--dry-run"]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0 and "Placement on 1 device(s)" in proc.stdout, text
    (dist / "entry_points.txt").unlink()  # the same command without the package's metadata: an unknown env_type
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and 'env_type "fake_hop"' in " ".join(proc.stderr.split()), proc.stderr
    assert ("the simulator entry point 'broken = no_such_module_here:SIMULATOR' (vlarl.simulators, package "
            "hop-plugin) failed to load (ModuleNotFoundError") in text


def test_the_table_and_config_validation_import_no_torch() -> None:
    """Rows stay light: a config validates where no torch is installed (a simulator's own interpreter, the GPU
    kit's check in a bare Python), so no row's package may import torch when the table loads."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from vlarl_cli.envs import registry\n"
            "from vlarl_cli.config.loading import load_config\n"
            "registry.simulators()\n"
            "load_config('libero_10_ppo_openpi', ['actor.model.model_path=null', 'actor.model.preset=full'])\n"
            "print(sorted(m for m in ('torch', 'mujoco', 'robosuite') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
