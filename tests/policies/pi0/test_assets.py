"""Tokenizer and norm stats of real pi0 / pi0.5 checkpoints: found, fetched from a (loopback) hub,
verified, cached, recorded on the card; refused with the fix named when missing, never silent.

A "real" checkpoint here is the tiny architecture with a 1100-id vocabulary (> TINY_VOCAB_MAX), served
by a sentencepiece model trained in the test with Gemma's special ids and exactly 1100 pieces.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path

import pytest
import torch

from vlarl_cli.checkpoints import tokenizer as tk
from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.normalization import NormStats
from vlarl_cli.policies.pi0.checkpoint import load_policy, save_policy

sys.path.insert(0, str(Path(__file__).parents[2] / "checkpoints"))
from hub_server import HubServer

VOCAB = 1100
REPO = tk.TOKENIZER_REPOS[0]


def train_sp(vocab: int = VOCAB, *, newline: bool = True, pad_id: int = 0) -> bytes:
    """A sentencepiece model with Gemma's special ids (pad 0, eos 1, bos 2, unk 3) and ``vocab`` pieces."""
    import sentencepiece as spm

    corpus = ["pick up the black bowl and place it on the plate", "open the top drawer of the cabinet",
              "put both the alphabet soup and the tomato sauce in the basket",
              "Task: State: Action: 0 1 2 3 4 5 6 7 8 9 ;,."] * 20
    learned = 150  # fewer than this corpus supports (~210); the rest are control pieces (PaliGemma's <loc>/<seg> style)
    controls = [f"<extra{i:04d}>" for i in range(vocab - learned - 4 - int(newline))]
    buf = io.BytesIO()
    ids = {"pad_id": pad_id, "unk_id": 3, "eos_id": 1, "bos_id": 2 if pad_id == 0 else 0}
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=buf, vocab_size=vocab, model_type="bpe", **ids,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
        user_defined_symbols=["\n"] if newline else [], control_symbols=controls,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=False,
        split_digits=True, character_coverage=1.0, minloglevel=2)
    return buf.getvalue()


