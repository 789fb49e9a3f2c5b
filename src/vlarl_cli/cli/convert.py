"""Convert a checkpoint between vlarl's layout and the upstream layouts of its family.

The family and source format are detected from the files.

The result is checked: both models run the same deterministic probe batch; the maximum absolute difference of their actions is printed.

Formats: pi0/pi0.5: vlarl, openpi (openpi PyTorch / RLinf), lerobot, hf_pi0 (transformers-native); GR00T: vlarl, gr00t_n15, gr00t_n16. Others report "not supported yet". openpi's JAX checkpoints (an orbax step folder with params/ and assets/) are read as a source (needs tensorstore: pip install "vlarl[openpi-jax]").

Examples:
  vlarl convert models/pi05-libero runs/pi05-vlarl --to vlarl
  vlarl convert runs/x/checkpoints/global_step_100 exported/ --to openpi --dtype bf16
"""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    src: Path = typer.Argument(..., help="Source checkpoint folder."),
    dst: Path = typer.Argument(..., help="Destination folder (created; must not exist unless --overwrite)."),
    to: str = typer.Option(..., "--to", "-t", help="Target format, e.g. vlarl, openpi, lerobot, hf_pi0, "
                           "gr00t_n15, gr00t_n16."),
    dtype: str | None = typer.Option(None, "--dtype", help="Cast weights: fp32/float32, bf16/bfloat16, "
                                     "fp16/float16 (default: keep)."),
    merge_lora: bool = typer.Option(True, "--merge-lora/--keep-lora", help="Merge LoRA adapters into the "
                                    "base weights (default) or keep them separate."),
    allow_pickle: bool = typer.Option(False, "--allow-pickle", help="Allow reading pickle-based weight "
                                      "files (loaded with weights_only=True)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace DST if it exists."),
    skip_check: bool = typer.Option(False, "--skip-check", help="Do not run the probe-batch comparison "
                                    "(useful for full-size models on a small machine)."),
) -> None:
    """Convert a checkpoint between vlarl's layout and the upstream layouts of its family."""
    from vlarl_cli.checkpoints.convert import check_paths, convert
    from vlarl_cli.checkpoints.integrity import verify_checksums

    check_paths(src.expanduser(), dst.expanduser(), overwrite=overwrite)  # (a destination holding the source first)
    if overwrite and dst.is_dir():
        _refuse_replacing_a_record(dst)
    verify_checksums(src)  # a vlarl checkpoint's files against its checksums.json (other folders have none)
    convert(src, dst, to, dtype=dtype, merge_lora=merge_lora, allow_pickle=allow_pickle,
            overwrite=overwrite, check=not skip_check, verbose=True)


def _refuse_replacing_a_record(dst: Path) -> None:
    """--overwrite replaces DST as a whole: never when it holds a training run, a training checkpoint, eval
    results or demonstrations (one mistyped path would delete weeks of training or recording)."""
    from vlarl_cli.errors import CheckpointError
    from vlarl_cli.training.run_folder import records_inside

    found = records_inside(dst)
    if found:
        raise CheckpointError(f"Destination {dst} holds the record of a run ({', '.join(str(p) for p in found)}); "
                              "--overwrite would delete it.",
                              "Write the converted checkpoint to a new folder; vlarl never deletes a run.")
