"""Print what a bug report needs: versions, torch build and GPUs, headless GL backends, LIBERO assets.

Paste the output into the issue. Exit code 1 when a check failed (the "Problems" section says which).

Examples:
  vlarl doctor
  vlarl doctor --hashes        # also sha256 every LIBERO asset file (reads ~620 MB)
"""

from __future__ import annotations

import typer


def command(
    hashes: bool = typer.Option(False, "--hashes", help="Check LIBERO asset sha256 too, not only sizes."),
    no_gl: bool = typer.Option(False, "--no-gl", help="Skip the EGL / OSMesa render probes."),
) -> None:
    """Print versions, GPUs, GL backends and the LIBERO asset check for a bug report."""
    from vlarl_cli.doctor import collect

    report = collect(gl=not no_gl, hashes=hashes)
    typer.echo(report.text())
    if report.problems:
        raise typer.Exit(1)
