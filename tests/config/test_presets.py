"""Preset matching for ``vlarl download``'s summary (config/presets.py): which presets use a checkpoint."""

from __future__ import annotations

from vlarl_cli.checkpoints.detect import CheckpointInfo
from vlarl_cli.config.presets import configs_using


def test_configs_using_reads_defaults_and_overrides(tmp_path):
    cfg = tmp_path / "configs"
    (cfg / "model").mkdir(parents=True)
    (cfg / "model" / "pi0_5.yaml").write_text('model_type: "openpi"\nmodel_path: "org/pi05-base"\n'
                                              'openpi:\n  config_name: "pi05_libero"\n')
    (cfg / "model" / "pi0.yaml").write_text('model_type: "openpi"\nmodel_path: "org/pi0-base"\n'
                                            'openpi:\n  config_name: "pi0_libero"\n')
    (cfg / "a_pi05.yaml").write_text("defaults:\n  - model/pi0_5@actor.model\n")
    (cfg / "b_pi05_other.yaml").write_text("defaults:\n  - model/pi0_5@actor.model\n"
                                           "actor:\n  model:\n    model_path: org/other\n")
    (cfg / "c_pi0.yaml").write_text("defaults:\n  - model/pi0@actor.model\n")
    (cfg / "broken.yaml").write_text("defaults: [\n")
    info = CheckpointInfo(path=tmp_path, family="pi0", variant="pi05")
    assert configs_using(info, "org/pi05-base", [cfg]) == {"uses": ["a_pi05"], "compatible": ["b_pi05_other"]}
    info0 = CheckpointInfo(path=tmp_path, family="pi0", variant="pi0")
    assert configs_using(info0, "x/y", [cfg]) == {"uses": [], "compatible": ["c_pi0"]}
    # A local copy named like the repo counts as "uses".
    assert configs_using(info0, "org/pi0-base", [cfg])["uses"] == ["c_pi0"]
