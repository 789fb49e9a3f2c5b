"""What the shared checkpoint pipeline gives a fourth family for free (tests/checkpoints/fake_family.py,
~60 lines of its own): fresh RL heads reported by key, strict refusal naming the hole, a non-strict
report, sharded saves, format refusal. Every value below is what the pipeline computed, none restated."""

from __future__ import annotations

import json
from pathlib import Path

import fake_family as ff
import pytest
import torch
from safetensors.torch import load_file, save_file

from vlarl_cli.errors import CheckpointError

CRITIC = ["value.weight", "value.bias"]
ACTOR = ["enc.weight", "enc.bias", "head.weight", "head.bias"]


def _policy(seed: int = 0) -> ff.FakePolicy:
    torch.manual_seed(seed)
    return ff.FakePolicy(ff.FakeSettings())


def _upstream_without(tmp_path: Path, drop: tuple[str, ...]) -> tuple[Path, dict[str, torch.Tensor]]:
    """An upstream folder written by save_policy, then stripped of the upstream keys ``drop``."""
    folder = tmp_path / "up"
    ff.save_policy(_policy(), folder, format="upstream")
    tensors = load_file(folder / ff.UPSTREAM_WEIGHTS)
    save_file({k: v for k, v in tensors.items() if k not in drop}, folder / ff.UPSTREAM_WEIGHTS)
    return folder, tensors


def test_upstream_without_critic_starts_it_fresh_and_keeps_the_actor_bit_exact(tmp_path):
    folder, saved = _upstream_without(tmp_path, ("net.critic.weight", "net.critic.bias"))
    policy = ff.load_policy(folder)  # strict: a fresh critic is not a hole
    report = policy.load_report
    assert report.format == "upstream" and sorted(report.initialized) == sorted(CRITIC)
    assert (report.loaded, report.missing, report.unexpected, report.mismatched) == (4, [], [], [])
    ours = policy.state_dict()
    for key in ACTOR:
        assert torch.equal(ours[key], saved[ff.to_upstream_key(key)])
    # the critic was initialised (nn.Linear's kaiming bound 1/sqrt(fan_in)), not left as to_empty memory
    bound = 1 / 8 ** 0.5
    assert torch.isfinite(ours["value.weight"]).all() and ours["value.weight"].abs().max() <= bound
    assert ours["value.weight"].abs().max() > 0


def test_missing_actor_tensor_is_refused_when_strict_and_reported_otherwise(tmp_path, tensor_reads):
    folder, _ = _upstream_without(tmp_path, ("net.action_head.bias",))
    with pytest.raises(CheckpointError) as err:
        ff.load_policy(folder)
    assert "missing 1: head.bias" in err.value.problem
    assert tensor_reads == []  # refused before a tensor is read
    policy = ff.load_policy(folder, strict=False)
    assert policy.load_report.missing == ["head.bias"] and policy.load_report.loaded == 5 == len(tensor_reads)
    assert torch.equal(policy.head.bias, torch.zeros(21))  # a hole is zeros, never uninitialised memory


def test_unknown_upstream_key_is_refused_by_name(tmp_path):
    folder, saved = _upstream_without(tmp_path, ())
    save_file({**saved, "net.extra.weight": torch.ones(2)}, folder / ff.UPSTREAM_WEIGHTS)
    with pytest.raises(CheckpointError, match=r"unexpected 1: net\.extra\.weight"):
        ff.load_policy(folder)


@pytest.mark.parametrize(("fmt", "name"), [("vlarl", "model"), ("upstream", "weights")])
def test_tiny_shard_size_writes_shards_and_index_that_reload_equal(tmp_path, fmt, name):
    policy = _policy(1)
    folder = tmp_path / fmt
    # fp32 bytes in state-dict order: enc.weight 448, enc.bias 32, head.weight 672, head.bias 84,
    # value.weight 32, value.bias 4; at most 300 per shard -> [enc.weight] [enc.bias] [head.weight] [the rest]
    ff.save_policy(policy, folder, format=fmt, max_shard_bytes=300)
    index = json.loads((folder / f"{name}.safetensors.index.json").read_text())
    shard_names = [f"{name}-0000{i}-of-00004.safetensors" for i in (1, 2, 3, 4)]
    assert sorted(set(index["weight_map"].values())) == shard_names
    assert [k for k, v in index["weight_map"].items() if v == shard_names[3]] == [
        ff.to_upstream_key(k) if fmt == "upstream" else k for k in ("head.bias", "value.weight", "value.bias")]
    assert sorted(p.name for p in folder.glob("*.safetensors")) == shard_names  # no single file beside them
    assert index["metadata"]["total_size"] == 4 * sum(p.numel() for p in policy.parameters())
    back = ff.load_policy(folder)
    assert back.load_report.loaded == 6 and back.load_report.ok
    assert all(torch.equal(a, b) for a, b in zip(policy.state_dict().values(), back.state_dict().values(),
                                                 strict=True))
    ff.save_policy(back, folder, format=fmt)  # re-saved unsharded: the old shards and index are gone
    assert sorted(p.name for p in folder.iterdir() if "safetensors" in p.name) == [f"{name}.safetensors"]


def test_unknown_format_is_refused_naming_the_formats(tmp_path):
    with pytest.raises(CheckpointError) as err:
        ff.save_policy(_policy(), tmp_path / "x", format="upstrem")
    assert 'Did you mean "upstream"' in err.value.problem and err.value.fix == "Use one of vlarl, upstream."
    ff.save_policy(_policy(), tmp_path / "ok", format="vlarl")
    with pytest.raises(CheckpointError) as err:
        ff.load_policy(tmp_path / "ok", format="hf")
    assert 'Unknown fakefam checkpoint format "hf"' in err.value.problem and "vlarl, upstream" in err.value.fix
