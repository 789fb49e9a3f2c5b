"""Install-time step for LIBERO: link the asset tree into place and verify it.

Run after ``pip install`` (the project's install script does)::

    python -m vlarl_cli.envs.libero.install            # link + verify sizes and sha256 of all files
    python -m vlarl_cli.envs.libero.install --copy     # copy instead of symlink
    python -m vlarl_cli.envs.libero.install --write-manifest   # maintainers: regenerate the manifest

Exit code 0 on success, 2 with one clear message on failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from vlarl_cli.envs.libero import setup
from vlarl_cli.errors import VlarlError


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
        start = time.perf_counter()
        target = setup.link_assets(copy=args.copy)
        count = setup.verify_assets(target, hashes=not args.no_hash)
        print(
            f"LIBERO assets OK: {count} files at {target} -> {target.resolve()} "
            f"({'sizes' if args.no_hash else 'sizes and sha256'} checked in {time.perf_counter() - start:.1f} s)"
        )
        return 0
    except VlarlError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
