"""`vlarl convert`: move a checkpoint between vlarl's layout and its family's upstream layouts.

The family is detected from the files (:mod:`vlarl_cli.checkpoints.detect`); the work is done by the
family's checkpoint module ``vlarl_cli.policies.<family>.checkpoint`` (shared API: ``FORMATS``,
``detect_format``, ``load_policy``, ``save_policy``, ``describe``, ``merge_lora_for_export``), so key maps live with the model
code that defines the keys. This module adds what every family needs:

* a pickle gate: sources holding only ``.bin``/``.pt`` weights need ``allow_pickle=True``; they are then
  read with ``torch.load(weights_only=True)`` into a private safetensors staging copy, so family
  loaders stay safetensors-only;
* LoRA merging (``merge_lora=True``, done by the family module): every LoRA layer is folded into
  its base weight, ``W + (B @ A) * alpha / r`` (Hu et al. 2021, arXiv:2106.09685, eq. 3);
* dtype casting on save;
* an atomic destination (built under a temporary name, renamed when complete);
* a self-check: source and converted policies (both loaded in float32) run the same deterministic probe
  batch with the same seed; the report gives max |actions_src - actions_dst| (and values). Without a
  dtype cast it must be 0 up to float rounding of a LoRA merge, else CheckpointError.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlarl_cli.checkpoints.atomic import TMP_PREFIX, atomic_directory
from vlarl_cli.checkpoints.detect import (
    FAMILY_MODEL_TYPES,
    detect_checkpoint,
    family_checkpoint_module,
)
from vlarl_cli.checkpoints.safety import SAFETENSORS_SUFFIX, load_state_dict
from vlarl_cli.errors import CheckpointError, did_you_mean

__all__ = ["ConvertReport", "convert", "parse_dtype", "probe_observation", "supported_conversions"]

_DTYPES = {
    "fp32": "float32", "float32": "float32", "float": "float32",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "float16": "float16", "half": "float16",
}
# The layouts each shipped family writes (equal to its module's FORMATS; a test keeps them equal), so a
# mistyped --to is refused before any model code (and torch) is imported.
FAMILY_FORMATS: dict[str, tuple[str, ...]] = {
    "pi0": ("vlarl", "openpi", "lerobot", "hf_pi0"),
    "gr00t": ("vlarl", "gr00t_n15", "gr00t_n16"),
    "openvla_oft": ("vlarl", "openvla_hf"),
}
# Conversions that cannot exist, by detected variant: (variant, target format) -> why and what instead.
_IMPOSSIBLE: dict[tuple[str, str], tuple[str, str]] = {
    ("pi05", "hf_pi0"): ("transformers' native pi0 has no pi0.5 (adaRMS) support", "Use --to openpi or lerobot."),
    ("gr00t_n15", "gr00t_n16"): ("GR00T N1.5 and N1.6 are different architectures", "Use --to gr00t_n15 or vlarl."),
    ("gr00t_n16", "gr00t_n15"): ("GR00T N1.6 and N1.5 are different architectures", "Use --to gr00t_n16 or vlarl."),
}
# Max |diff| accepted without a dtype cast: 0 for a pure re-layout; a LoRA merge changes the order of
# float32 sums (x @ W + (x @ A^T) @ B^T vs x @ (W + B @ A)), which moves results by ~1e-6 relative.
_TOL_EXACT = 0.0
_TOL_MERGE = 1e-4


@dataclass
class ConvertReport:
    """What :func:`convert` did.

    Attributes:
        src, dst: folders.
        family: detected family package name.
        src_format, dst_format: layouts.
        dtype: cast applied on save (torch dtype name) or None.
        lora_merged: number of LoRA layers folded into their base weights.
        num_parameters: stored elements of the converted weights (safetensors headers).
        max_abs_diff: max |actions_src - actions_dst| on the probe batch (None when not checked).
        max_abs_diff_values: same for the value estimates (None when not checked).
        probe: description of the probe batch.
        notes: what the source held that the layouts alone do not say (an openpi JAX checkpoint: its variant,
            stored dtypes, LoRA merged, norm stats, defaults taken).
    """

    src: Path
    dst: Path
    family: str
    src_format: str
    dst_format: str
    dtype: str | None
    lora_merged: int
    num_parameters: int | None
    max_abs_diff: float | None
    max_abs_diff_values: float | None
    probe: str
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        check = ("not checked (--skip-check)" if self.max_abs_diff is None else
                 f"max |diff| actions {self.max_abs_diff:.3g}, values {self.max_abs_diff_values:.3g} "
                 f"({self.probe})")
        return "\n".join([
            f"converted {self.src} ({self.family}, {self.src_format}) -> {self.dst} ({self.dst_format})",
            f"  dtype:       {self.dtype or 'unchanged'}",
            f"  LoRA merged: {self.lora_merged} layer(s)",
            f"  parameters:  {self.num_parameters:,}" if self.num_parameters is not None else
            "  parameters:  unknown",
            f"  check:       {check}",
            *(f"  note:        {note}" for note in self.notes),
        ])


def dtype_name(name: str | None) -> str | None:
    """``"bf16"`` / ``"bfloat16"`` / ... -> ``"bfloat16"``; None -> None; CheckpointError otherwise (no torch)."""
    if name is None:
        return None
    key = _DTYPES.get(str(name).lower().removeprefix("torch."))
    if key is None:
        raise CheckpointError(f'Unknown dtype "{name}".{did_you_mean(str(name), tuple(_DTYPES))}',
                              fix="Use one of fp32, bf16, fp16 (or float32, bfloat16, float16).")
    return key


def parse_dtype(name: str | None) -> Any:
    """``"bf16"`` / ``"bfloat16"`` / ... -> ``torch.bfloat16``; None -> None. CheckpointError otherwise."""
    key = dtype_name(name)
    if key is None:
        return None
    import torch

    return getattr(torch, key)


def supported_conversions() -> dict[str, tuple[str, ...]]:
    """Families whose checkpoint module exists, with the formats each can read and write."""
    out: dict[str, tuple[str, ...]] = {}
    for family in FAMILY_MODEL_TYPES:
        module = family_checkpoint_module(family)
        if module is not None:
            out[family] = tuple(module.FORMATS)
    return out


def _supported_text() -> str:
    sup = supported_conversions()
    if not sup:
        return "no family has a checkpoint module yet"
    return "; ".join(f"{fam}: {', '.join(fmts)}" for fam, fmts in sup.items())


def probe_observation(batch_size: int = 2, image_size: int = 224, seed: int = 0) -> dict[str, Any]:
    """A deterministic observation batch in the env contract of :mod:`vlarl_cli.keys`.

    Returns ``main_images``/``wrist_images`` ``[B, H, W, 3]`` uint8, ``states`` ``[B, 8]`` float32 and
    ``task_descriptions`` (``B`` strings), all from a fixed-seed generator.
    """
    import torch

    from vlarl_cli import keys

    g = torch.Generator().manual_seed(seed)
    shape = (batch_size, image_size, image_size, 3)
    return {
        keys.MAIN_IMAGES: torch.randint(0, 256, shape, generator=g, dtype=torch.uint8),
        keys.WRIST_IMAGES: torch.randint(0, 256, shape, generator=g, dtype=torch.uint8),
        keys.STATES: torch.randn(batch_size, 8, generator=g),
        keys.TASK_DESCRIPTIONS: ["pick up the black bowl and place it on the plate",
                                 "open the top drawer of the cabinet"][:batch_size]
        + ["put the bowl on the stove"] * max(0, batch_size - 2),
    }


def _run_probe(module: Any, policy: Any, seed: int = 0) -> tuple[Any, Any]:
    """(actions [B, C, A], values [B]) of a deterministic sample under a fixed torch seed."""
    import torch

    make = getattr(module, "probe_observation", None)  # a family may supply its own probe batch
    obs = make(policy) if callable(make) else probe_observation()
    policy.eval()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)  # deterministic ODE sampling still draws its initial noise
        out = policy.sample(obs, deterministic=True)
    return out.actions.detach().float(), out.values.detach().float()


def _compare(reference: tuple[Any, Any], converted: tuple[Any, Any], family: str, fmt: str
             ) -> tuple[float, float]:
    """(max |actions diff|, max |values diff|) of two probe results; shapes must agree."""
    (ref_a, ref_v), (a, v) = reference, converted
    if a.shape != ref_a.shape or v.shape != ref_v.shape:
        raise CheckpointError(
            f"The converted model returns actions {tuple(a.shape)} / values {tuple(v.shape)} but the source "
            f"returns {tuple(ref_a.shape)} / {tuple(ref_v.shape)}.",
            fix=f"This is a bug in the {family} {fmt} writer; please report it.")
    diff = float((a - ref_a).abs().max()) if a.numel() else 0.0
    diff_v = float((v - ref_v).abs().max()) if v.numel() else 0.0
    return diff, diff_v


def _stage_pickles(src: Path, stage: Path, pickle_files: list[str]) -> None:
    """Copy ``src`` to ``stage`` with every pickle weight file rewritten as safetensors.

    ``pytorch_model.bin`` -> ``model.safetensors`` (transformers' name pairing); other names keep their
    stem. Loaded with ``weights_only=True`` (see safety.py).
    """
    from vlarl_cli.checkpoints.atomic import atomic_save_safetensors

    shutil.copytree(src, stage, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".cache", ".git", *[Path(p).name for p in pickle_files]))
    for rel in pickle_files:
        tensors = load_state_dict(src / rel, allow_pickle=True)
        name = Path(rel)
        stem = "model" if name.stem == "pytorch_model" else name.stem
        atomic_save_safetensors(tensors, stage / name.parent / (stem + SAFETENSORS_SUFFIX))


def _check_format_name(to_format: str) -> None:
    """Refuse a --to no family writes, when every registered family's layouts are known without imports."""
    if any(family not in FAMILY_FORMATS for family in FAMILY_MODEL_TYPES):
        return  # a family added at run time: its module decides (after detection)
    known = tuple(dict.fromkeys(f for family in FAMILY_MODEL_TYPES for f in FAMILY_FORMATS[family]))
    if to_format not in known:
        raise CheckpointError(f'Unknown checkpoint format "{to_format}".{did_you_mean(to_format, known)}',
                              fix=f"Use --to with one of: {', '.join(known)}.")


def check_paths(src: Path, dst: Path, *, overwrite: bool) -> None:
    """Refuse a source that is not a folder and any destination whose replacement could lose data.

    ``--overwrite`` replaces the destination folder as a whole, so a destination that *contains* the
    source (its parent, ``.``) or is the source would delete the source: both are refused, as is a
    destination inside the source. A destination under a file, or in a folder that cannot be written, is
    refused here rather than after the model was loaded.
    """
    if not src.is_dir():
        what = "is a file, not a folder" if src.exists() else "does not exist"
        raise CheckpointError(f"Source checkpoint folder {src} {what}.",
                              fix="Point at the checkpoint folder, or fetch it with `vlarl download REPO --local-dir "
                              "DIR`.")
    s, d = src.resolve(), dst.resolve()
    if d == s or d.is_relative_to(s):
        raise CheckpointError(f"Destination {dst} is (inside) the source folder {src}.",
                              fix="Write the converted checkpoint to a separate folder.")
    if s.is_relative_to(d):
        raise CheckpointError(f"Destination {dst} contains the source folder {src}; replacing it would delete the "
                              "source.", fix="Write the converted checkpoint to a new folder next to the source.")
    if dst.exists() and not overwrite:
        raise CheckpointError(f"Destination {dst} already exists.", fix="Choose a new folder or pass --overwrite.")
    if dst.exists() and not dst.is_dir():
        raise CheckpointError(f"Destination {dst} is a file, not a folder; --overwrite replaces folders only.",
                              fix="Choose a folder name, or move the file away yourself.")
    parent = d.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise CheckpointError(f"Cannot create {dst}: {parent} is a file, not a folder.", fix="Choose another path.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CheckpointError(f"Cannot create {dst}: the folder {parent} is not writable.",
                              fix="Choose a destination you can write to.")


def _readable_source(src: Path, allow_pickle: bool, scratch: Path) -> tuple[Path, Any]:
    """(folder to load from, its detection): ``src`` itself, or for pickle-only weights (RLinf publishes
    ``.pt`` checkpoints) a staged safetensors copy, detected again so its tensor names identify the family."""
    from vlarl_cli.checkpoints.orbax import is_orbax_checkpoint

    if is_orbax_checkpoint(src):
        return _stage_orbax(src, scratch)
    info = detect_checkpoint(src, refine=True)
    if info.unreadable:
        raise CheckpointError(f"Damaged weights in the source, not a readable safetensors file: "
                              f"{info.unreadable[0][1]}.",
                              fix="Download or copy the checkpoint again (`vlarl download` resumes and verifies "
                              "every file's hash).")
    if info.weights or not info.pickle_files:
        return src, info
    if not allow_pickle:
        raise CheckpointError(
            f"{src} holds only pickle-based weights ({', '.join(info.pickle_files[:3])}); "
            "loading pickles can execute arbitrary code.",
            fix="Pass --allow-pickle if you trust the files (they are then read with "
            "torch.load(weights_only=True)), or provide .safetensors weights.")
    staged = scratch / "staged"
    _stage_pickles(src, staged, info.pickle_files)
    return staged, detect_checkpoint(staged, refine=True)


def _stage_orbax(src: Path, scratch: Path) -> tuple[Path, Any]:
    """An openpi JAX (orbax) checkpoint, staged in the openpi PyTorch layout by the family that reads it
    (``stage_orbax`` in its checkpoint module: pi0 / pi0.5), then detected like any folder; the stage's
    findings (variant, stored dtypes, LoRA merged, asset ids) go into the report's notes."""
    for family in FAMILY_MODEL_TYPES:
        module = family_checkpoint_module(family)
        stage = getattr(module, "stage_orbax", None) if module is not None else None
        if stage is not None:
            staged = scratch / "staged-orbax"
            found = stage(src, staged)
            info = detect_checkpoint(staged, refine=True)
            info.notes = [*info.notes, *_orbax_notes(found)]
            return staged, info
    raise CheckpointError(f"{src} is an orbax (JAX) checkpoint, which no installed family reads.",
                          fix="openpi's pi0 / pi0.5 JAX checkpoints are read by the pi0 family.")


def _orbax_notes(found: dict[str, Any]) -> list[str]:
    return [f"openpi JAX checkpoint ({found['variant']}), stored dtypes {', '.join(found['dtypes'])}, kept",
            f"LoRA factors merged: {found['lora_merged']}" if found["lora_merged"] else "no LoRA factors",
            f"norm stats from assets/{', assets/'.join(found['asset_ids'])}",
            f"action_horizon {found['action_horizon']} (the variant's default: a JAX checkpoint does not store it;"
            " set actor.model.action_horizon to change it)"]


def _plan(src: Path, read_from: Path, info: Any, to_format: str) -> tuple[Any, str]:
    """(family checkpoint module, source layout), refusing what cannot be converted before loading a model."""
    if info.family is None:
        raise CheckpointError(
            f"Cannot tell which model family {src} holds ({'; '.join(info.notes) or 'unknown layout'}).",
            fix=f"Point at a checkpoint folder of a supported family ({_supported_text()}).")
    module = family_checkpoint_module(info.family)
    if module is None:
        raise CheckpointError(
            f"Converting {info.family} checkpoints ({info.format or 'unknown format'}) is not supported yet.",
            fix=f"Supported now: {_supported_text()}.")
    formats = tuple(module.FORMATS)
    if to_format not in formats:
        raise CheckpointError(
            f'"{to_format}" is not a {info.family} checkpoint format.{did_you_mean(to_format, formats)}',
            fix=f"Use --to with one of: {', '.join(formats)}.")
    impossible = _IMPOSSIBLE.get((info.variant or "", to_format))
    if impossible is not None:
        raise CheckpointError(f"{src} holds a {info.variant} model, which cannot be written as {to_format}: "
                              f"{impossible[0]}.", fix=impossible[1])
    src_format = info.format or module.detect_format(read_from)
    if src_format is None:
        raise CheckpointError(f"{src} looks like {info.family} but its layout is not recognised.",
                              fix=f"Known {info.family} layouts: {', '.join(formats)}.")
    return module, src_format


def _self_check(module: Any, folder: Path, reference: Any, family: str, to_format: str, dst: Path, *,
                exact: bool, merged: bool) -> tuple[float, float]:
    """Load the written ``folder`` again and compare its probe batch with the source's ``reference``;
    without a dtype cast a difference beyond the tolerance is a key-mapping bug and refused."""
    import torch

    converted = module.load_policy(folder, format=to_format, device="cpu", dtype=torch.float32, strict=True)
    diff, diff_v = _compare(reference, _run_probe(module, converted), family, to_format)
    del converted
    tol = _TOL_MERGE if merged else _TOL_EXACT
    scale = max(1.0, float(reference[0].abs().max()))
    if exact and max(diff, diff_v) > tol * scale:
        raise CheckpointError(
            f"Conversion check failed: the {to_format} checkpoint written for {dst} gives "
            f"actions differing from the source by up to {diff:.3g} (values {diff_v:.3g}) on "
            "the probe batch; nothing was written.",
            fix=f"This is a bug in the {family} key mapping; please report it with the "
            "source layout.")
    return diff, diff_v


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str], to_format: str,
            dtype: str | None = None, merge_lora: bool = True, allow_pickle: bool = False, *,
            overwrite: bool = False, check: bool = True, verbose: bool = False) -> ConvertReport:
    """Convert checkpoint folder ``src`` into ``dst`` in layout ``to_format``.

    Args:
        src: checkpoint folder in any layout its family reads.
        dst: destination folder; must not exist unless ``overwrite``.
        to_format: a layout of the family (``vlarl``, ``openpi``, ``lerobot``, ``hf_pi0``, ``gr00t_n15``...).
        dtype: cast floating weights on save (``fp32``/``bf16``/``fp16``); None keeps them.
        merge_lora: fold LoRA adapters into the base weights before saving.
        allow_pickle: accept sources whose weights are pickle files (read with ``weights_only=True``).
        overwrite: replace an existing ``dst`` (atomically: the old folder stays until the new is complete).
        check: load the result again and compare a deterministic probe batch with the source.
        verbose: print the report.

    Raises CheckpointError: unknown family or format, pickle without ``allow_pickle``, existing ``dst``, a bad
    openpi JAX checkpoint (another model, half-written, no assets), or a failed self-check.
    """
    src_path, dst_path = Path(src).expanduser(), Path(dst).expanduser()
    # every argument is checked before torch and the model code are imported (seconds) or a model is loaded
    check_paths(src_path, dst_path, overwrite=overwrite)
    cast_name = dtype_name(dtype)
    _check_format_name(to_format)

    with tempfile.TemporaryDirectory(prefix=TMP_PREFIX + "convert-") as scratch:
        read_from, info = _readable_source(src_path, allow_pickle, Path(scratch))
        module, src_format = _plan(src_path, read_from, info, to_format)

        import torch

        cast = getattr(torch, cast_name) if cast_name else None
        policy = module.load_policy(read_from, format=src_format, device="cpu", dtype=torch.float32,
                                    strict=True)
        reference = _run_probe(module, policy) if check else None
        merged = module.merge_lora_for_export(policy) if merge_lora else 0

        diff = diff_v = None
        # The check runs on the temporary folder, before it is renamed to dst: a failed conversion
        # never leaves a wrong checkpoint under the requested name.
        with atomic_directory(dst_path, overwrite=overwrite) as tmp:
            module.save_policy(policy, tmp, format=to_format, dtype=cast)
            del policy
            if check and reference is not None:
                diff, diff_v = _self_check(module, tmp, reference, info.family, to_format, dst_path,
                                           exact=cast is None, merged=bool(merged))

    from vlarl_cli.checkpoints.detect import count_parameters

    jax = read_from.name == "staged-orbax"  # an openpi JAX checkpoint, staged in the openpi layout
    report = ConvertReport(src=src_path, dst=dst_path, family=info.family, src_format="openpi_jax" if jax else src_format,
                           dst_format=to_format, dtype=str(cast).removeprefix("torch.") if cast else None,
                           lora_merged=merged, num_parameters=count_parameters(dst_path),
                           max_abs_diff=diff, max_abs_diff_values=diff_v, notes=info.notes if jax else [],
                           probe="2 observations, 224 px, seed 0, deterministic sampling")
    if verbose:
        from rich.console import Console

        Console(highlight=False, soft_wrap=True).print(report.summary(), markup=False)
    return report
