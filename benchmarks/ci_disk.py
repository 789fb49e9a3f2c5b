"""Disk use of a command over time, as CI meets it: the peak above the start, per step, then one JSON line.

    python benchmarks/ci_disk.py                       # runs `bash .ci/run` from the repository root
    python benchmarks/ci_disk.py -- bash scripts/reference/openpi.sh
    python benchmarks/ci_disk.py --smoke               # a one-step python command: the sampler only (CI)

Samples the used bytes of the filesystem holding the repository (and of the temporary folder's, when it is
another) every --every seconds while the command runs; the command's output goes through unchanged. A
`[ci] disk after <step>` line printed by .ci/run closes a step: the JSON gives each step's peak. The figure
is the whole filesystem's use minus its use at the start, so run it on a machine where nothing else writes.
Stdlib only.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _bench import add_smoke, emit

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^\[ci\] disk after (.+?):")
MIB = 1 << 20


def used(folders: list[Path]) -> int:
    """Bytes used on the filesystems of `folders`, each filesystem counted once."""
    seen: dict[int, int] = {}
    for folder in folders:
        seen[os.stat(folder).st_dev] = shutil.disk_usage(folder).used
    return sum(seen.values())


class Sampler(threading.Thread):
    """Keeps the peak of `used(folders) - start` since the last `close_step`."""

    def __init__(self, folders: list[Path], every: float) -> None:
        super().__init__(daemon=True)
        self.folders, self.every = folders, every
        self.start_bytes = used(folders)
        self.step_peak = self.peak = 0
        self.done = threading.Event()

    def sample(self) -> int:
        now = used(self.folders) - self.start_bytes
        self.step_peak, self.peak = max(self.step_peak, now), max(self.peak, now)
        return now

    def run(self) -> None:
        while not self.done.wait(self.every):
            self.sample()

    def close_step(self) -> tuple[int, int]:
        """(the step's peak, its end), both above the start; the next step starts here."""
        end = self.sample()
        peak, self.step_peak = self.step_peak, end
        return peak, end


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("command", nargs="*", default=["bash", ".ci/run"], help="default: bash .ci/run")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.every = 0.05
        args.command = [sys.executable, "-c", "import time; print('[ci] disk after smoke: 0'); time.sleep(0.2)"]
    sampler = Sampler([ROOT, Path(tempfile.gettempdir())], args.every)
    sampler.start()
    began = time.monotonic()
    steps = []
    with subprocess.Popen(args.command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            if match := STEP.match(line):
                peak, end = sampler.close_step()
                steps.append({"step": match.group(1), "peak_mib": peak // MIB, "end_mib": end // MIB,
                              "at_s": round(time.monotonic() - began)})
    sampler.done.set()
    peak, end = sampler.close_step()
    steps.append({"step": "(to the end)", "peak_mib": peak // MIB, "end_mib": end // MIB,
                  "at_s": round(time.monotonic() - began)})
    emit({"benchmark": "ci_disk", "command": " ".join(args.command), "rc": proc.returncode,
          "wall_s": round(time.monotonic() - began), "peak_mib": sampler.peak // MIB,
          "end_mib": end // MIB, "steps": steps}, smoke=args.smoke)
    return proc.returncode


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("ci_disk: interrupted; the command was stopped with it, nothing of it was removed", file=sys.stderr)
        sys.exit(130)
