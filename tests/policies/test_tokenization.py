"""Tokenisers: the built-in byte tokeniser (hand-checked ids) and a local tokenizers file."""

from __future__ import annotations

import pytest
import torch

from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.tokenization import (
    BOS_ID,
    PAD_ID,
    ByteTokenizer,
    FileTokenizer,
    Tokenizer,
    clean_prompt,
)


def test_clean_prompt_like_openpi():
    assert clean_prompt("  put_the bowl\non the plate ") == "put the bowl on the plate"


def test_byte_tokenizer_hand_ids_padding_and_truncation():
    tok = ByteTokenizer()
    assert isinstance(tok, Tokenizer) and tok.vocab_size == 260
    ids, mask = tok.encode(["ab", "a_b c"], max_len=6)
    # [bos] + bytes shifted by 4 + "\n" (10 + 4)
    assert ids[0].tolist() == [BOS_ID, ord("a") + 4, ord("b") + 4, 14, PAD_ID, PAD_ID]
    assert mask[0].tolist() == [True, True, True, True, False, False]
    assert ids[1].tolist() == [BOS_ID, ord("a") + 4, ord(" ") + 4, ord("b") + 4, ord(" ") + 4, ord("c") + 4]
    assert mask[1].all()  # truncated to max_len
    assert tok.decode(ids[0].tolist()) == "ab\n"
    assert ids.dtype == torch.long and mask.dtype == torch.bool
    with pytest.raises(TypeError):
        tok.encode("one string", 4)


def test_file_tokenizer_from_local_tokenizer_json(tmp_path):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "pick": 4, "up": 5, "bowl": 6, "the": 7}
    hf = HFTokenizer(WordLevel(vocab, unk_token="<unk>"))
    hf.pre_tokenizer = Whitespace()
    hf.save(str(tmp_path / "tokenizer.json"))
    tok = FileTokenizer(tmp_path)  # a folder holding tokenizer.json
    assert tok.vocab_size == 8
    ids, mask = tok.encode(["pick up the bowl"], max_len=8)
    assert ids[0, :5].tolist() == [2, 4, 5, 7, 6] and mask[0].sum() == 5  # "\n" encodes to nothing here
    with pytest.raises(CheckpointError, match="does not exist"):
        FileTokenizer(tmp_path / "nope.json")


def test_sentencepiece_model_like_openpi(tmp_path):
    """openpi: tokens = sp.encode(text, add_bos=True) + sp.encode("\\n")."""
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["pick up the black bowl", "open the top drawer", "put the bowl on the plate"] * 20))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=28,
                                   model_type="unigram", bos_id=2, eos_id=1, pad_id=0, unk_id=3,
                                   user_defined_symbols=["\n"], minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
    tok = FileTokenizer(tmp_path / "sp.model")
    ids, mask = tok.encode(["pick_up the bowl"], max_len=32)
    expected = sp.encode("pick up the bowl", add_bos=True) + sp.encode("\n")
    assert ids[0, : len(expected)].tolist() == expected and int(mask.sum()) == len(expected)
    assert tok.vocab_size == 28


def test_discrete_state_prompt_like_openpi_pi05():
    tok = ByteTokenizer()
    states = torch.tensor([[-1.0, 0.0, 0.999, 1.0]])
    ids, mask = tok.encode_with_state(["open_the drawer"], states, max_len=80)
    # np.digitize(x, linspace(-1, 1, 257)[:-1]) - 1: -1 -> 0, 0 -> 128, 0.999 -> 255, 1.0 -> 255
    expected = "Task: open the drawer, State: 0 128 255 255;\nAction: "
    n = int(mask.sum())
    assert ids[0, 0] == BOS_ID and tok.decode(ids[0, 1:n].tolist()) == expected
