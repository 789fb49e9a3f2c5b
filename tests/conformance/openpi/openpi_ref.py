"""Running openpi's side of a conformance test: its interpreter, one subprocess per run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
REFERENCE_PYTHON = ROOT / ".reference" / "openpi" / "bin" / "python"
STAMP = ROOT / ".reference" / "openpi" / ".vlarl-reference-stamp"
BUILD = "bash scripts/reference/openpi.sh"


def run_reference(python: Path, script: str, spec: dict[str, Any], folder: Path, timeout: float = 300,
                  argv: list[str] | None = None) -> None:
    """Run ``tests/conformance/openpi/<script>`` under openpi's interpreter with ``spec`` (written to a file)
    as its argument, or with ``argv`` when given."""
    spec_file = folder / f"{Path(script).stem}-spec.json"
    spec_file.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(OMP_NUM_THREADS="1", JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    args = argv if argv is not None else [str(spec_file)]
    res = subprocess.run([str(python), str(Path(__file__).parent / script), *args], capture_output=True,
                         text=True, timeout=timeout, env=env, cwd=folder)
    if res.returncode != 0:
        raise AssertionError(f"openpi side failed ({res.returncode}):\n{res.stderr[-4000:]}")