@pytest.fixture(scope="module")
def sp_bytes() -> bytes:
    return train_sp()


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """Empty vlarl and HF caches, hub offline unless a test serves one."""
    monkeypatch.setenv("VLARL_CACHE", str(tmp_path / "vlarl-cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return tmp_path


@pytest.fixture
def hub(isolated, monkeypatch, sp_bytes):
    server = HubServer().start()
    server.add_repo(REPO, {tk.REPO_FILE: sp_bytes, "config.json": b"{}"})
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    try:
        yield server
    finally:
        server.stop()


def _stats() -> dict[str, NormStats]:
    g = torch.Generator().manual_seed(0)

    def one(d: int) -> NormStats:
        mean = torch.randn(d, generator=g, dtype=torch.float64)
        std = torch.rand(d, generator=g, dtype=torch.float64) + 0.5
        return NormStats(mean, std, mean - 2 * std, mean + 2 * std)

    return {"state": one(8), "actions": one(7)}


def _real_checkpoint(make_policy, root: Path, *, stats: bool = True, variant: str = "pi05") -> Path:
    """An RLinf / openpi-layout checkpoint of a 'real' (vocabulary 1100) model: no tokenizer file."""
    policy = make_policy(variant, vocab_size=VOCAB, add_value_head=False)
    if stats:
        policy.set_norm_stats(_stats())
    save_policy(policy, root, format="openpi")
    if stats:  # RLinf keeps them at <asset_id>/norm_stats.json, not under assets/
        src = root / "assets" / "physical-intelligence" / "libero" / "norm_stats.json"
        (root / "physical-intelligence" / "libero").mkdir(parents=True)
        src.rename(root / "physical-intelligence" / "libero" / "norm_stats.json")
    assert not any((root / n).exists() for n in tk.CHECKPOINT_NAMES)
    return root


# ------------------------------------------------------------------------------------------ verify
def test_verify_accepts_the_model_it_serves(tmp_path, sp_bytes):
    f = tmp_path / "tok.model"
    f.write_bytes(sp_bytes)
    info = tk.verify_tokenizer(f, VOCAB)
    assert info.vocab_size == VOCAB and info.sha256 == hashlib.sha256(sp_bytes).hexdigest()


def test_verify_is_bound_to_the_declared_vocabulary(tmp_path, sp_bytes):
    f = tmp_path / "tok.model"
    f.write_bytes(sp_bytes)
    # a real model declares 257152: a smaller file can never pass, and the PaliGemma pieces are demanded
    with pytest.raises(CheckpointError, match=r"1100 ids, the model's vocabulary has 257152.*<loc0000>"):
        tk.verify_tokenizer(f, tk.PALIGEMMA_VOCAB)
    with pytest.raises(CheckpointError, match="1100 ids, the model's vocabulary has 1101"):
        tk.verify_tokenizer(f, VOCAB + 1)


def test_verify_checks_the_special_ids_and_newline(tmp_path):
    swapped = tmp_path / "swapped.model"
    swapped.write_bytes(train_sp(pad_id=2))  # pad and bos swapped
    with pytest.raises(CheckpointError, match=r"id 0 is '<bos>', expected '<pad>'"):
        tk.verify_tokenizer(swapped, VOCAB)
    no_newline = tmp_path / "nonl.model"
    no_newline.write_bytes(train_sp(newline=False))
    with pytest.raises(CheckpointError, match="not one ordinary id"):
        tk.verify_tokenizer(no_newline, VOCAB)
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"not a model")
    with pytest.raises(CheckpointError, match="not a readable sentencepiece model"):
        tk.verify_tokenizer(garbage, VOCAB)


# ------------------------------------------------------------------------------------------ resolve
def test_nothing_reachable_is_an_error_naming_every_step(isolated):
    with pytest.raises(CheckpointError) as err:
        tk.resolve_tokenizer(tk.PALIGEMMA_VOCAB, checkpoint_dir=isolated)
    text = f"{err.value.problem} {err.value.fix}"
    for word in ("tokenizer.model", "vlarl-cache", "HF_HUB_OFFLINE", "gs://big_vision", REPO, "HF_TOKEN",
                 "licence", f"vlarl download {REPO} --include tokenizer.model", "actor.model.tokenizer_path"):
        assert word in text, word


def test_fetched_from_the_hub_verified_and_cached(hub, sp_bytes):
    info = tk.resolve_tokenizer(VOCAB)
    digest = hashlib.sha256(sp_bytes).hexdigest()
    assert info.sha256 == digest and info.source.startswith(f"hub:{REPO}@")
    cached = tk.cache_dir() / tk.CACHED_NAME
    assert Path(info.path) == cached.resolve() and cached.read_bytes() == sp_bytes
    record = json.loads((tk.cache_dir() / tk.RECORD_NAME).read_text())
    assert record["sha256"] == digest and record["origin"] == info.source
    served = len(hub.log)
    again = tk.resolve_tokenizer(VOCAB)  # from the cache: the hub is not asked again
    assert again.sha256 == digest and again.source.startswith("vlarl-cache") and len(hub.log) == served


def test_gated_repository_names_token_and_licence(isolated, monkeypatch, sp_bytes):
    server = HubServer().start()
    try:
        server.add_repo(REPO, {tk.REPO_FILE: sp_bytes}, gated=True)
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.delenv("HF_HUB_OFFLINE")
        with pytest.raises(CheckpointError) as err:
            tk.resolve_tokenizer(VOCAB)
    finally:
        server.stop()
    assert "gated" in err.value.problem and "HF_TOKEN" in err.value.fix and "licence" in err.value.fix
    assert not (tk.cache_dir() / tk.CACHED_NAME).exists()


def test_a_wrong_file_on_the_hub_is_not_cached(hub, monkeypatch):
    with pytest.raises(CheckpointError, match="vocabulary has 257152"):
        tk.resolve_tokenizer(tk.PALIGEMMA_VOCAB)
    assert not (tk.cache_dir() / tk.CACHED_NAME).exists()


def test_earlier_vlarl_download_in_the_hf_cache_is_used(isolated, sp_bytes):
    snap = isolated / "hf-cache" / ("models--" + REPO.replace("/", "--")) / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    (snap / tk.REPO_FILE).write_bytes(sp_bytes)
    info = tk.resolve_tokenizer(VOCAB)
    assert info.source == f"hf-cache:{REPO}@{'c' * 40}"
    assert (tk.cache_dir() / tk.CACHED_NAME).read_bytes() == sp_bytes


# ------------------------------------------------------------------------------------------ pi0 load
def test_real_checkpoint_without_tokenizer_or_norm_stats_is_refused(make_policy, isolated):
    root = _real_checkpoint(make_policy, isolated / "ck", stats=False)
    with pytest.raises(CheckpointError) as err:
        load_policy(root)
    assert "No prompt tokenizer" in err.value.problem
    (root / "tokenizer.model").write_bytes(train_sp())
    with pytest.raises(CheckpointError) as err:
        load_policy(root)
    text = f"{err.value.problem} {err.value.fix}"
    for where in ("norm_stats.json", "assets/physical-intelligence/libero/norm_stats.json",
                  "ck/physical-intelligence/libero/norm_stats.json", "actor.model.norm_stats_path",
                  "actor.model.asset_id"):
        assert where in text, where


def test_real_checkpoint_loads_with_hub_tokenizer_and_card_carries_its_hash(make_policy, make_obs, hub, sp_bytes,
                                                                            tmp_path):
    from vlarl_cli.training.evaluation import EvalSettings
    from vlarl_cli.training.evaluation.card import make_card

    root = _real_checkpoint(make_policy, tmp_path / "ck")
    policy = load_policy(root)
    digest = hashlib.sha256(sp_bytes).hexdigest()
    assert policy.tokenizer_record["sha256"] == digest
    assert policy.load_report.details["norm_stats"].endswith("physical-intelligence/libero/norm_stats.json")
    assert policy.processor.normalizer.mode == "quantile"
    # prompts are the sentencepiece ids, not bytes: [bos] + sp(text) + sp("\n")
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    ids, mask = policy.processor.tokenizer.encode(["open the top drawer"], policy.cfg.max_token_len)
    want = [2, *sp.encode("open the top drawer"), *sp.encode("\n")]
    assert ids[0, : len(want)].tolist() == want and int(mask.sum()) == len(want)
    card = make_card(EvalSettings(suite="libero_10", trials=1, resolution=32), policy, None, [])
    assert card["tokenizer"]["sha256"] == digest and card["tokenizer"]["vocab_size"] == VOCAB
    policy.sample(make_obs(batch=1, size=32))
    # saving ships the tokenizer: the copy loads offline, from its own folder
    save_policy(policy, root.parent / "again", format="vlarl")
    assert (root.parent / "again" / "paligemma_tokenizer.model").read_bytes() == sp_bytes


def test_tiny_checkpoint_keeps_byte_tokenizer_and_identity(make_policy, isolated):
    save_policy(make_policy("pi0"), isolated / "tiny", format="openpi")
    policy = load_policy(isolated / "tiny")
    assert policy.cfg.tokenizer == "byte" and policy.tokenizer_record is None
    assert policy.load_report.details["norm_stats"] is None


def test_the_documented_vlarl_download_step_is_found_offline(hub, monkeypatch, sp_bytes, tmp_path):
    """`vlarl download google/paligemma-3b-pt-224 --include tokenizer.model` (hub cache layout), then offline."""
    from vlarl_cli.checkpoints.hub import download

    download(REPO, include=[tk.REPO_FILE], cache_dir=tmp_path / "hf-cache", quiet=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    info = tk.resolve_tokenizer(VOCAB)
    assert info.source.startswith(f"hf-cache:{REPO}@") and info.sha256 == hashlib.sha256(sp_bytes).hexdigest()
