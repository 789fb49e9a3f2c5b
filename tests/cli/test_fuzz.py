"""Generated configs and files thrown at validation, bounded in time: every one ends in exit 0 or one paragraph
with exit 2 (never a traceback), and nothing outside the scratch folder changes.

Three kinds, each from a fixed seed so a failure reproduces: (1) the resolved tree of a preset with leaves
replaced by hostile values, keys dropped, misspelt or nested (``validate_tree``: the schema's part of
``load_config``, milliseconds each); (2) hostile config files through the real command line
(``rl-train --print-config``: file reading, size / depth / alias limits, Hydra); (3) hostile ``latest``
pointers and ``checksums.json`` files through the resume path.
"""

from __future__ import annotations

import copy
import hashlib
import random
import time
from pathlib import Path
from typing import Any

import pytest

from vlarl_cli.cli.boundary import guarded
from vlarl_cli.cli.main import run
from vlarl_cli.config import loading

SEED = 20261128
HOSTILE: list[Any] = [float("inf"), float("-inf"), float("nan"), -1, 0, 10**30, -(10**30), 2**63, "", " ", "../..",
                      "/etc/passwd", None, [], {}, [None], {"x": 1}, "a" * 5000, True, False, "[bold]x[/bold]", "${oc.env:HOME}",
                      "${no.such.key}", 1e-320, -0.0, "1e999", "０", "\u202e", b"\x00".decode(), [[[[[1]]]]], 3.5, "all", "auto"]


def _leaves(tree: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(tree, dict):
        return [p for k, v in tree.items() for p in _leaves(v, (*prefix, k))] or [prefix]
    return [prefix]


def _set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


def _mutate(base: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    tree = copy.deepcopy(base)
    leaves = _leaves(tree)
    for _ in range(rng.randint(1, 4)):
        path = rng.choice(leaves)
        kind = rng.random()
        if kind < 0.7:
            _set(tree, path, rng.choice(HOSTILE))
        elif kind < 0.8:  # a typo of the key
            parent = tree
            for key in path[:-1]:
                parent = parent[key]
            if path[-1] in parent:
                parent[path[-1][:-1] + "x"] = parent.pop(path[-1])
        elif kind < 0.9:  # a section replaced by a scalar or a list
            _set(tree, path[:1], rng.choice([1, "x", [], None]))
            leaves = _leaves(tree)
        else:  # a value nested one level too deep
            _set(tree, path, {"value": 1})
    return tree


def _fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "300")
    return tmp_path


def test_generated_config_trees_end_in_a_verdict_never_a_traceback(scratch: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    base = yaml.safe_load(loading.to_yaml(loading.load_config("libero_tiny_ppo").config))
    configs_before = _fingerprint(loading.CONFIG_DIR)
    rng = random.Random(SEED)
    codes: dict[int, int] = {}
    deadline = time.monotonic() + 4
    cases = 0
    while cases < 300 and time.monotonic() < deadline:
        tree = _mutate(base, rng)
        code = guarded(lambda t=tree: loading.validate_tree(t, Path("fuzz.yaml")), command="rl-train", debug=False)
        err = capsys.readouterr().err
        assert code in (0, 2) and "Traceback" not in err, (tree, err)
        if code == 2:
            assert err.startswith("error: ") and "\nfix: " in err, err
        codes[code] = codes.get(code, 0) + 1
        cases += 1
    assert cases >= 50 and codes.get(2, 0) > cases // 2, codes  # the generator really produces bad configs
    assert list(scratch.iterdir()) == [] and _fingerprint(loading.CONFIG_DIR) == configs_before


def _files(rng: random.Random) -> list[bytes]:
    junk = bytes(rng.randrange(256) for _ in range(200))
    aliases = "a0: &a0 [1, 2]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, 300))
    return [junk, junk.replace(b"\x00", b"x"), b"\xef\xbb\xbfrunner: {logger: {log_path: ''}}\n",
            b"defaults: [env/../../../../etc/passwd]\n", b"defaults: [{model: nope}]\n", b"a: !!python/object:os.system {}\n",
            aliases.encode(), ("x: " + "{a: " * 100 + "1" + "}" * 100).encode(), b"actor: {optim: {lr: .inf}}\n",
            b"cluster: &c {component_placement: *c}\n", b"runner: [1, 2]\n", b"- - - -\n", b"actor: {seed: 1e400}\n"]


def test_generated_config_files_through_the_command_line(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs_before = _fingerprint(loading.CONFIG_DIR)
    rng = random.Random(SEED)
    for i, body in enumerate(_files(rng)):
        path = scratch / f"c{i}.yaml"
        path.write_bytes(body)
        code = run(["rl-train", "-c", str(path), "--print-config"])
        _, err = capsys.readouterr()
        assert code == 2 and "Traceback" not in err and err.startswith("error: "), (body[:80], code, err)
    assert sorted(p.name for p in scratch.iterdir()) == sorted(f"c{i}.yaml" for i in range(len(_files(rng))))
    assert _fingerprint(loading.CONFIG_DIR) == configs_before


def test_generated_latest_pointers_and_checksum_lists(scratch: Path) -> None:
    import torch

    from vlarl_cli.errors import CheckpointError
    from vlarl_cli.training import checkpoint as ckpt

    model = torch.nn.Linear(2, 2)
    folder = ckpt.save_checkpoint(scratch / "run", model_state=model.state_dict(), optimizer_state={}, scheduler=None,
                                  generators={}, trainer_state=ckpt.TrainerState(iteration=1), config_yaml="a: 1\n")
    outside = _fingerprint(scratch / "run")
    rng = random.Random(SEED)
    pointers = ["", "..", "/", "/etc", "../../..", "global_step_1/..", "global_step_1\x00", "x" * 5000, "global_step_9",
                "\u202e1_pets_labolg", "global_step_1/../global_step_1", *("".join(rng.choice("./_gx1\\\n") for _ in range(12))
                                                                           for _ in range(20))]
    for pointer in pointers:
        (folder.parent / "latest").write_text(pointer)
        with pytest.raises(CheckpointError):
            ckpt.resolve_checkpoint(scratch / "run", "auto")
    (folder.parent / "latest").write_text("global_step_1\n")
    good = (folder / "checksums.json").read_text()
    for body in ["", "{", "[]", '{"sha256": []}', '{"sha256": {"model.safetensors": 1}}', '{"sha256": {"/etc/passwd": "0"}}',
                 '{"sha256": {"../../x": "0"}}', '{"sha256": {"nope": "0"}}', good.replace('"model.safetensors": "', '"model.safetensors": "0')]:
        (folder / "checksums.json").write_text(body)
        with pytest.raises(CheckpointError):
            ckpt.resolve_checkpoint(scratch / "run", "auto")
    (folder / "checksums.json").write_text(good)
    assert ckpt.resolve_checkpoint(scratch / "run", "auto") == folder
    after = _fingerprint(scratch / "run")
    assert {k: v for k, v in after.items() if k != "checkpoints/latest"} == \
           {k: v for k, v in outside.items() if k != "checkpoints/latest"}
