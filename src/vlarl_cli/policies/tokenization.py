"""Prompt tokenisers behind one small protocol.

``Tokenizer.encode(texts, max_len) -> (ids [B, max_len] long, mask [B, max_len] bool)``: right-padded
with the pad id (0), mask True on real tokens, truncated to ``max_len``.

Two implementations:

* :class:`ByteTokenizer`: built in, no files, no downloads. UTF-8 bytes shifted past four special ids
  (Gemma's numbering: pad 0, eos 1, bos 2, unk 3), so a vocabulary of 260 ids covers every string. The
  tiny presets and the CPU quickstart use it.
* :class:`FileTokenizer`: wraps a LOCAL tokenizer: a sentencepiece ``.model`` (openpi's
  ``paligemma_tokenizer.model``; needs the ``sentencepiece`` package), a ``tokenizer.json`` for the
  ``tokenizers`` library, or a folder that ``transformers.AutoTokenizer`` can open offline. Nothing is
  downloaded.

Prompt formats (openpi ``models/tokenizer.py``, ``PaligemmaTokenizer.tokenize``): the text is cleaned
(``strip``, ``_`` and newlines to spaces); pi0 / pi0.5 without discrete state encode
``[bos] + tokens(text) + tokens("\\n")`` (the newline is the "start of answer" token).
:func:`openpi_prompt` builds that id list for any tokeniser's ``encode_text``.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from vlarl_cli.errors import CheckpointError

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "ByteTokenizer",
    "FileTokenizer",
    "Tokenizer",
    "clean_prompt",
    "pad_batch",
]

PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
_BYTE_OFFSET = 4


@runtime_checkable
class Tokenizer(Protocol):
    """What the policies need from a tokeniser."""

    vocab_size: int

    def encode(self, texts: Sequence[str], max_len: int) -> tuple[Tensor, Tensor]:
        """``texts`` (B strings) -> ``(ids [B, max_len] long, mask [B, max_len] bool)``."""
        ...


def clean_prompt(text: str) -> str:
    """openpi's prompt cleaning: strip, underscores and newlines to spaces."""
    return text.strip().replace("_", " ").replace("\n", " ")


def pad_batch(seqs: Sequence[Sequence[int]], max_len: int, pad_id: int = PAD_ID) -> tuple[Tensor, Tensor]:
    """Right-pad / truncate id lists to ``[B, max_len]``; returns ``(ids, mask)``."""
    ids = torch.full((len(seqs), max_len), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), max_len), dtype=torch.bool)
    for i, s in enumerate(seqs):
        s = list(s)[:max_len]
        if s:
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, : len(s)] = True
    return ids, mask


class _CachedEncoder:
    """Shared batching + per-prompt cache (RL rollouts repeat the same few task prompts)."""

    vocab_size: int

    def __init__(self, cache_size: int = 1024) -> None:
        self._cache: OrderedDict[str, list[int]] = OrderedDict()
        self._cache_size = cache_size

    def prompt_ids(self, text: str) -> list[int]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _ids(self, text: str) -> list[int]:
        hit = self._cache.get(text)
        if hit is None:
            hit = self.prompt_ids(text)
            self._cache[text] = hit
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return hit

    def encode(self, texts: Sequence[str], max_len: int) -> tuple[Tensor, Tensor]:
        if isinstance(texts, str):
            raise TypeError("encode expects a list of strings, got one string")
        return pad_batch([self._ids(t) for t in texts], max_len)

    bos_id: int = BOS_ID

    def encode_text(self, text: str) -> list[int]:  # pragma: no cover - overridden
        raise NotImplementedError

    def encode_with_state(self, texts: Sequence[str], states: Tensor, max_len: int) -> tuple[Tensor, Tensor]:
        """pi0.5 with ``discrete_state_input`` (openpi ``PaligemmaTokenizer.tokenize`` with a state):
        ``[bos] + tokens("Task: {text}, State: {s_1 ... s_D};\nAction: ")`` where each normalised state
        value is binned into 256 bins on [-1, 1] (``np.digitize(x, linspace(-1, 1, 257)[:-1]) - 1``).

        ``states``: ``[B, D]`` normalised (not padded) state.
        """
        import numpy as np

        bins = np.linspace(-1, 1, 256 + 1)[:-1]
        seqs = []
        for text, state in zip(texts, states.detach().cpu().double().numpy(), strict=True):
            discretized = np.digitize(state, bins=bins) - 1
            prompt = f"Task: {clean_prompt(text)}, State: {' '.join(map(str, discretized))};\nAction: "
            seqs.append([self.bos_id, *self.encode_text(prompt)])
        return pad_batch(seqs, max_len)


