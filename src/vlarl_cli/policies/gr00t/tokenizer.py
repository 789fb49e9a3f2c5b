"""Prompt tokenizers for GR00T: the Qwen BPE tokenizer of the Eagle backbones, and a byte tokenizer for
the tiny presets.

Isaac-GR00T ships its Qwen tokenizer as ``vocab.json`` + ``merges.txt`` + ``added_tokens.json`` (+
``tokenizer_config.json``) and no ``tokenizer.json`` (N1.5: ``gr00t/model/backbone/eagle2_hg_model/``;
N1.6: ``gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2/``). transformers turns those files into a fast
tokenizer with its Qwen2 converter: byte-level BPE, NFC normaliser, Qwen's split regex, byte-level
pre-tokeniser without prefix space, no special tokens added around the text, and the added tokens
(``<|im_start|>``, ``<IMG_CONTEXT>`` ...) matched as whole tokens with the ids the files give them. We
build the same tokenizer offline with the ``tokenizers`` library; a ``tokenizer.json`` is used when present.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from vlarl_cli.errors import ConfigError

__all__ = ["QWEN_SPLIT", "ByteTokenizer", "PromptTokenizer", "QwenTokenizer", "load_tokenizer"]

#: Qwen2 pre-tokenisation regex (transformers ``tokenization_qwen2.PRETOKENIZE_REGEX``)
QWEN_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
              r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
_WHERE = ("Isaac-GR00T ships them in gr00t/model/backbone/eagle2_hg_model (N1.5) and "
          "gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2 (N1.6)")


class PromptTokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...


class ByteTokenizer:
    """UTF-8 bytes shifted by 3 (0 = pad, 1 = bos, 2 = eos): ids 3..258. For tiny presets only."""

    offset = 3

    def encode(self, text: str) -> list[int]:
        return [b + self.offset for b in text.encode("utf-8")]

    def decode(self, ids: list[int]) -> str:
        return bytes(i - self.offset for i in ids if i >= self.offset).decode("utf-8", errors="replace")


def _added_tokens(folder: Path) -> list[dict[str, Any]]:
    """Added tokens with their ids: ``tokenizer_config.json`` ``added_tokens_decoder`` and/or
    ``added_tokens.json`` (``{content: id}``); the two must agree where both name a token."""
    found: dict[str, dict[str, Any]] = {}
    config = folder / "tokenizer_config.json"
    if config.is_file():
        for idx, tok in (json.loads(config.read_text()).get("added_tokens_decoder") or {}).items():
            found[tok["content"]] = {**tok, "id": int(idx)}
    simple = folder / "added_tokens.json"
    if simple.is_file():
        for content, idx in json.loads(simple.read_text()).items():
            if content in found and found[content]["id"] != int(idx):
                raise ConfigError(f"{simple} gives {content!r} id {idx} but tokenizer_config.json gives "
                                  f"{found[content]['id']}.", "Use the unmodified tokenizer files of the checkpoint.")
            found.setdefault(content, {"content": content, "id": int(idx), "special": True})
    return sorted(found.values(), key=lambda t: t["id"])


def _from_vocab_merges(folder: Path) -> Any:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab: dict[str, int] = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    merges = [_merge_pair(line) for line in lines if line and not line.startswith("#version")]
    added = _added_tokens(folder)
    for tok in added:  # added tokens keep the ids the files give them
        owner = vocab.get(tok["content"])
        if owner is not None and owner != tok["id"]:
            raise ConfigError(f"vocab.json maps {tok['content']!r} to {owner}, the added tokens to {tok['id']}.",
                              "Use the unmodified tokenizer files of the checkpoint.")
        vocab[tok["content"]] = tok["id"]
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False))
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.decoder = decoders.ByteLevel()
    bpe.add_special_tokens([AddedToken(t["content"], single_word=bool(t.get("single_word", False)),
                                       lstrip=bool(t.get("lstrip", False)), rstrip=bool(t.get("rstrip", False)),
                                       normalized=False, special=bool(t.get("special", True))) for t in added])
    return bpe


def _merge_pair(line: str) -> tuple[str, str]:
    """One ``merges.txt`` line ``"a b"`` -> ``("a", "b")``."""
    left, right = line.split(" ")
    return left, right


class QwenTokenizer:
    """The Eagle / Qwen3 prompt tokenizer from a folder: ``tokenizer.json`` when present, else
    ``vocab.json`` + ``merges.txt`` (+ ``added_tokens.json`` / ``tokenizer_config.json``)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        path = Path(path)
        folder = path if path.is_dir() else path.parent
        if (path.is_file() and path.name == "tokenizer.json") or (folder / "tokenizer.json").is_file():
            self._tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        elif (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
            self._tok = _from_vocab_merges(folder)
        else:
            raise ConfigError(f"No tokenizer files at {path}: need tokenizer.json, or vocab.json + merges.txt with "
                              "added_tokens.json / tokenizer_config.json.",
                              f"Point actor.model.tokenizer_path at the Eagle tokenizer folder ({_WHERE}).")

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)


def load_tokenizer(tokenizer_path: str | Path | None, vocab_size: int) -> PromptTokenizer:
    """The byte tokenizer for small vocabularies (tiny presets), else the Qwen tokenizer (required)."""
    if tokenizer_path is not None:
        return QwenTokenizer(Path(tokenizer_path))
    if vocab_size < 260:
        raise ConfigError(f"vocab_size {vocab_size} is too small for the byte tokenizer (needs 259 ids).",
                          "Use a larger vocabulary or set tokenizer_path.")
    if vocab_size > 4096:
        raise ConfigError("A real-size GR00T model needs its prompt tokenizer, but tokenizer_path is not set.",
                          "Set actor.model.tokenizer_path to a folder with vocab.json + merges.txt + "
                          f"added_tokens.json or tokenizer.json ({_WHERE}).")
    return ByteTokenizer()
