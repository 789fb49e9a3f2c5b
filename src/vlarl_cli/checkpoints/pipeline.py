"""The steps every family's checkpoint module shares: read our ``vlarl_config.json``, build the model on the
meta device and recompute its non-persistent buffers, plan which file tensor fills which parameter
(:func:`plan_copies`, :func:`fill_tied` for tied storage), split what a file lacks into fresh RL / LoRA
parameters and real holes (:func:`plan_absent`), refuse a strict load with holes BEFORE a tensor is read,
stream the planned tensors in, build the fresh parameters and zero the holes (:func:`settle_absent`), report
by key name (:class:`LoadReport`, ``policy.load_report`` of every family), and write weights (single file or
shards + index). A load, in order: ``open_checkpoint_folder`` -> config -> :func:`build_on_meta` ->
:func:`plan_copies` -> :func:`plan_absent` -> ``raise_if_incomplete`` when strict -> :func:`stream` ->
:func:`settle_absent`.

A family's ``checkpoint.py`` keeps only what is its own: the rule telling its upstream layouts apart
(given to :func:`detect_layout`), key maps (the ``rename`` of :func:`plan_copies`), config-from-checkpoint,
which parameters may start fresh (:func:`split_fresh` prefixes) and how to build them, side files and
upstream ``config.json`` writers. Opening a folder for a load (exists, layout known, safetensors present,
every shard the index names there) is :func:`vlarl_cli.checkpoints.detect.open_checkpoint_folder`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from vlarl_cli.checkpoints.detect import read_json_object
from vlarl_cli.errors import CheckpointError, did_you_mean

__all__ = ["INDEX", "MAX_SHARD_BYTES", "VLARL_CONFIG", "WEIGHTS", "LoadReport", "TensorReader", "TensorTable",
           "build_on_meta", "cast_for_save", "check_format", "detect_layout", "detect_or_refuse", "fill_tied",
           "format_keys", "plan_absent", "plan_copies", "read_vlarl_config", "require_json", "reset_buffers",
           "settle_absent", "shards", "split_fresh", "stream", "write_vlarl_config", "write_weights", "zero_fill"]

VLARL_CONFIG = "vlarl_config.json"
WEIGHTS = "model.safetensors"
INDEX = f"{WEIGHTS}.index.json"
MAX_SHARD_BYTES = 4 * 1024**3
_LORA_SUFFIXES = (".lora_A", ".lora_B")
_Model = TypeVar("_Model", bound=nn.Module)
#: name -> (shape, dtype, file): :func:`vlarl_cli.checkpoints.detect.tensor_table` of a checkpoint
TensorTable = dict[str, tuple[tuple[int, ...], str, Path]]


# ---------------------------------------------------------------------------------------- detect
def detect_layout(path: str | os.PathLike[str], family: str,
                  external: Callable[[Path, dict[str, Any]], str | None]) -> str | None:
    """The first steps of every family's ``detect_format``: a folder with our ``vlarl_config.json`` is
    ``vlarl`` when it names ``family`` (and no layout of this family otherwise); any other folder is
    decided by ``external(root, its config.json object or {})``."""
    root = Path(path)
    if not root.is_dir():
        return None
    vcfg = read_json_object(root / VLARL_CONFIG)
    if vcfg is not None:
        return "vlarl" if vcfg.get("family") == family else None
    return external(root, read_json_object(root / "config.json") or {})


# ---------------------------------------------------------------------------------------- our config file
def read_vlarl_config(root: Path, format_version: int) -> dict[str, Any]:
    """``vlarl_config.json`` of ``root``, checked: a ``model`` object and the ``format_version`` we read."""
    vcfg = read_json_object(root / VLARL_CONFIG)
    if vcfg is None or not isinstance(vcfg.get("model"), dict):
        raise CheckpointError(f"{root / VLARL_CONFIG} is missing or malformed.", "Re-save the checkpoint.")
    if vcfg.get("format_version") != format_version:
        raise CheckpointError(f"{root} has format_version {vcfg.get('format_version')}, this vlarl reads "
                              f"{format_version}.", "Convert it with the matching vlarl version.")
    return vcfg


def require_json(file: Path) -> dict[str, Any]:
    """A side file a layout cannot do without (upstream ``config.json``, statistics), or an error naming it."""
    import json

    try:
        return json.loads(file.read_text())
    except FileNotFoundError as exc:
        raise CheckpointError(f"Missing {file.name} in {file.parent}.",
                              "The checkpoint folder is incomplete; re-download or re-save it.") from exc
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{file} is not valid JSON ({exc}).", "Repair or re-download the file.") from exc


def write_vlarl_config(folder: Path, family: str, format_version: int, model: dict[str, Any],
                       **extra: Any) -> None:
    from vlarl_cli.checkpoints.atomic import atomic_write_json

    atomic_write_json(folder / VLARL_CONFIG, {"family": family, "format_version": format_version, "model": model,
                                              **extra})


def detect_or_refuse(path: str | os.PathLike[str], detect: Callable[[Path], str | None], family: str,
                     hint: str) -> tuple[Path, str]:
    """``(root, layout)`` of a folder that must be a ``family`` checkpoint (``describe``'s first step)."""
    root = Path(path)
    fmt = detect(root)
    if fmt is None:
        raise CheckpointError(f"{root} is not a recognised {family} checkpoint.", hint)
    return root, fmt


# ---------------------------------------------------------------------------------------- build + stream
def build_on_meta(build: Callable[[], _Model], materialise: Callable[[_Model], _Model]
                  ) -> tuple[_Model, dict[str, Tensor]]:
    """``build()`` on the meta device (no memory), ``materialise`` it (cast on meta first, then
    ``to_empty`` on the target device: never an fp32 copy of a large model), recompute the
    non-persistent buffers ``to_empty`` leaves uninitialised (:func:`reset_buffers`); returns the model
    and its state dict (``keep_vars``: the tensors to fill). Every parameter is then uninitialised memory
    until a file tensor fills it or :func:`settle_absent` runs: the ``fresh_init`` given there must
    initialise each fresh parameter itself (a constructor's init did not survive ``to_empty``)."""
    with torch.device("meta"):
        model = build()
    model = materialise(model)
    reset_buffers(model)
    return model, dict(model.state_dict(keep_vars=True))


_RECOMPUTED = frozenset({"inv_freq", "original_inv_freq", "position_ids"})


def reset_buffers(model: nn.Module) -> None:
    """Recompute the buffers state dicts do not hold, which ``to_empty`` leaves uninitialised: rotary
    frequencies (``inv_freq`` / ``original_inv_freq``: from a fresh module of the same config, float32 as
    transformers keeps them) and ``position_ids`` (``arange``). Any other non-persistent buffer is refused:
    it would stay uninitialised memory."""
    for name, module in model.named_modules():
        own = set(module._non_persistent_buffers_set)
        if not own:
            continue
        if own - _RECOMPUTED:
            raise TypeError(f"{name or type(model).__name__} has non-persistent buffers {sorted(own - _RECOMPUTED)} "
                            "that a checkpoint load cannot recompute.")
        device = next(module.buffers(recurse=False)).device
        if "inv_freq" in own:
            fresh = type(module)(module.config)
            for buf in own & {"inv_freq", "original_inv_freq"}:
                setattr(module, buf, getattr(fresh, buf).to(device=device, dtype=torch.float32))
        if "position_ids" in own:
            n = int(module.get_buffer("position_ids").shape[-1])
            module.register_buffer("position_ids", torch.arange(n, device=device).expand(1, -1), persistent=False)


class TensorReader:
    """Reads tensors by (file, name) through one ``safe_open`` handle per file, all closed on exit:
    a load never holds a whole file in memory."""

    def __init__(self) -> None:
        self._handles: dict[Path, Any] = {}

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for handle in self._handles.values():
            handle.__exit__(None, None, None)
        self._handles.clear()

    def get(self, file: Path, name: str) -> Tensor:
        from safetensors import safe_open

        if file not in self._handles:
            self._handles[file] = safe_open(os.fspath(file), "pt", device="cpu").__enter__()
        return self._handles[file].get_tensor(name)


def plan_copies(header: TensorTable, params: dict[str, Tensor], rename: Callable[[str], str | None],
                report: LoadReport, *, ignore: Callable[[str], bool] = lambda _key: False, optional: tuple[str, ...] = (),
                skip_misfit_optional: bool = False) -> list[tuple[str, str]]:
    """``(file key, our key)`` of every file tensor to copy into ``params``; the others go to ``report``:
    ``ignore``-d keys (default: none) to ``skipped``, keys ``rename`` maps to None or to no parameter to ``unexpected``
    (``skipped`` for RL heads under ``optional`` the model does not have, or - ``skip_misfit_optional`` -
    has in another shape), other shape differences to ``mismatched``."""
    plan: list[tuple[str, str]] = []
    for ext, (shape, _, _) in header.items():
        internal = None if ignore(ext) else rename(ext)
        if internal is None:
            (report.skipped if ignore(ext) else report.unexpected).append(ext)
            continue
        target = params.get(internal)
        fits = target is not None and tuple(target.shape) == tuple(shape)
        if internal.startswith(optional) and (target is None or (skip_misfit_optional and not fits)):
            report.skipped.append(ext)
        elif target is None:
            report.unexpected.append(ext)
        elif not fits:
            report.mismatched.append(f"{ext} {list(shape)} vs model {list(target.shape)}")
        else:
            plan.append((ext, internal))
    return plan


def fill_tied(plan: list[tuple[str, str]], header: TensorTable, params: dict[str, Tensor], report: LoadReport,
              embed: str | None, sources: Iterable[str]) -> None:
    """Tied storage (``safetensors.save_model`` keeps one name of shared tensors): when no file tensor fills
    the token embedding ``embed``, the first of ``sources`` (the LM head) that the file holds does."""
    if embed is None or embed not in params or any(internal == embed for _, internal in plan):
        return
    src = next((k for k in sources if k in header), None)
    if src is None:
        return
    if tuple(header[src][0]) != tuple(params[embed].shape):
        report.mismatched.append(f"{src} {list(header[src][0])} vs model {list(params[embed].shape)}")
    else:
        plan.append((src, embed))


def stream(plan: Iterable[tuple[str, str]], header: TensorTable, params: dict[str, Tensor],
           report: LoadReport) -> None:
    """Copy each planned file tensor into its parameter (cast to the parameter's dtype), one at a time."""
    with torch.no_grad(), TensorReader() as reader:
        for ext, internal in plan:
            params[internal].copy_(reader.get(header[ext][2], ext).to(params[internal].dtype))
            report.loaded += 1


def split_fresh(absent: Iterable[str], prefixes: tuple[str, ...], keys: tuple[str, ...] = ()
                ) -> tuple[list[str], list[str]]:
    """``(fresh, missing)``: parameters a file lacks that start fresh (RL heads under ``prefixes``, the
    internal-only ``keys``, LoRA factors) and the real holes."""
    absent = list(absent)
    fresh = [k for k in absent if k.startswith(prefixes) or k in keys or k.endswith(_LORA_SUFFIXES)]
    return fresh, [k for k in absent if k not in fresh]


def plan_absent(params: dict[str, Tensor], filled: Iterable[str], report: LoadReport, prefixes: tuple[str, ...],
                keys: tuple[str, ...] = ()) -> None:
    """Before streaming: the parameters that ``filled`` (every name the plan fills, or claims) leaves out,
    in state-dict order, split by :func:`split_fresh` into ``report.initialized`` and ``report.missing``.
    With the plan's ``unexpected`` / ``mismatched`` this is all a strict refusal names, so
    :meth:`LoadReport.raise_if_incomplete` can refuse before a tensor is read (a real checkpoint is 6-15 GB)."""
    filled = set(filled)
    report.initialized, report.missing = split_fresh([k for k in params if k not in filled], prefixes, keys)


def settle_absent(policy: _Model, params: dict[str, Tensor], report: LoadReport,
                  fresh_init: Callable[[_Model, list[str]], None]) -> None:
    """After streaming, the parameters :func:`plan_absent` found the file lacks: ``fresh_init(policy,
    report.initialized)`` builds the fresh ones, the real holes (``report.missing``) are zero-filled.
    ``fresh_init`` must initialise every parameter it is given: after :func:`build_on_meta` they are
    uninitialised memory (``to_empty``), never a constructor's initialisation."""
    fresh_init(policy, report.initialized)
    zero_fill(params, report.missing)


def zero_fill(params: dict[str, Tensor], keys: Iterable[str]) -> None:
    """strict=False: holes are zeros, never uninitialised memory."""
    with torch.no_grad():
        for k in keys:
            params[k].zero_()


# ---------------------------------------------------------------------------------------- report
def format_keys(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" ... and {len(keys) - limit} more" if len(keys) > limit else "")


@dataclass
class LoadReport:
    """What a load did, by key name (``policy.load_report`` of every family).

    Attributes:
        format: the layout read.
        loaded: parameters filled from the file.
        missing: parameters the file lacks that may not start fresh (zero-filled, or kept as built, when
            not strict).
        unexpected: file tensors with no place in the model.
        mismatched: ``"<file key> [file shape] vs model [model shape]"``.
        initialized: parameters the file lacks that start fresh (RL heads, LoRA factors, internal-only).
        skipped: file tensors deliberately not loaded (known-unused, cut layers, RL heads that do not fit).
        details: the family's own facts (norm-stats source, tokenizer, side files, ...).
    """

    format: str
    loaded: int = 0
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    initialized: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def raise_if_incomplete(self, root: Path, model: str, hint: str) -> None:
        """Refuse a strict load with holes, naming the keys of each kind."""
        parts = [f"{label} {len(keys)}: {format_keys(keys)}" for label, keys in
                 (("missing", self.missing), ("unexpected", self.unexpected), ("wrong shape", self.mismatched))
                 if keys]
        if parts:
            raise CheckpointError(f"{root} ({self.format}) does not match the {model}: " + "; ".join(parts) + ".",
                                  hint)


# ---------------------------------------------------------------------------------------- save
def check_format(fmt: str, formats: tuple[str, ...], family: str) -> None:
    """Refuse a layout ``family`` does not write (the name closest to ``fmt`` suggested)."""
    if fmt not in formats:
        raise CheckpointError(f'Unknown {family} checkpoint format "{fmt}".{did_you_mean(fmt, formats)}',
                              f"Use one of {', '.join(formats)}.")


def cast_for_save(tensors: dict[str, Tensor], dtype: torch.dtype | None) -> dict[str, Tensor]:
    """Floating tensors cast to ``dtype`` (None: kept), all contiguous on the CPU."""
    return {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).contiguous().cpu()
            for k, v in tensors.items()}