class ByteTokenizer(_CachedEncoder):
    """UTF-8 byte tokeniser with Gemma's special ids; ``vocab_size`` = 260 (needs a model vocab >= 260)."""

    vocab_size = 256 + _BYTE_OFFSET

    def encode_text(self, text: str) -> list[int]:
        return [b + _BYTE_OFFSET for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i - _BYTE_OFFSET for i in ids if i >= _BYTE_OFFSET).decode("utf-8", errors="replace")

    def prompt_ids(self, text: str) -> list[int]:
        return openpi_prompt(self.encode_text, text, BOS_ID)


def openpi_prompt(encode_text: Callable[[str], list[int]], text: str, bos_id: int) -> list[int]:
    """``[bos] + encode(clean(text)) + encode("\\n")``: the pi0 / pi0.5 (continuous state) prompt."""
    return [bos_id, *encode_text(clean_prompt(text)), *encode_text("\n")]


class FileTokenizer(_CachedEncoder):
    """A local tokeniser file or folder (no network).

    Args:
        path: a sentencepiece ``.model`` file, a ``tokenizer.json`` file (``tokenizers`` library), or a
            folder holding one of them (or any folder ``transformers.AutoTokenizer`` can open offline).
        bos_id: id prepended to every prompt (PaliGemma: 2; a sentencepiece model's own bos id wins).
    """

    def __init__(self, path: str | os.PathLike[str], bos_id: int = BOS_ID) -> None:
        super().__init__()
        p = Path(path)
        self.bos_id = bos_id
        self._encode: Callable[[str], list[int]]
        json_file: Path | None = None
        sp_file: Path | None = None
        if p.is_file():
            sp_file, json_file = (p, None) if p.suffix == ".model" else (None, p)
        elif p.is_dir():
            if (p / "tokenizer.json").is_file():
                json_file = p / "tokenizer.json"
            else:
                sp_file = next(iter(sorted(p.glob("*.model"))), None)
        if sp_file is not None:
            # openpi's own tokenizer: the PaliGemma sentencepiece model (paligemma_tokenizer.model)
            try:
                import sentencepiece
            except ImportError:
                raise CheckpointError(f"{sp_file} is a sentencepiece model but the sentencepiece package is "
                                      "not installed.", "pip install sentencepiece, or use a tokenizer.json.") from None
            sp = sentencepiece.SentencePieceProcessor(model_file=os.fspath(sp_file))
            self.vocab_size = int(sp.get_piece_size())
            self.bos_id = int(sp.bos_id()) if sp.bos_id() >= 0 else bos_id
            self._encode = lambda s: list(sp.encode(s))
        elif json_file is not None:
            from tokenizers import Tokenizer as _HFTokenizer

            tok = _HFTokenizer.from_file(os.fspath(json_file))
            self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
            self._encode = lambda s: list(tok.encode(s, add_special_tokens=False).ids)
        elif p.is_dir():
            try:
                from transformers import AutoTokenizer

                tok2 = AutoTokenizer.from_pretrained(os.fspath(p), local_files_only=True)
            except Exception as err:  # transformers raises many types for unreadable folders
                raise CheckpointError(f"Could not open a tokenizer in {p}: {err}",
                                      "Point tokenizer_path at a tokenizer.json or a tokenizer folder.") from None
            self.vocab_size = len(tok2)
            self._encode = lambda s: list(tok2.encode(s, add_special_tokens=False))
        else:
            raise CheckpointError(f"Tokenizer path {p} does not exist.",
                                  "Point tokenizer_path at a local tokenizer.json (e.g. PaliGemma's).")

    def encode_text(self, text: str) -> list[int]:
        return self._encode(text)

    def prompt_ids(self, text: str) -> list[int]:
        return openpi_prompt(self._encode, text, self.bos_id)
