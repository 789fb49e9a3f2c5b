#!/usr/bin/env bash
# Build .kit/ (gitignored): what the GPU machine's image lacks to run benchmarks/gpu_truth.py there, sized to
# travel with the working tree in one device call (64 MiB in all; the kit is kept under 58 MiB), and print the
# exact device call.
#   bash scripts/device_kit.sh                 # ~5 min here (collects the LIBERO files 10 envs read)
#   MUJOCO_VERSION=3.2.7 bash scripts/device_kit.sh
# The image (docs/gpu/README.md) has Python 3.12, torch, transformers, numpy, scipy, numba, opencv, typer, rich,
# pyyaml ...; it lacks pydantic, hydra/omegaconf, mujoco, robosuite, bddl, LIBERO and its assets. So:
#   .kit/wheels/   cp312 manylinux x86-64 wheels from the local registries (--no-deps, versions pinned to what
#                  this checkout's .venv runs) + the project wheel;
#   .kit/tree.tgz  pure-Python packages with no usable wheel, copied from .venv: antlr4 4.9.3 (omegaconf's;
#                  sdist only), bddl 1.0.1 (sdist only), LIBERO 0.1.1 with the libero_spatial files, robosuite
#                  1.4.0 code with only the asset files those envs read (its wheel is 193 MB), LIBERO's asset
#                  subset (of 620 MB) at libero/libero/assets;
#   .kit/assets_manifest.json  the subset's manifest, installed over vlarl's so its asset check checks it;
#   .kit/gl/       the EGL / GL loader debs (device notes' recipe), unpacked on the GPU machine only;
#   .kit/run.sh    installs it all (pip --no-deps --target .kit/site) and runs the benchmark.
# Deviation, said here and in the JSON's versions: mujoco 2.3.7 (the pin) has no cp312 wheel; the kit carries
# mujoco $MUJOCO_VERSION (3.x up to 3.9 runs LIBERO with robosuite 1.4.0; physics differs slightly, speed is
# what is measured).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
KIT=.kit
MUJOCO_VERSION=${MUJOCO_VERSION:-3.3.7}
LIMIT_MIB=58
SUITE=libero_spatial
say() { echo "[device_kit] $*" >&2; }
fail() { echo "[device_kit] FAILED: $*" >&2; exit 1; }
ver() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
site() { "$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }

grep -qx '/.kit/' .gitignore || fail "add /.kit/ to .gitignore first (the kit must not be committed)"
rm -rf "$KIT" && mkdir -p "$KIT/wheels" "$KIT/tree" "$KIT/gl"

say "wheels for cp312 manylinux x86-64 (pinned to .venv's versions)"
pins=()
for p in pydantic pydantic-core annotated-types typing-inspection hydra-core omegaconf PyOpenGL gymnasium \
         farama-notifications future easydict termcolor glfw httpx2; do
  pins+=("$p==$(ver "$p")")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$KIT/wheels" "${pins[@]}" "mujoco==$MUJOCO_VERSION" || fail "pip download"

say "the project wheel"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$KIT/wheels" . >/dev/null || fail "pip wheel ."
rm -rf build

say "LIBERO files the $SUITE envs read (10 tasks, both cameras; a few minutes)"
"$PY" - "$SUITE" "$KIT" <<'EOF'
import json, os, re, sys
from pathlib import Path
suite_name, kit = sys.argv[1], Path(sys.argv[2])
opened: set[str] = set()
def hook(event, args):
    if event == "open" and isinstance(args[0], str):
        opened.add(os.path.abspath(args[0]))
sys.addaudithook(hook)
from vlarl_cli.envs.libero.setup import prepare_libero
paths = prepare_libero()
from libero.libero import benchmark
from libero.libero.envs.env_wrapper import ControlEnv
suite = benchmark.get_benchmark_dict()[suite_name]()
for i in range(suite.n_tasks):
    task = suite.get_task(i)
    env = ControlEnv(bddl_file_name=str(paths.bddl_dir / task.problem_folder / task.bddl_file), use_camera_obs=True,
                     has_renderer=False, has_offscreen_renderer=True,
                     camera_names=["agentview", "robot0_eye_in_hand"], camera_heights=224, camera_widths=224)
    env.reset()
    opened.update(os.path.abspath(f) for f in re.findall(r'file="([^"]+)"', env.env.sim.model.get_xml()))
    env.close()
(kit / "opened.txt").write_text("\n".join(sorted(opened)))
EOF

say "pure-Python trees: antlr4, bddl, LIBERO ($SUITE), robosuite code + the asset files read"
SITE=$(site) KIT=$KIT SUITE=$SUITE "$PY" - <<'EOF'
import hashlib, json, os, shutil
from pathlib import Path
site, kit, suite = Path(os.environ["SITE"]), Path(os.environ["KIT"]), os.environ["SUITE"]
tree = kit / "tree"
opened = {Path(os.path.realpath(p)) for p in (kit / "opened.txt").read_text().split()}  # assets: a link
def copy(src: Path, rel: Path) -> None:
    (tree / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, tree / rel)
def package(name: str, keep) -> None:
    for src in (site / name).rglob("*"):
        rel = src.relative_to(site)
        if src.is_file() and "__pycache__" not in rel.parts and keep(src, rel):
            copy(src, rel)
for dist in ("antlr4_python3_runtime-4.9.3.dist-info", "bddl-1.0.1.dist-info", "robosuite-1.4.0.dist-info",
             "libero-0.1.1.dist-info"):
    package(dist, lambda s, r: True)
package("antlr4", lambda s, r: True)
package("bddl", lambda s, r: True)
package("robosuite", lambda s, r: s.suffix == ".py" or s.resolve() in opened)
lib = Path("libero", "libero")
assets = (site / lib / "assets").resolve()
def keep_libero(src: Path, rel: Path) -> bool:
    parts = rel.parts
    if len(parts) > 2 and parts[2] == "assets":
        return False  # the subset below
    if len(parts) > 3 and parts[2] in ("bddl_files", "init_files"):
        return parts[3] == suite
    return True
package("libero", keep_libero)
manifest = {}
for path in sorted(p for p in opened if str(p).startswith(str(assets) + os.sep) and p.is_file()):
    rel = path.relative_to(assets)
    copy(path, lib / "assets" / rel)
    manifest[rel.as_posix()] = {"size": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
(kit / "assets_manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
print(f"[device_kit] {len(manifest)} LIBERO asset files", flush=True)
EOF
tar -czf "$KIT/tree.tgz" -C "$KIT/tree" . && rm -rf "$KIT/tree" "$KIT/opened.txt"

say "GR00T prompt tokenizers (Isaac-GR00T's Eagle folders: a full-size GR00T tokenizes with them)"
# ISAAC_GR00T: a checkout of Isaac-GR00T, or its git dir (then the release branches are read); the files are
# Isaac-GR00T's data, carried in the kit only, never committed
GR00T_SRC=${ISAAC_GR00T:-/work/.mirror/RLinf+Isaac-GR00T/repo}
mkdir -p "$KIT/tokenizers"
for spec in n15:n1.5-release:gr00t/model/backbone/eagle2_hg_model \
            n16:n1.6.1-release:gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2; do
  IFS=: read -r name ref folder <<<"$spec"
  mkdir -p "$KIT/tokenizers/$name"
  for f in vocab.json merges.txt added_tokens.json tokenizer_config.json; do
    if [ -f "$GR00T_SRC/$folder/$f" ]; then cp "$GR00T_SRC/$folder/$f" "$KIT/tokenizers/$name/"
    elif ! git --git-dir="$GR00T_SRC" show "$ref:$folder/$f" >"$KIT/tokenizers/$name/$f" 2>/dev/null; then
      say "warning: no $folder/$f in $GR00T_SRC ($ref); the GR00T parts will record that their tokenizer is missing"
      rm -rf "$KIT/tokenizers/$name"; break
    fi
  done
done
tar -cJf "$KIT/tokenizers.tar.xz" -C "$KIT" tokenizers && rm -rf "$KIT/tokenizers"

say "EGL / GL loaders (device notes' recipe, amd64 debs)"
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
mkdir -p /tmp/amd64/partial
if apt-get "${o[@]}" update >/dev/null 2>&1 && \
   (cd "$KIT/gl" && apt-get "${o[@]}" download libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null 2>&1); then
  :
else
  say "warning: the GL loader debs could not be downloaded; EGL on the GPU machine relies on its own loaders"
fi

cat >"$KIT/run.sh" <<'EOF'
#!/usr/bin/env bash
# Written by scripts/device_kit.sh. On the GPU machine, from the repository root: bash .kit/run.sh [gpu_truth args]
set -uo pipefail
cd "$(dirname "$0")/.."
KIT=$PWD/.kit
SITE=$KIT/site
if [ -d /usr/local/nvidia ]; then  # the GPU machine only: the GL loaders, as its notes say
  for f in "$KIT"/gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done
  ldconfig
  egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  [ -f "$egl" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$egl
fi
PYTHON=${PYTHON:-python3}
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  "$KIT"/wheels/*.whl || { echo "kit: pip install failed" >&2; exit 3; }
tar -xzf "$KIT/tree.tgz" -C "$SITE"
# the checkout's own code over the wheel's: a fix made after the kit was built travels with the tree
[ "${KIT_INSTALL_ONLY:-0}" = 1 ] || cp -r src/vlarl_cli/. "$SITE/vlarl_cli/"
# the kit carries a subset of LIBERO's assets: vlarl's asset check checks that subset
cp "$KIT/assets_manifest.json" "$SITE/vlarl_cli/envs/libero/assets_manifest.json"
echo "kit: installed into $SITE (LIBERO asset subset: libero_spatial)" >&2
[ "${KIT_INSTALL_ONLY:-0}" = 1 ] && exit 0  # scripts/check_device_kit.sh: install, then its own checks
"$PYTHON" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
  "$KIT/tokenizers.tar.xz" "$KIT"  # GR00T's prompt tokenizers: $KIT/tokenizers/{n15,n16}
export GPU_TRUTH_TOKENIZERS=$KIT/tokenizers
export PYTHONPATH=$SITE MUJOCO_GL=${MUJOCO_GL:-egl} PYOPENGL_PLATFORM=${PYOPENGL_PLATFORM:-egl} PYTHONUNBUFFERED=1
exec "$PYTHON" benchmarks/gpu_truth.py --out-dir "${OUT:-benchmarks/out}" "$@"
EOF
chmod +x "$KIT/run.sh"

kit_mib=$(du -sm "$KIT" | cut -f1)
tree_mib=$(git ls-files -z | xargs -0 du -cm 2>/dev/null | tail -1 | cut -f1)
say "kit ${kit_mib} MiB, tracked tree ~${tree_mib} MiB (the call's limit: 64 MiB in all)"
[ "$kit_mib" -le "$LIMIT_MIB" ] || fail "the kit is ${kit_mib} MiB, over ${LIMIT_MIB} MiB"
cat <<EOF
The device call (one run, then give_back; see docs/gpu/README.md):
  run(command="set -o pipefail; bash .kit/run.sh 2>&1 | tee \$OUT/gpu_truth.log", carry=[".kit"], timeout_s=570)
A rerun of the parts that failed, at once (the machine stays warm 30 s; its .kit/site is kept):
  run(command="set -o pipefail; bash .kit/run.sh --parts PART,PART 2>&1 | tee \$OUT/gpu_truth_rerun.log", carry=[".kit"], timeout_s=240)
EOF