def shards(tensors: dict[str, Tensor], max_bytes: int) -> list[dict[str, Tensor]]:
    """Consecutive groups of at most ``max_bytes`` (a larger tensor alone in its group)."""
    out: list[dict[str, Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if out[-1] and size + nbytes > max_bytes:
            out.append({})
            size = 0
        out[-1][name] = t
        size += nbytes
    return out


def write_weights(folder: Path, tensors: dict[str, Tensor], *, max_shard_bytes: int = MAX_SHARD_BYTES,
                  force_index: bool = False, name: str = WEIGHTS) -> None:
    """``name`` (``model.safetensors``), or ``model-0000i-of-0000N.safetensors`` + ``name.index.json`` when
    larger than ``max_shard_bytes`` (or ``force_index``: upstream layouts that always shard); the shards
    take ``name``'s stem. Shards of an earlier, differently sharded save in the same folder are removed."""
    from vlarl_cli.checkpoints.atomic import atomic_save_safetensors, atomic_write_json

    groups = shards(tensors, max_shard_bytes)
    stem, index = name.removesuffix(".safetensors"), f"{name}.index.json"
    old = {p.name for p in folder.glob(f"{stem}*.safetensors")}
    if len(groups) == 1 and not force_index:
        atomic_save_safetensors(groups[0], folder / name, metadata={"format": "pt"})
        written = {name}
        (folder / index).unlink(missing_ok=True)
    else:
        weight_map: dict[str, str] = {}
        written = set()
        for i, group in enumerate(groups, start=1):
            shard = f"{stem}-{i:05d}-of-{len(groups):05d}.safetensors"
            atomic_save_safetensors(group, folder / shard, metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(group, shard))
            written.add(shard)
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        atomic_write_json(folder / index, {"metadata": {"total_size": total}, "weight_map": weight_map})
    for stale in old - written:
        (folder / stale).unlink(missing_ok=True)
