"""Line counts of the family checkpoint modules, split by what each function does (docs/adding_a_family.md).

Run from the repository root:  python benchmarks/family_line_counts.py [REV]   (--smoke: REV = HEAD)
REV (default f015285~1, the last commit before checkpoints/pipeline.py) gives the "before" columns; "now"
is the working tree. A function is counted from its first decorator to its last line; everything outside
functions (docstring, imports, constants, blank lines between functions) is the "module" row. A function
name missing from BUCKETS is an error, so a new function must be classified before the table prints.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from pathlib import Path

from _bench import add_smoke, emit

FILES = {"pi0": "src/vlarl_cli/policies/pi0/checkpoint.py",
         "openvla_oft": "src/vlarl_cli/policies/openvla_oft/checkpoint.py",
         "gr00t": "src/vlarl_cli/policies/gr00t/checkpoint.py",
         "fakefam": "tests/checkpoints/fake_family.py"}
OWN = ("keys", "detect", "config", "fresh", "side")
BUCKETS = {  # what each top-level function of the four modules, then and now, is
    "keys": {"_rules", "from_external", "to_external", "_is_known_unused", "_legacy_value_key", "_is_tied",
             "export_state_dict", "Rule", "import_rules", "_rule_for", "_build", "_expected_shape", "_ignorable",
             "_vision_prefix", "to_upstream_key", "from_upstream_key",
             "stage_orbax"},  # openpi JAX checkpoints restaged into the PyTorch layout (a key map)
    "detect": {"detect_format", "_detect_external"},
    "config": {"_variant_from_keys", "_value_head_arch", "_layer_count", "_arch_from_shapes", "_config_from_checkpoint",
               "_count_blocks", "_resolve_config", "_check_route", "infer_backbone_fields", "processor_image_fields",
               "_config_from_upstream", "read_config", "_settings", "read_settings"},
    "fresh": {"_fresh_init", "_reinit_head"},
    "side": {"_arch_dict", "_external_config", "_copy_tokenizer", "_find_statistics", "_statistics",
             "_fill_side_files", "_read_adapter", "_check_adapter", "_openvla_config", "_upstream_config", "_read_modality",
             "_norm_stats_from_lerobot_buffers", "_norm_stats_from_lerobot_processors", "lerobot_norm_stats"},
    "steps": {"load_policy", "save_policy", "describe", "_fill", "_plan", "_stream_rules",
              # before the pipeline: the shared shape each family wrote for itself
              "_weight_files", "_reset_buffers", "_format_keys", "_merged_state_dict", "_shards", "_header",
              "_read_json", "_shard", "_write_weights", "LoadReport", "_fix_nonpersistent_buffers",
              "_refuse_old_critic"},  # a load step of OpenVLA-OFT, split out of load_policy
    "model": {"FakeSettings", "FakePolicy"},  # the stand-in family's model (a real one has it in modeling.py)
}


def split(text: str) -> dict[str, int]:
    lines = {name: 0 for name in (*BUCKETS, "module")}
    inside = 0
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            bucket = next((b for b, names in BUCKETS.items() if node.name in names), None)
            if bucket is None:
                raise SystemExit(f"classify {node.name} in BUCKETS first")
            lines[bucket] += node.end_lineno - start + 1
            inside += node.end_lineno - start + 1
    lines["module"] = len(text.splitlines()) - inside
    return lines


def main(rev: str, smoke: bool = False) -> None:
    rows = [*BUCKETS, "module", "own", "total"]
    cols = {}
    for fam, path in FILES.items():
        old = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True).stdout
        for when, text in (("before", old), ("now", Path(path).read_text())):
            c = split(text)
            c["own"] = sum(c[b] for b in OWN)
            c["total"] = len(text.splitlines())
            cols[f"{fam} {when}"] = c
    print(f"{'':8}" + "".join(f"{name:>20}" for name in cols))
    for row in rows:
        print(f"{row:8}" + "".join(f"{c[row]:>20}" for c in cols.values()))
    families = [fam for fam in FILES if fam != "fakefam"]
    ratio = {row: round(sum(cols[f"{f} now"][row] for f in families) / sum(cols[f"{f} before"][row] for f in families), 3)
             for row in ("steps", "own", "total")}
    emit({"benchmark": "family_line_counts", "before_rev": rev, "columns": cols,
          "three_families_now_over_before": ratio}, smoke=smoke)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", nargs="?", default="f015285~1", help="the revision of the 'before' columns")
    add_smoke(parser)
    args = parser.parse_args()
    main("HEAD" if args.smoke else args.rev, smoke=args.smoke)
