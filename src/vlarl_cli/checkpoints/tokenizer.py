"""The PaliGemma prompt tokenizer for pi0 / pi0.5: found, fetched, verified, cached.

openpi and RLinf checkpoints ship no tokenizer: openpi reads ``gs://big_vision/paligemma_tokenizer.model``,
a bucket that refuses anonymous reads since 2026-02 (openpi issue #881; REFERENCE.md section 7). The
same sentencepiece model is published with the PaliGemma checkpoints on the hub (gated), as
``tokenizer.model``. :func:`resolve_tokenizer` looks, in order:

1. the explicit path the config gives (``actor.model.tokenizer_path``);
2. the checkpoint folder (``tokenizer.model``, ``paligemma_tokenizer.model``, ``tokenizer.json``);
3. vlarl's cache, ``$VLARL_CACHE/tokenizers/paligemma/`` (default ``~/.cache/vlarl``);
4. an earlier ``vlarl download <repo>`` of a repository in :data:`TOKENIZER_REPOS` in the Hugging Face
   cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``);
5. a download of ``tokenizer.model`` from the first of :data:`TOKENIZER_REPOS` through
   :func:`vlarl_cli.checkpoints.hub.download` (verified transfer), unless ``HF_HUB_OFFLINE`` is set.

Whatever is found is VERIFIED against the model it will serve (:func:`verify_tokenizer`): the
sentencepiece vocabulary must have exactly the model's declared vocabulary size, ids 0-3 must be
``<pad> </s> <bos> <unk>`` (openpi pads with 0, prepends bos 2 via ``add_bos``, FAST ends with eos 1)
and ``"\\n"`` (pi0's "start of answer" token) must encode to ONE id that is not a special (unk). For the real PaliGemma vocabulary
(:data:`PALIGEMMA_VOCAB` = 257152 = 256000 Gemma pieces + 1024 ``<locNNNN>`` + 128 ``<segNNN>``) the
location / segmentation pieces must sit at their ids as well (openpi's FAST tokenizer maps actions to
the last 128 ids). A file found in steps 3-5 is copied into vlarl's cache with a record of its sha256
and origin; the sha256 goes on the evaluation protocol card.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vlarl_cli.errors import CheckpointError, HubError

__all__ = [
    "PALIGEMMA_VOCAB",
    "TOKENIZER_REPOS",
    "TokenizerInfo",
    "cache_dir",
    "cached_tokenizer",
    "fetch_tokenizer",
    "resolve_tokenizer",
    "sha256_file",
    "verify_tokenizer",
]

PALIGEMMA_VOCAB = 257152
#: hub repositories that carry the PaliGemma sentencepiece model as ``tokenizer.model`` (gated: accept
#: the licence on the repository page, then log in or set HF_TOKEN)
TOKENIZER_REPOS: tuple[str, ...] = ("google/paligemma-3b-pt-224",)
REPO_FILE = "tokenizer.model"
CACHED_NAME = "paligemma_tokenizer.model"
RECORD_NAME = "paligemma_tokenizer.json"
CHECKPOINT_NAMES = ("tokenizer.model", "paligemma_tokenizer.model", "tokenizer.json")
# id -> accepted pieces (Gemma's sentencepiece model names eos "<eos>", other exports "</s>")
_SPECIALS = {0: ("<pad>",), 1: ("<eos>", "</s>"), 2: ("<bos>", "<s>"), 3: ("<unk>",)}
_GEMMA_TEXT_VOCAB = 256000


@dataclass(frozen=True)
class TokenizerInfo:
    """Where the tokenizer came from and what it is (recorded on the protocol card)."""

    path: str
    sha256: str
    vocab_size: int
    source: str  # "config" | "checkpoint" | "vlarl-cache" | "hf-cache:<repo>" | "hub:<repo>@<commit>"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cache_dir() -> Path:
    """vlarl's tokenizer cache: ``$VLARL_CACHE/tokenizers/paligemma`` (default ``~/.cache/vlarl``)."""
    root = os.environ.get("VLARL_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "vlarl"
    return base / "tokenizers" / "paligemma"


def sha256_file(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


# ---------------------------------------------------------------------------------------- verify
def _required_pieces(vocab_size: int) -> dict[int, tuple[str, ...]]:
    pieces = dict(_SPECIALS)
    if vocab_size == PALIGEMMA_VOCAB:
        base = _GEMMA_TEXT_VOCAB
        pieces.update({base: ("<loc0000>",), base + 1023: ("<loc1023>",), base + 1024: ("<seg000>",),
                       base + 1151: ("<seg127>",)})
    return pieces


def verify_tokenizer(path: str | os.PathLike[str], vocab_size: int, *, source: str = "config") -> TokenizerInfo:
    """Check that ``path`` is the prompt tokenizer of a model with ``vocab_size`` token embeddings.

    ``vocab_size`` is the model's declared vocabulary (257152 for every real pi0 / pi0.5), so the real
    check cannot be bypassed by a smaller file. Raises :class:`CheckpointError` naming what differs.
    """
    p = Path(path)
    if p.is_dir():
        found = [p / n for n in CHECKPOINT_NAMES if (p / n).is_file()]
        if not found:
            raise CheckpointError(f"Tokenizer folder {p} holds none of {', '.join(CHECKPOINT_NAMES)}.",
                                  "Point tokenizer_path at PaliGemma's sentencepiece tokenizer.model.")
        p = found[0]
    if not p.is_file():
        raise CheckpointError(f"Tokenizer file {p} does not exist.",
                              "Point tokenizer_path at PaliGemma's sentencepiece tokenizer.model.")
    pieces, encode_newline, size = _read_pieces(p, _required_pieces(vocab_size))
    problems = []
    if size != vocab_size:
        problems.append(f"it has {size} ids, the model's vocabulary has {vocab_size}")
    problems += [f"id {i} is {got!r}, expected {' or '.join(map(repr, want))}"
                 for i, (want, got) in sorted(pieces.items()) if got not in want]
    if len(encode_newline) != 1 or encode_newline[0] in _SPECIALS:
        problems.append(f'"\\n" encodes to {encode_newline}, not one ordinary id (pi0\'s start-of-answer token)')
    if problems:
        raise CheckpointError(f"{p} is not the tokenizer of this model: " + "; ".join(problems) + ".",
                              "Use PaliGemma's tokenizer.model (vocabulary 257152 with <locNNNN> / <segNNN> "
                              f"pieces), e.g. from the gated hub repository {TOKENIZER_REPOS[0]}.")
    return TokenizerInfo(path=os.fspath(p.resolve()), sha256=sha256_file(p), vocab_size=size, source=source)


def _read_pieces(p: Path, wanted: dict[int, tuple[str, ...]]
                 ) -> tuple[dict[int, tuple[tuple[str, ...], str | None]], list[int], int]:
    """``({id: (expected, found)}, ids of "\\n", vocabulary size)`` of a sentencepiece or tokenizers file."""
    if p.suffix == ".json":
        from tokenizers import Tokenizer as HFTokenizer

        try:
            tok = HFTokenizer.from_file(os.fspath(p))
        except Exception as err:  # the tokenizers library raises a bare Exception on a bad file
            raise CheckpointError(f"{p} is not a readable tokenizer.json ({err}).",
                                  "Re-download the tokenizer.") from None
        size = tok.get_vocab_size(with_added_tokens=True)
        return ({i: (w, tok.id_to_token(i)) for i, w in wanted.items()},
                list(tok.encode("\n", add_special_tokens=False).ids), size)
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.load(os.fspath(p))
    except (OSError, RuntimeError) as err:
        raise CheckpointError(f"{p} is not a readable sentencepiece model ({err}).",
                              "Re-download the tokenizer.") from None
    size = int(sp.get_piece_size())
    found = {i: (w, sp.id_to_piece(i) if i < size else None) for i, w in wanted.items()}
    return found, list(sp.encode("\n")), size


# ---------------------------------------------------------------------------------------- cache
def cached_tokenizer(vocab_size: int) -> TokenizerInfo | None:
    """The tokenizer in vlarl's cache, verified; None when the cache has none."""
    f = cache_dir() / CACHED_NAME
    if not f.is_file():
        return None
    record = _read_record(cache_dir() / RECORD_NAME)
    return verify_tokenizer(f, vocab_size, source=f"vlarl-cache ({record.get('origin', 'unknown origin')})")


def _read_record(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _store(src: Path, vocab_size: int, origin: str) -> TokenizerInfo:
    """Verify ``src`` and copy it into vlarl's cache (atomically) with a record of its origin."""
    from vlarl_cli.checkpoints.atomic import atomic_open, atomic_write_json

    info = verify_tokenizer(src, vocab_size, source=origin)
    dest = cache_dir() / CACHED_NAME
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fin, atomic_open(dest, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    atomic_write_json(cache_dir() / RECORD_NAME, {"sha256": info.sha256, "vocab_size": info.vocab_size,
                                                  "origin": origin})
    return TokenizerInfo(path=os.fspath(dest.resolve()), sha256=info.sha256, vocab_size=info.vocab_size,
                         source=origin)


def _hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".cache" / "huggingface") / "hub"


def _from_hf_cache(vocab_size: int) -> TokenizerInfo | None:
    """``tokenizer.model`` of an earlier ``vlarl download <repo>`` (hub cache layout), copied into ours."""
    from vlarl_cli.checkpoints.transfer import repo_cache_folder

    for repo in TOKENIZER_REPOS:
        snapshots = repo_cache_folder(_hf_cache_dir(), repo) / "snapshots"
        for f in sorted(snapshots.glob(f"*/{REPO_FILE}")) if snapshots.is_dir() else []:
            return _store(f, vocab_size, f"hf-cache:{repo}@{f.parent.name}")
    return None


def fetch_tokenizer(vocab_size: int, repo_id: str | None = None) -> TokenizerInfo:
    """Download ``tokenizer.model`` from ``repo_id`` (default the first of :data:`TOKENIZER_REPOS`) with
    :func:`vlarl_cli.checkpoints.hub.download`, verify it and cache it. Raises :class:`HubError`."""
    from vlarl_cli.checkpoints.hub import download

    repo = repo_id or TOKENIZER_REPOS[0]
    with tempfile.TemporaryDirectory(prefix="vlarl-tokenizer-") as tmp:
        result = download(repo, local_dir=tmp, include=[REPO_FILE], quiet=True, retries=2)
        return _store(Path(tmp) / REPO_FILE, vocab_size, f"hub:{result.repo_id}@{result.commit}")


# ---------------------------------------------------------------------------------------- resolve
def resolve_tokenizer(vocab_size: int, *, explicit: str | os.PathLike[str] | None = None,
                      checkpoint_dir: str | os.PathLike[str] | None = None,
                      download: bool = True) -> TokenizerInfo:
    """The verified prompt tokenizer for a model with ``vocab_size`` ids (search order in the module
    docstring). Raises :class:`CheckpointError` naming every place looked at and how to provide one."""
    if explicit is not None:
        return verify_tokenizer(explicit, vocab_size, source="config")
    if checkpoint_dir is not None:
        for name in CHECKPOINT_NAMES:
            f = Path(checkpoint_dir) / name
            if f.is_file():
                return verify_tokenizer(f, vocab_size, source="checkpoint")
    info = cached_tokenizer(vocab_size) or _from_hf_cache(vocab_size)
    if info is not None:
        return info
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    hub_problem = "HF_HUB_OFFLINE is set, so the hub was not asked"
    if download and not offline:
        try:
            return fetch_tokenizer(vocab_size)
        except HubError as err:
            hub_problem = f"fetching {REPO_FILE} from {TOKENIZER_REPOS[0]} failed: {err.problem}"
    elif not download:
        hub_problem = "downloading was not allowed"
    where = Path(checkpoint_dir) if checkpoint_dir is not None else None
    raise CheckpointError(
        f"No prompt tokenizer for this pi0 / pi0.5 model (vocabulary {vocab_size}): none of "
        f"{', '.join(CHECKPOINT_NAMES)} in the checkpoint folder{f' {where}' if where else ''}, nothing in "
        f"vlarl's cache {cache_dir()}, no earlier download of {', '.join(TOKENIZER_REPOS)} in {_hf_cache_dir()}, "
        f"and {hub_problem}. openpi's own source (gs://big_vision/paligemma_tokenizer.model) no longer allows "
        "anonymous reads.",
        f"Either (1) accept the licence at https://huggingface.co/{TOKENIZER_REPOS[0]}, log in with `hf auth "
        f"login` or set HF_TOKEN, and run `vlarl download {TOKENIZER_REPOS[0]} --include {REPO_FILE}` (or just "
        "run this command again online: it fetches and caches it); or (2) copy PaliGemma's tokenizer.model "
        "(paligemma_tokenizer.model) into the checkpoint folder; or (3) set actor.model.tokenizer_path to it.")
