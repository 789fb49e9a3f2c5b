"""refuse_unknown: the one 'unknown name, did you mean' check the family configs share."""

from __future__ import annotations

import pytest

from vlarl_cli.errors import ConfigError, refuse_unknown


def test_refuse_unknown_names_the_first_unknown_with_a_suggestion_and_the_fix() -> None:
    refuse_unknown(["a", "b"], ["a", "b", "c"], "field", "fix it")  # all known: nothing
    with pytest.raises(ConfigError) as info:
        refuse_unknown(["num_step", "zzz", "a"], ["a", "num_steps"], "pi0 config field", "Check it.", " in a file")
    assert info.value.problem == 'Unknown pi0 config field "num_step" in a file. Did you mean "num_steps"?'
    assert info.value.fix == "Check it."


@pytest.mark.parametrize("family", ["pi0", "openvla_oft", "gr00t"])
def test_family_configs_refuse_unknown_fields_on_replace_and_from_dict(family: str) -> None:
    from importlib import import_module

    module = import_module(f"vlarl_cli.policies.{family}.config")
    cls = {"pi0": "Pi0Config", "openvla_oft": "OftConfig", "gr00t": "Gr00tConfig"}[family]
    cfg = getattr(module, cls)()
    with pytest.raises(ConfigError, match='config field "num_stepz"'):
        cfg.replace(num_stepz=3)
    with pytest.raises(ConfigError, match='config field "num_stepz"'):
        type(cfg).from_dict({**cfg.to_dict(), "num_stepz": 3})
