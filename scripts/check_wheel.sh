#!/usr/bin/env bash
# Check that the built wheel works away from the repository, as a user's `pip install vlarl` would:
#   bash scripts/check_wheel.sh                 # after scripts/install.sh (uses .venv's `build`)
#   QUICKSTART=0 bash scripts/check_wheel.sh    # skip the LIBERO quickstart (QUICKSTART=short: 1 iteration)
# 1. `python -m build` from this checkout (sdist, then the wheel built from it).
# 2. A clean venv in an empty temp folder, torch==2.13.0 (the CPU wheel) installed FIRST, then the wheel:
#    pip's install report must not list torch (the package asks torch>=2.6, so an existing torch stays).
# 3. From that empty folder: `vlarl --version` equals the wheel's version, the presets ship inside the
#    wheel, `vlarl rl-train --config libero_spatial_ppo_gr00t --dry-run`, `vlarl setup-libero` (the
#    LIBERO step the README documents), `vlarl doctor`, and the quickstart.
# Exits non-zero on the first failure. Measured: 26 min wall (3m50 CPU) on a 2-core machine shared by 8
# busy sessions, warm pip cache, quickstart included.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PYTHON=${PYTHON:-python3}
BUILD_PYTHON=${BUILD_PYTHON:-$REPO/.venv/bin/python}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vlarl-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say() { echo "[check_wheel] $*"; }
fail() { echo "[check_wheel] FAILED: $*" >&2; exit 1; }
# hard-link files identical to .venv's after each install, so that the disk peak is .venv plus what differs
share() { python3 "$REPO/scripts/link_identical.py" "$REPO/.venv" "$WORK/venv" >/dev/null; }

say "building the wheel"
# one build of this checkout at a time (CI runs check_torch_floor.sh beside this script): setuptools writes
# build/ and src/*.egg-info in the checkout
exec 8>"${TMPDIR:-/tmp}/vlarl-build-$(pwd | sha256sum | cut -c1-16).lock"; flock 8
had_build_dir=0; [ -e build ] && had_build_dir=1
# sdist, then the wheel from the sdist (as PyPI users get it): a file the sdist forgets is missing here too
"$BUILD_PYTHON" -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; fail "build"; }
[ "$had_build_dir" = 1 ] || rm -rf build  # setuptools' scratch folder, made by this build
flock -u 8
wheel=$(ls "$WORK"/dist/vlarl-*.whl)
wheel_version=$(basename "$wheel" | cut -d- -f2)
say "built $(basename "$wheel")"

say "clean venv with torch==2.13.0 installed first"
"$PYTHON" -m venv "$WORK/venv"
BIN=$WORK/venv/bin
"$BIN/python" -m pip install -q "torch==2.13.0" 2>"$WORK/pip.err" || { cat "$WORK/pip.err"; fail "pip torch"; }
share  # torch
torch_before=$("$BIN/python" -W ignore -c "import torch; print(torch.__version__, torch.__file__)")
"$BIN/python" -m pip install -q --report "$WORK/report.json" "$wheel" 2>"$WORK/pip.err" \
  || { cat "$WORK/pip.err"; fail "pip wheel"; }
"$BIN/python" - "$WORK/report.json" <<'EOF'
import json, sys
installed = {item["metadata"]["name"].lower(): item["metadata"]["version"]
             for item in json.load(open(sys.argv[1]))["install"]}
assert "torch" not in installed, f"pip replaced torch: {installed['torch']}"
print(f"[check_wheel] pip installed {len(installed)} distributions, torch not among them "
      f"(numpy {installed.get('numpy', 'kept')})")
EOF
share  # the wheel's dependencies
torch_after=$("$BIN/python" -W ignore -c "import torch; print(torch.__version__, torch.__file__)")
[ "$torch_before" = "$torch_after" ] || fail "torch changed: $torch_before -> $torch_after"
say "torch kept: $torch_after"

mkdir "$WORK/empty"
cd "$WORK/empty"  # nothing of the repository is importable from here
export VLARL_CACHE=$WORK/cache
where=$("$BIN/python" -c "import vlarl_cli; print(vlarl_cli.__file__)")
case "$where" in "$WORK/venv/"*) ;; *) fail "vlarl_cli imported from $where, not the wheel";; esac

version=$("$BIN/vlarl" --version)
[ "$version" = "vlarl $wheel_version" ] || fail "vlarl --version said '$version', the wheel is $wheel_version"
say "$version"

"$BIN/python" - <<'EOF'
from vlarl_cli.config.loading import CONFIG_DIR, list_presets
presets = list_presets()
assert "quickstart" in presets and "libero_spatial_ppo_gr00t" in presets, presets
print(f"[check_wheel] {len(presets)} presets ship in the wheel ({CONFIG_DIR})")
EOF

"$BIN/vlarl" rl-train --config libero_spatial_ppo_gr00t --dry-run >"$WORK/dry_run.log" 2>&1 \
  || { cat "$WORK/dry_run.log"; fail "dry-run"; }
grep -q "Model gr00t" "$WORK/dry_run.log" || { cat "$WORK/dry_run.log"; fail "dry-run printed no model line"; }
say "dry-run: $(grep "Model gr00t" "$WORK/dry_run.log")"

"$BIN/vlarl" setup-libero --no-hash
share  # the LIBERO assets
"$BIN/vlarl" doctor --no-gl >"$WORK/doctor.log" || { cat "$WORK/doctor.log"; fail "vlarl doctor found problems"; }
say "doctor: no problems"

# QUICKSTART=short (CI): the same command, its path whole (built-in checkpoint, LIBERO, evaluation before and
# after, checkpoint), cut to 1 iteration and 2 evaluation trials: about 10 minutes less on 2 cores
case "${QUICKSTART:-1}" in
  1) short=() ;;
  short) short=(runner.max_epochs=1 runner.val_check_interval=1 runner.save_interval=1 env.eval.total_num_envs=2
                env.eval.rollout_epoch=1) ;;
  *) short=(skip) ;;
esac
if [ "${short[*]-}" != "skip" ]; then
  say "quickstart ${short[*]-}"
  "$BIN/vlarl" rl-train --config quickstart "${short[@]}" | tee "$WORK/quickstart.log"
  ls runs/quickstart/metrics.jsonl >/dev/null || fail "the quickstart wrote no runs/quickstart/metrics.jsonl"
  grep -q "eval success before training" "$WORK/quickstart.log" || fail "the quickstart printed no before -> after"
fi
say "OK"
