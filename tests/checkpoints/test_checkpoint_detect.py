"""Family/format detection from file names, config.json and safetensors headers."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from vlarl_cli.checkpoints.detect import (
    count_parameters,
    detect_checkpoint,
    read_safetensors_header,
    weights_table,
)
from vlarl_cli.errors import CheckpointError


def _folder(root: Path, keys: dict[str, tuple[int, ...]], files: dict[str, object] | None = None,
            weights: str = "model.safetensors") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if keys:
        save_file({k: torch.zeros(shape) for k, shape in keys.items()}, root / weights)
    for name, content in (files or {}).items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content if isinstance(content, str) else json.dumps(content))
    return root


PI = "paligemma_with_expert.paligemma.model.language_model.layers.0.mlp.up_proj.weight"


@pytest.mark.parametrize(("keys", "files", "expected"), [
    ({PI: (4, 2), "time_mlp_in.weight": (2, 2)},
     {"physical-intelligence/libero/norm_stats.json": {}}, ("pi0", "openpi", "pi05")),
    ({PI: (4, 2), "action_time_mlp_in.weight": (2, 4), "state_proj.weight": (2, 32)},
     {"assets/libero/norm_stats.json": {}}, ("pi0", "openpi", "pi0")),
    ({"model." + PI: (4, 2), "model.time_mlp_in.weight": (2, 2)}, {"config.json": {"type": "pi05"}},
     ("pi0", "lerobot", "pi05")),
    ({"model.vlm.language_model.layers.0.mlp.up_proj.weight": (4, 2),
      "embed_action_time.action_time_mlp_in.weight": (2, 4)},
     {"config.json": {"model_type": "pi0", "vlm_config": {}}}, ("pi0", "hf_pi0", "pi0")),
    ({"action_head.model.proj.weight": (2, 2)},
     {"config.json": {"model_type": "gr00t_n1_5"}, "experiment_cfg/metadata.json": {}},
     ("gr00t", "gr00t_n15", "gr00t_n15")),
    ({"action_head.model.proj.weight": (2, 2)},
     {"config.json": {"model_type": "Gr00tN1d6"}, "experiment_cfg/metadata.json": {},
      "processor_config.json": {}, "embodiment_id.json": {}, "statistics.json": {}},
     ("gr00t", "gr00t_n16", "gr00t_n16")),
    ({"language_model.model.layers.0.mlp.up_proj.weight": (4, 2)},
     {"config.json": {"model_type": "openvla"}, "dataset_statistics.json": {}},
     ("openvla_oft", "openvla_hf", "openvla")),
])
def test_layouts(tmp_path, keys, files, expected):
    info = detect_checkpoint(_folder(tmp_path / "ck", keys, files))
    assert (info.family, info.format, info.variant) == expected, info
    assert info.num_parameters == sum(torch.Size(s).numel() for s in keys.values())
    stats = {"norm_stats.json", "dataset_statistics.json", "statistics.json", "metadata.json"}
    assert sorted(info.norm_stats) == sorted(f for f in files if Path(f).name in stats)


def test_vlarl_layout_and_unknown(tmp_path):
    info = detect_checkpoint(_folder(tmp_path / "v", {"w": (3,)}, {"vlarl_config.json": {
        "family": "pi0", "format_version": 1, "model": {"variant": "pi05"}}}))
    assert (info.family, info.format, info.variant) == ("pi0", "vlarl", "pi05")
    unknown = detect_checkpoint(_folder(tmp_path / "u", {}, {"README.md": "hi"}))
    assert unknown.family is None and unknown.num_parameters is None
    assert any("no known family" in n for n in unknown.notes)
    assert any("no .safetensors" in n for n in unknown.notes)


def test_sharded_count_tied_once_pickles_and_remote_code(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    save_file({"a": torch.zeros(2, 3), "tied": torch.zeros(5)}, root / "model-00001-of-00002.safetensors")
    save_file({"b": torch.zeros(7), "tied": torch.zeros(5)}, root / "model-00002-of-00002.safetensors")
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "tied": "model-00001-of-00002.safetensors",
        "b": "model-00002-of-00002.safetensors"}}))
    (root / "optimizer.pt").write_bytes(b"")
    (root / "modeling_x.py").write_text("raise SystemExit('never run')")
    info = detect_checkpoint(root)
    assert count_parameters(root) == 6 + 5 + 7 == info.num_parameters  # "tied" counted once
    assert info.weights == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert info.pickle_files == ["optimizer.pt"] and info.has_remote_code


def test_index_naming_a_missing_shard_is_refused_by_name(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    save_file({"a": torch.zeros(2, 3)}, root / "model-00001-of-00002.safetensors")
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(CheckpointError, match=r"model-00002-of-00002\.safetensors is named by the shard index"):
        weights_table(root)  # what every family's load_policy opens the folder with
    info = detect_checkpoint(root)  # a summary names it instead of counting the shards that are there
    assert [f for f, _ in info.unreadable] == ["model-00002-of-00002.safetensors"]
    assert info.num_parameters == 6 and any("unreadable weights" in n for n in info.notes)


def test_index_naming_a_shard_outside_the_folder_is_refused(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    save_file({"a": torch.zeros(2)}, tmp_path / "outside.safetensors")
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../outside.safetensors"}}))
    with pytest.raises(CheckpointError, match="not a file name in"):
        weights_table(root)
    info = detect_checkpoint(root)
    assert info.weights == [] and info.num_parameters is None and any("outside" in n for n in info.notes)


def test_header_reader_guards(tmp_path):
    save_file({"x": torch.zeros(2, 2)}, tmp_path / "ok.safetensors")
    assert read_safetensors_header(tmp_path / "ok.safetensors")["x"]["shape"] == [2, 2]
    (tmp_path / "huge.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(ValueError, match="implausible"):
        read_safetensors_header(tmp_path / "huge.safetensors")
    (tmp_path / "short.safetensors").write_bytes(b"\x01")
    with pytest.raises(ValueError, match="too short"):
        read_safetensors_header(tmp_path / "short.safetensors")


def test_peft_adapter_folder_is_named(tmp_path):
    root = _folder(tmp_path / "a", {"base_model.model.layers.0.q_proj.lora_A.weight": (4, 16)},
                   {"adapter_config.json": {"r": 4, "base_model_name_or_path": "openvla/openvla-7b"}},
                   weights="adapter_model.safetensors")
    info = detect_checkpoint(root)
    assert any("PEFT LoRA adapter (rank 4) for openvla/openvla-7b" in n for n in info.notes)
    assert info.num_parameters == 64
