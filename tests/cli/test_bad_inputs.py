"""Every mistake a user can make ends in one paragraph with the fix, the documented exit code, and nothing lost.

A table of bad inputs (issue 18): each row is a command line, the files it needs, the exit code and the words
the message must contain. Rows run in-process through the real entry point (``vlarl_cli.cli.main.run``, the
same error boundary as the console script), so the table stays fast; ``test_cli.py`` and the fault tests run
real subprocesses. Add a row for every new option or input file.

Placeholders in arguments: ``{tmp}`` is the test's folder (also the working directory).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vlarl_cli.cli.main import run


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    words: tuple[str, ...]  # all must appear in stderr
    code: int = 2
    files: dict[str, bytes | str] = field(default_factory=dict)  # relative to {tmp}
    setup: str | None = None  # a builder below, for files that need code
    absent: tuple[str, ...] = ()  # must NOT appear in stderr (a wrong suggestion)
    kept: tuple[str, ...] = ()  # files (relative to {tmp}) that must still exist afterwards


QUICK = ("rl-train", "-c", "libero_tiny_ppo")
DRY = (*QUICK, "--dry-run")
EP = {"suite": "libero_10", "task": 0, "trial": 0, "episode_id": 0, "task_name": "t", "language": "l",
      "success": True, "steps": 3, "env_seed": 7, "max_steps": 10, "settle_steps": 2}
EP_LINE = json.dumps(EP)
EP_FULL = json.dumps({**EP, "reset_state_id": 0, "seed": 0}) + "\n"  # every field an episode record needs

_VEC = {"dtype": "float32", "shape": [2], "names": None}
_INFO = {"codebase_version": "v2.1", "fps": 10, "chunks_size": 1000, "data_path": "data/episode_{episode_index:06d}.parquet",
         "features": {"observation.state": _VEC, "action": _VEC}}


def _lerobot_meta(info: object = None, episodes: str = '{"episode_index": 0, "tasks": ["t"], "length": 2}\n',
                  tasks: str = '{"task_index": 0, "task": "t"}\n', **extra: str) -> dict[str, bytes | str]:
    """The meta/ files of a LeRobot v2.1 dataset under ds/ (``info``: the info.json object; ``extra``: more files
    of meta/ by name)."""
    files: dict[str, bytes | str] = {"ds/meta/info.json": json.dumps(_INFO if info is None else info),
                                     "ds/meta/episodes.jsonl": episodes, "ds/meta/tasks.jsonl": tasks}
    return files | {f"ds/meta/{name.replace('_', '.')}": body for name, body in extra.items()}


SFT_DS = ("sft", "-c", "sft_toy_reach", "--demos", "{tmp}/ds", "runner.logger.log_path={tmp}/run")
SFT_H5 = ("sft", "-c", "sft_toy_reach", "--demos", "{tmp}/x_demo.hdf5", "runner.logger.log_path={tmp}/run")

CASES: dict[str, Case] = {
    # ---- command-line usage: click's errors, one paragraph, exit 2 -----------------------------------------
    "missing --config": Case(("rl-train",), ("Missing option '--config'", "vlarl rl-train --help")),
    "unknown option": Case(("eval", "--tasksx", "1"), ("No such option: --tasksx", "--tasks")),
    "unknown subcommand": Case(("frobnicate",), ("No such command 'frobnicate'", "vlarl --help")),
    "not an int": Case(("eval", "--trials", "abc"), ("'--trials'", "integer")),
    "trials 0": Case(("eval", "--trials", "0"), ("'--trials'", "greater than or equal to 1")),
    "trials 51": Case(("eval", "--trials", "51"), ("'--trials'", "less than or equal to 50")),
    "eval workers not dividing envs": Case(("eval", "--num-envs", "4", "--num-workers", "3"),
                                           ("--num-workers 3 does not divide --num-envs 4", "one of 1, 2, 4")),
    "fps 0": Case(("video", "x.jsonl", "--fps", "0"), ("'--fps'", "greater than or equal to 1")),
    "retries -1": Case(("download", "a/b", "--retries", "-1"), ("'--retries'", "greater than or equal to 0")),
    "retries 1e6": Case(("download", "a/b", "--retries", "1000000"), ("'--retries'", "less than or equal to 100")),
    "steps 0": Case(("sft", "-c", "libero_tiny_ppo", "--steps", "0"), ("'--steps'",)),
    "nproc 0": Case((*QUICK, "--nproc-per-node", "0"), ("'--nproc-per-node'",)),
    "world size -4": Case((*DRY, "--world-size", "-4"), ("'--world-size'",)),
    "env seed -3": Case((*DRY, "--env-seed", "-3"), ("'--env-seed'",)),
    "eval env seed -1": Case(("eval", "--env-seed", "-1"), ("'--env-seed'",)),
    "master port": Case((*QUICK, "--master-port", "70000"), ("'--master-port'",)),
    "episode -1": Case(("video", "x.jsonl", "--episode", "-1"), ("'--episode'",)),
    "convert without args": Case(("convert",), ("Missing argument",)),
    "download without repo": Case(("download",), ("Missing argument",)),
    "print-config with dry-run": Case((*DRY, "--print-config"), ("exclude each other",)),
    "compare needs two": Case(("eval", "--compare", "a"), ("--compare", "2 arguments")),
    "world size without dry-run": Case((*QUICK, "--world-size", "4"), ("--world-size 4", "--dry-run")),
    "node rank": Case((*QUICK, "--nnodes", "2", "--node-rank", "2"), ("--node-rank 2", "--nnodes 2")),
    "tasks not ints": Case(("eval", "--config", "libero_tiny_ppo", "--tasks", "a,b"), ("comma-separated",)),
    "deterministic and temperature": Case(("eval", "--deterministic", "--temperature", "1"),
                                          ("exclude each other",)),
    "bad repo id": Case(("download", "bad id!!"), ("not a repository id",), absent=("HF_HUB_OFFLINE",)),
    "repo id with ..": Case(("download", "../etc"), ("not a repository id",)),
    "cache dir is a file": Case(("download", "org/name", "--cache-dir", "{tmp}/f"), ("--cache-dir", "is a file"),
                                files={"f": "mine"}, kept=("f",)),
    "cache dir for ManiSkill's assets": Case(("download", "RLinf/maniskill_assets", "--cache-dir", "{tmp}/c"),
                                             ("folder ManiSkill reads", "--cache-dir", "Drop --cache-dir"),
                                             absent=("no effect with --local-dir",)),
    "local dir and cache dir": Case(("download", "org/name", "--local-dir", "{tmp}/a", "--cache-dir", "{tmp}/b"),
                                    ("--cache-dir", "no effect with --local-dir", "Pass one of")),
    "local dir is a file": Case(("download", "org/name", "--local-dir", "{tmp}/f"), ("--local-dir", "is a file"),
                                files={"f": "mine"}, kept=("f",)),
    "eval resolution": Case(("eval", "--config", "libero_tiny_ppo", "--resolution", "300"), ("Resolution 300",)),
    "eval protocol": Case(("eval", "--config", "libero_tiny_ppo", "--protocol", "foo"), ('protocol "foo"',)),
    "eval unknown suite": Case(("eval", "--config", "libero_tiny_ppo", "--suite", "libero_spatail"),
                               ('Did you mean "libero_spatial"',)),
    "video needs a selection": Case(("video",), ("Nothing to render",)),
    "sft missing demos": Case(("sft", "-c", "sft_toy_reach", "--demos", "{tmp}/nope"), ("do not exist", "--demos")),
    "sft empty demos": Case(("sft", "-c", "sft_toy_reach", "--demos", "{tmp}/d"), ("is neither a LeRobot dataset", "episode_*.npz"),
                            files={"d/readme.txt": "x"}),
    "sft corrupt demo": Case(("sft", "-c", "sft_toy_reach", "--demos", "{tmp}/d"), ("episode_0.npz",),
                             files={"d/episode_0.npz": b"junk"}, kept=("d/episode_0.npz",)),
    # ---- config files --------------------------------------------------------------------------------
    "missing config": Case(("rl-train", "-c", "{tmp}/nope.yaml"), ("neither a file nor a preset",)),
    "preset typo": Case(("rl-train", "-c", "quikstart"), ('Did you mean "quickstart"',)),
    "markup in a path": Case(("rl-train", "-c", "{tmp}/runs[v2]/[bold]c.yaml"), ("runs[v2]/[bold]c.yaml",)),
    "closing tag in a path": Case(("rl-train", "-c", "{tmp}/[/x]/c.yaml"), ("[/x]/c.yaml",)),
    "yml file": Case(("rl-train", "-c", "{tmp}/c.yml", "--print-config"), (), code=0,
                     files={"c.yml": "actor:\n  model: {preset: tiny}\n"}),
    "extension-less file": Case(("rl-train", "-c", "{tmp}/myconf", "--print-config"), (), code=0,
                                files={"myconf": "actor:\n  model: {preset: tiny}\n"}),
    "yaml syntax": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("YAML syntax error at line 2",),
                        files={"c.yaml": "actor: {model: [\n"}, absent=("defaults",)),
    "binary config": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("binary file",), files={"c.yaml": b"\x00\x01PK\x03"}),
    "not utf-8 config": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("not UTF-8",), files={"c.yaml": b"\xff\xfe\xfa"}),
    "empty config": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("is empty",), files={"c.yaml": ""}),
    "null config": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("is empty",), files={"c.yaml": "null\n"}),
    "list config": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("not a mapping",), files={"c.yaml": "- a\n"}),
    "circular defaults": Case(("rl-train", "-c", "{tmp}/a.yaml"), ("circle: a.yaml -> b.yaml -> a.yaml",),
                              files={"a.yaml": "defaults:\n  - b\n", "b.yaml": "defaults:\n  - a\n"}),
    "defaults not a list": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("`defaults:` holds a YAML int", "as a list"),
                                files={"c.yaml": "defaults: 3\n"}),
    "int too long for Python": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("c.yaml holds a value YAML cannot read", "4300 digits"),
                                    files={"c.yaml": "actor:\n  seed: " + "9" * 5000 + "\n"}),
    "impossible date": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("month must be in 1..12", "quote it"),
                            files={"c.yaml": "runner:\n  max_epochs: 2024-13-45\n"}),
    "unterminated interpolation": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("no viable alternative at input '${'",
                                       "Fix the ${...} interpolation"), files={"c.yaml": "runner:\n  max_epochs: ${\n"}),
    "null key": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("Incompatible key type 'NoneType'",), files={"c.yaml": "~: 2\n"}),
    "override int too long": Case((*QUICK, "actor.optim.lr=" + "1" * 100_000), ("value YAML cannot read", "(100015 characters)")),
    "override a section with a list": Case((*QUICK, "runner=[1]"), ('Cannot apply override "runner=[1]"', "a list takes [...]")),
    "tilde deletes": Case((*QUICK, "~runner.max_epochs", "--print-config"), (), code=0),
    "tilde of a missing key": Case((*QUICK, "~runner.nope", "--print-config"), ("Could not delete",)),
    "misspelled key": Case((*QUICK, "actor.optim.lrr=1"), ("actor.optim.lrr", 'Did you mean "lr"')),
    "override without =": Case((*QUICK, "actor.optim.lr"), ("KEY=VALUE",)),
    "bad interpolation": Case((*QUICK, "runner.logger.log_path=${no.such}"), ("Cannot resolve",)),
    "wrong type": Case((*QUICK, "actor.micro_batch_size=lots"), ("actor.micro_batch_size",)),
    # ---- RLinf recipes vlarl cannot run: named as unsupported, not as typos --------------------------------
    "q head": Case((*QUICK, "actor.model.add_q_head=true"), ("does not implement", "add_q_head", "SAC"),
                   absent=("Did you mean", "spelling")),
    "q head off is fine": Case((*QUICK, "actor.model.add_q_head=false", "--print-config"), (), code=0),
    "dsrl": Case((*QUICK, "actor.model.openpi.use_dsrl=true"), ("DSRL", "does not implement")),
    "replay buffer": Case((*QUICK, "algorithm.replay_buffer={cache_size: 10}"), ("replay_buffer", "SAC")),
    "reward model": Case((*QUICK, "+reward.use_reward_model=true"), ("reward models",)),
    "rlinf sac recipe": Case(("rl-train", "-c", "{tmp}/config/sac.yaml"), ('"env/frankasim_pickcube_vision"',
                             "does not have", "libero_spatial"), absent=("Could not load",),
                             files={"config/sac.yaml": "defaults:\n  - env/frankasim_pickcube_vision@env.train\n"
                                    "  - model/cnn_policy@actor.model\n  - training_backend/fsdp@actor.fsdp_config\n"}),
    "rlinf mlp model fragment": Case(("rl-train", "-c", "{tmp}/config/m.yaml"), ('"model/mlp_policy"', "pi0"),
                                     files={"config/m.yaml": "defaults:\n  - env/libero_10@env.train\n"
                                            "  - model/mlp_policy@actor.model\n"}),
    "other simulator": Case((*QUICK, "env.train.env_type=robotwin"), ("simulator vlarl does not run", "libero")),
    "setup-sim unknown": Case(("setup-sim", "robotwin"), ('"robotwin" is not a simulator vlarl knows', "libero")),
    "setup-sim in-process simulator": Case(("setup-sim", "toy_reach"), ("no environment of its own", "libero")),
    "simulator interpreter missing": Case((*DRY, "env.train.python={tmp}/nope/bin/python"),
                                          ("nope/bin/python does not exist", "vlarl setup-sim libero")),
    "other model": Case((*QUICK, "actor.model.model_type=mlp_policy"), ("not a policy vlarl supports", "openpi")),
    "sac advantage": Case((*QUICK, "algorithm.adv_type=embodied_sac"), ("not an advantage estimator", "gae")),
    "sac loss": Case((*QUICK, "algorithm.loss_type=embodied_sac"), ("not a loss vlarl supports",)),
    # ---- found by the config / dry-run, not after the first rollout -----------------------------------
    "task id too big": Case((*DRY, "env.train.task_ids=[0,10]"), ("task_ids [10]", "0..9")),
    "negative task id": Case((*DRY, "env.train.task_ids=[-1]"), ("task_ids [-1]",)),
    "empty task list": Case((*DRY, "env.train.task_ids=[]"), ("task_ids [] names no task", "null")),
    "reset id too big": Case((*DRY, "env.train.specific_reset_id=500"), ("specific_reset_id 500", "0..49")),
    "reset id unimplemented": Case((*DRY, "env.train.specific_reset_id=3"), ("not implemented",)),
    "camera size": Case((*DRY, "env.train.init_params.camera_heights=300", "env.train.init_params.camera_widths=300"),
                        ("render size", "128, 224, 256")),
    "steps not a multiple of the chunk": Case((*DRY, "env.train.max_steps_per_rollout_epoch=7"),
                                              ("multiple of actor.model.num_action_chunks",)),
    "entropy with flow_sde": Case((*DRY, "algorithm.entropy_bonus=0.01"), ("entropy_bonus", "flow_noise")),
    "filter_rewards with gae": Case((*DRY, "algorithm.filter_rewards=true"), ("filter_rewards", "group estimator", "set filter_rewards false")),
    "missing model path": Case((*DRY, "actor.model.model_path=/no/such/ckpt"), ("/no/such/ckpt", "does not exist")),
    "damaged model path": Case((*DRY, "actor.model.model_path={tmp}/ck"), ("truncated",), setup="truncated_ckpt"),
    "run folder under a file": Case((*DRY, "runner.logger.log_path={tmp}/afile/run"), ("which is a file",),
                                    files={"afile": "x"}),
    "run folder in /proc": Case((*DRY, "runner.logger.log_path=/proc/vlarl-run"), ("cannot be written",)),
    "launch into a read-only place": Case((*QUICK, "runner.logger.log_path=/proc/vlarl-run"), ("cannot be written",)),
    "memory no machine has": Case(("rl-train", "-c", "libero_10_ppo_openpi", "--dry-run",
                                   "env.train.total_num_envs=100000", "actor.global_batch_size=100000",
                                   "actor.micro_batch_size=100"), ("fits on no machine", "host memory"), code=0),
    "eval out is a file": Case(("eval", "--config", "libero_tiny_ppo", "--suite", "libero_spatial", "--out", "{tmp}/f"),
                               ("results folder", "is a file"), files={"f": "mine"}, kept=("f",)),
    "eval categories of one suite": Case(("eval", "--config", "libero_tiny_ppo", "--suite", "libero_10", "--categories", "swap",
                                          "--out", "{tmp}/r"), ('"libero_10" is not one', "leave --categories out")),
    "eval categories of all": Case(("eval", "--config", "libero_tiny_ppo", "--suite", "all", "--categories", "swap",
                                    "--out", "{tmp}/r"), ('"all" is not one',)),
    "eval empty categories": Case(("eval", "--config", "libero_tiny_ppo", "--suite", "libero_pro", "--categories", ",",
                                   "--out", "{tmp}/r"), ("--categories names no category",)),
    "eval max steps beyond": Case(("eval", "--max-steps", "99999999999999999999"), ("'--max-steps'", "100000")),
    "eval settle steps beyond": Case(("eval", "--settle-steps", "99999999999999999999"), ("'--settle-steps'",)),
    "eval num envs beyond": Case(("eval", "--num-envs", "99999999999999999999"), ("'--num-envs'", "4096")),
    "maniskill episodes overflow": Case(("eval", "--task", "PickCube-v1", "--config", "libero_tiny_ppo", "--episodes",
                                        "99999999999999999999"), ("'--episodes'",)),
    "video max steps beyond": Case(("video", "--config", "libero_tiny_ppo", "--max-steps", "99999999999999999999"),
                                   ("'--max-steps'",)),
    "sft record overflow": Case(("sft", "-c", "sft_toy_reach", "--record", "99999999999999999999",
                                 "runner.logger.log_path={tmp}/run"), ("'--record'",)),
    "sft steps beyond": Case(("sft", "-c", "sft_toy_reach", "--steps", "99999999999999999999",
                              "runner.logger.log_path={tmp}/run"), ("'--steps'",)),
    "eval a task twice": Case(("eval", "--config", "libero_tiny_ppo", "--suite", "libero_spatial", "--tasks", "0,1,0", "--trials",
                               "1", "--out", "{tmp}/r"), ("names task 0 more than once",)),
    "eval empty task list": Case(("eval", "--config", "libero_tiny_ppo", "--tasks", ""), ("names no task",)),
    "eval out in /proc": Case(("eval", "--config", "libero_tiny_ppo", "--out", "/proc/vlarl-eval"), ("cannot be written",)),
    # ---- broken files --------------------------------------------------------------------------------
    "convert truncated weights": Case(("convert", "{tmp}/ck", "{tmp}/out", "--to", "openpi"),
                                      ("not a readable safetensors file", "truncated"), setup="truncated_ckpt",
                                      absent=("Cannot tell which model family",)),
    "convert header past the end": Case(("convert", "{tmp}/ck", "{tmp}/out", "--to", "openpi"),
                                        ("reaches past the end",), setup="lying_header_ckpt"),
    "convert bad json header": Case(("convert", "{tmp}/ck", "{tmp}/out", "--to", "openpi"), ("not valid JSON",),
                                    setup="bad_json_ckpt"),
    "convert html as weights": Case(("convert", "{tmp}/ck", "{tmp}/out", "--to", "openpi"), ("implausible",),
                                    files={"ck/model.safetensors": b"<!doctype html><html>hello</html>"}),
    "eval truncated weights": Case(("eval", "--checkpoint", "{tmp}/ck", "--out", "{tmp}/res"), ("truncated",),
                                   setup="truncated_ckpt"),
    "convert shard index a list": Case(("convert", "{tmp}/ck", "{tmp}/out", "--to", "openpi"),
                                       ("model.safetensors.index.json has no weight_map object",),
                                       files={"ck/model.safetensors.index.json": "[1]"}),
    "convert shard index not json": Case(("convert", "{tmp}/ck", "{tmp}/out", "--to", "openpi"),
                                         ("model.safetensors.index.json is unreadable or not JSON",),
                                         files={"ck/model.safetensors.index.json": "{oops"}),
    "convert damaged pickle": Case(("convert", "{tmp}/ck", "{tmp}/out", "--to", "openpi", "--allow-pickle"),
                                   ("pytorch_model.bin could not be loaded",), files={"ck/pytorch_model.bin": b"junk"},
                                   kept=("ck/pytorch_model.bin",)),
    "corrupt card": Case(("eval", "--compare", "{tmp}/a", "{tmp}/b"), ("card.json", "damaged"),
                         files={"a/card.json": "{not json", "a/episodes.jsonl": EP_LINE + "\n",
                                "b/card.json": "{}", "b/episodes.jsonl": EP_LINE + "\n"}),
    "resume into a corrupt card": Case(("eval", "--config", "libero_tiny_ppo", "--suite", "libero_spatial", "--tasks", "0",
                                        "--trials", "1", "--out", "{tmp}/res"), ("card.json", "damaged"),
                                       files={"res/card.json": "{not json", "res/episodes.jsonl": EP_LINE + "\n"},
                                       kept=("res/episodes.jsonl",)),
    "compare an unknown suite": Case(("eval", "--compare", "{tmp}/a", "{tmp}/b"), ("suites vlarl does not know", "zzz"),
                                     files={"a/card.json": "{}", "a/episodes.jsonl": EP_FULL.replace("libero_10", "zzz"),
                                            "b/card.json": "{}", "b/episodes.jsonl": EP_FULL.replace("libero_10", "zzz")}),
    "robustness of a standard suite": Case(("eval", "--robustness", "{tmp}/a"), ("unperturbed suites only", "libero_10"),
                                           files={"a/card.json": "{}", "a/episodes.jsonl": EP_FULL},
                                           absent=("nan",)),
    "card is a list": Case(("eval", "--compare", "{tmp}/a", "{tmp}/b"), ("not a protocol card",),
                           files={"a/card.json": "[1]", "a/episodes.jsonl": "", "b/card.json": "{}",
                                  "b/episodes.jsonl": ""}),
    "no card": Case(("eval", "--compare", "{tmp}/a", "{tmp}/b"), ("not a vlarl eval results folder",),
                    files={"a/x": "", "b/x": ""}),
    "episode line is a list": Case(("video", "{tmp}/r/episodes.jsonl", "--episode", "0"), ("line 1", "JSON list"),
                                   files={"r/episodes.jsonl": "[1, 2]\n" + EP_LINE + "\n", "r/card.json": "{}"}),
    "episode line is a scalar": Case(("video", "{tmp}/r/episodes.jsonl", "--episode", "0"), ("JSON int",),
                                     files={"r/episodes.jsonl": "42\n" + EP_LINE + "\n", "r/card.json": "{}"}),
    "binary episode log": Case(("video", "{tmp}/r/episodes.jsonl", "--episode", "0"), ("binary",),
                               files={"r/episodes.jsonl": b"\x89PNG\r\n\x1a\n\xff\xfe" + b"\x00" * 20}),
    "empty episode log": Case(("video", "{tmp}/r/episodes.jsonl", "--episode", "0"), ("holds no episode",),
                              absent=("0..-1",), files={"r/episodes.jsonl": "\n\n", "r/card.json": "{}"}),
    "episode line not json": Case(("video", "{tmp}/r/episodes.jsonl", "--episode", "0"), ("line 1 is not JSON",),
                                  files={"r/episodes.jsonl": "{oops\n" + EP_LINE + "\n"}),
    "episode data path out of its folder": Case(("video", "{tmp}/r/episodes.jsonl", "--episode", "0"),
                                                ("data path names '../../outside.npz'", "not a path inside"),
                                                files={"r/episodes.jsonl": json.dumps({**EP, "reset_state_id": 0, "seed": 0,
                                                                                       "data": "../../outside.npz"}) + "\n",
                                                       "r/card.json": "{}"}),
    "sft run folder under a file": Case(("sft", "-c", "sft_toy_reach", "runner.logger.log_path={tmp}/f/run"),
                                        ("which is a file",), files={"f": "mine"}, kept=("f",)),
    "episode line with a wrong type": Case(("video", "{tmp}/r/episodes.jsonl", "--episode", "0"),
                                           ("has task = 'zero', not a int",),
                                           files={"r/episodes.jsonl": json.dumps({**EP, "reset_state_id": 0, "seed": 0,
                                                                                  "task": "zero"}) + "\n",
                                                  "r/card.json": "{}"}),
    "sft -o in /proc": Case(("sft", "-c", "sft_toy_reach", "-o", "/proc/vlarl-ck", "runner.logger.log_path={tmp}/run"),
                            ("The checkpoint folder (-o)", "cannot be written")),
    "sft -o under a file": Case(("sft", "-c", "sft_toy_reach", "-o", "{tmp}/f/ck", "runner.logger.log_path={tmp}/run"),
                                ("The checkpoint folder (-o)", "which is a file"), files={"f": "mine"}, kept=("f",)),
    "sft record into a file": Case(("sft", "-c", "sft_toy_reach", "--demos", "{tmp}/f", "--record", "2",
                                    "runner.logger.log_path={tmp}/run"), ("demonstrations folder (--demos)", "is a file"),
                                   files={"f": "mine"}, kept=("f",)),
    "lerobot data_path out of its folder": Case(("sft", "-c", "sft_toy_reach", "--demos", "{tmp}/ds",
                                                 "runner.logger.log_path={tmp}/run"),
                                                ("data_path names '../outside/episode_000000.parquet'",),
                                                setup="lerobot_escaping"),
    "lerobot action column of strings": Case(("sft", "-c", "sft_toy_reach", "--demos", "{tmp}/ds",
                                              "runner.logger.log_path={tmp}/run"),
                                             ("column 'action' is not a numeric vector", "'left'"),
                                             setup="lerobot_string_actions"),
    "lerobot info is a list": Case(SFT_DS, ("info.json holds a JSON list",), files=_lerobot_meta([])),
    "lerobot episode row a list": Case(SFT_DS, ("episodes.jsonl: row 1", "episode_index (int)"),
                                       files=_lerobot_meta(episodes="[1]\n")),
    "lerobot episode index a word": Case(SFT_DS, ("episodes.jsonl: row 1",),
                                         files=_lerobot_meta(episodes='{"episode_index": "a"}\n')),
    "lerobot task row without index": Case(SFT_DS, ("tasks.jsonl: row 1", "task_index (int)"),
                                           files=_lerobot_meta(tasks='{"task": "t"}\n')),
    "lerobot data_path a number": Case(SFT_DS, ("data_path '3' cannot be filled in",),
                                       files=_lerobot_meta({**_INFO, "data_path": 3})),
    "lerobot data_path unknown field": Case(SFT_DS, ("cannot be filled in (KeyError: 'nope')", "{episode_index}"),
                                            files=_lerobot_meta({**_INFO, "data_path": "data/{nope}.parquet"})),
    "lerobot chunks_size 0": Case(SFT_DS, ("chunks_size 0", "positive integer"),
                                  files=_lerobot_meta({**_INFO, "chunks_size": 0})),
    "lerobot modality a list": Case(SFT_DS, ("modality.json is not GR00T's modality map",),
                                    files=_lerobot_meta(modality_json="[]")),
    "hdf5 problem_info not json": Case(SFT_H5, ("problem_info'] is not JSON",), setup="hdf5_problem_not_json",
                                       kept=("x_demo.hdf5",)),
    "hdf5 problem_info a list": Case(SFT_H5, ("has no language_instruction",), setup="hdf5_problem_a_list"),
    "hdf5 problem_info a number": Case(SFT_H5, ("has no language_instruction",), setup="hdf5_problem_a_number"),
    "hdf5 flat states": Case(SFT_H5, ("not T x d arrays of one length",), setup="hdf5_flat_states"),
    "hdf5 lengths differ": Case(SFT_H5, ("not T x d arrays of one length",), setup="hdf5_lengths_differ"),
    "hdf5 flat camera": Case(SFT_H5, ("obs/agentview_rgb has shape (3, 8)",), setup="hdf5_flat_camera"),
    "hdf5 demo not a group": Case(SFT_H5, ("demo_0 lacks actions",), setup="hdf5_demo_not_a_group"),
    "npz episode meta a list": Case(("sft", "-c", "sft_toy_reach", "--demos", "{tmp}/d", "runner.logger.log_path={tmp}/run"),
                                    ("meta entry holds a JSON list",), setup="npz_meta_list", kept=("d/episode_0.npz",)),
    "lerobot fps 0": Case(("sft", "-c", "sft_toy_reach", "--demos", "{tmp}/ds", "runner.logger.log_path={tmp}/run"),
                          ("gives fps 0", "positive"), setup="lerobot_fps0"),
    "no episode log": Case(("video", "{tmp}/nowhere", "--episode", "0"), ("No episode log",)),
    "video out is a file": Case(("video", "{tmp}/nowhere", "--episode", "0", "--out", "{tmp}/afile"),
                                ("--out", "is a file, not a folder"), files={"afile": "mine"}, kept=("afile",)),
    # ---- values bounded by what they mean, checked at validation -------------------------------------------
    "infinite learning rate": Case((*DRY, "actor.optim.lr=inf"), ("actor.optim.lr", "finite number")),
    "nan learning rate": Case((*DRY, "actor.optim.value_lr=nan"), ("actor.optim.value_lr", "finite number")),
    "seed beyond the generators": Case((*DRY, "actor.seed=99999999999999999999"), ("actor.seed", "2147483647")),
    "negative env seed": Case((*DRY, "env.train.seed=-1"), ("env.train.seed", "greater than or equal to 0")),
    "a boolean seed": Case((*DRY, "actor.seed=true"), ("actor.seed", "true is a boolean", "takes a number")),
    "a boolean learning rate": Case((*DRY, "actor.optim.lr=false"), ("actor.optim.lr", "false is a boolean")),
    "a boolean placement": Case((*DRY, "cluster.component_placement.actor=true"),
                                ("component_placement", "an entry is true / false", "takes a number")),
    "envs no machine holds": Case((*QUICK, "env.train.total_num_envs=100000000000", "runner.logger.log_path={tmp}/run"),
                                  ("100,000,000,000 libero training envs", "more than any machine has",
                                   "env.train.total_num_envs"), absent=("Traceback",)),
    "dual clip below one": Case((*DRY, "algorithm.clip_ratio_c=0.5"), ("clip_ratio_c", "greater than 1")),
    "eval seed beyond the generators": Case(("eval", "--config", "libero_tiny_ppo", "--seed", "99999999999999999999"),
                                            ("--seed", "2147483647")),
    "yaml nested too deep": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("nests deeper than 64",),
                                 files={"c.yaml": "a: " + "[" * 5000 + "]" * 5000 + "\n"}),
    "yaml alias bomb": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("YAML aliases",), setup="alias_bomb"),
    "interpolation bomb": Case(("rl-train", "-c", "{tmp}/c.yaml", "--print-config"), ("would expand to more than",),
                               setup="interpolation_bomb"),
    "yaml too big": Case(("rl-train", "-c", "{tmp}/c.yaml"), ("at most 1048576",),
                         files={"c.yaml": "runner: {}\n" + "# padding\n" * 120_000}),
    # ---- a run folder is one run's, written by one process, holding only vlarl's files -----------------
    "unresolvable master address": Case((*QUICK, "--nnodes", "2", "--master-addr", "no-such-host.invalid"),
                                        ("--master-addr no-such-host.invalid cannot be resolved",)),
    "unresolvable master address on one node": Case((*QUICK, "--nproc-per-node", "2", "--master-addr", "no-such-host.invalid"),
                                                    ("--master-addr no-such-host.invalid cannot be resolved",)),
    "empty run folder name": Case((*QUICK, "runner.logger.log_path="), ("log_path must name a folder",)),
    "run folder is '.'": Case((*QUICK, "runner.logger.log_path=./"), ("log_path must name a folder",),
                              files={"mine.txt": "mine"}, kept=("mine.txt",)),
    "run folder is the root": Case((*QUICK, "runner.logger.log_path=/"), ("file system's root",)),
    "run folder with a NUL": Case((*QUICK, "runner.logger.log_path={tmp}/a\x00b"), ("NUL character",)),
    "video folder under a file": Case((*QUICK, "runner.logger.log_path={tmp}/run", "env.train.video_cfg.video_base_dir={tmp}/f/v"),
                                      ("env.train.video_cfg.video_base_dir", "is a file"), files={"f": "mine"}, kept=("f",)),
    "model path is a file": Case((*DRY, "actor.model.model_path={tmp}/f"), ("is a file, not a checkpoint folder",),
                                 files={"f": "x"}),
    "model path is an empty folder": Case((*DRY, "actor.model.model_path={tmp}/d"), ("is empty",), setup="empty_folder"),
    "rendezvous timeout beyond": Case((*QUICK, "--nnodes", "2", "--rendezvous-timeout", "99999999999999999999"),
                                      ("'--rendezvous-timeout'",)),
    "new run over an old one": Case((*QUICK, "runner.logger.log_path={tmp}/run"), ("already holds a run", "--resume auto"),
                                    files={"run/metrics.jsonl": EP_LINE + "\n", "run/checkpoints/latest": "global_step_1\n"},
                                    kept=("run/metrics.jsonl", "run/checkpoints/latest")),
    "a user's config.yaml in the run folder": Case((*QUICK, "runner.logger.log_path={tmp}/run"),
                                                   ("config.yaml exists and vlarl did not write it",),
                                                   files={"run/config.yaml": "my: own\n"}, kept=("run/config.yaml",)),
    "latest points out of its folder": Case((*QUICK, "runner.logger.log_path={tmp}/run", "--resume", "auto"),
                                            ("not a checkpoint folder inside",),
                                            files={"run/checkpoints/latest": "../../elsewhere\n",
                                                   "elsewhere/trainer_state.json": "{}"}),
    "resume override the checkpoint decides": Case((*QUICK, "runner.logger.log_path={tmp}/run", "--resume", "auto",
                                                    "actor.optim.lr=1e-3"), ("actor.optim.lr", "would be ignored"),
                                                   setup="tiny_run"),
    "resume with an infinite iteration": Case((*QUICK, "runner.logger.log_path={tmp}/run", "--resume", "auto"),
                                              ("gives iteration inf", "integer >= 0"), setup="tiny_run",
                                              files={"run/checkpoints/global_step_1/trainer_state.json": '{"iteration": 1e400}'}),
    "resume with a negative iteration": Case((*QUICK, "runner.logger.log_path={tmp}/run", "--resume", "auto"),
                                             ("gives iteration -5",), setup="tiny_run",
                                             files={"run/checkpoints/global_step_1/trainer_state.json": '{"iteration": -5}'}),
    "resume a checkpoint whose config is a list": Case((*QUICK, "runner.logger.log_path={tmp}/run", "--resume", "auto"),
                                                       ("config.yaml holds a YAML list",), setup="tiny_run",
                                                       files={"run/checkpoints/global_step_1/config.yaml": "- 1\n"}),
    "resume empty": Case((*QUICK, "runner.logger.log_path={tmp}/run", "--resume", ""), ('--resume "" names no checkpoint',)),
    "sft resume empty": Case(("sft", "-c", "sft_toy_reach", "--resume", "", "runner.logger.log_path={tmp}/run"),
                             ('--resume "" names no checkpoint',)),
    "resume into a damaged config history": Case((*QUICK, "runner.logger.log_path={tmp}/run", "--resume", "auto",
                                                  "runner.max_epochs=5"), ("is not vlarl's list of its files",),
                                                 setup="tiny_run", kept=("run/.vlarl-run.json",),
                                                 files={"run/.vlarl-run.json": '{"files": [], "config_history": 3}'}),
    "sft resumes an rl-train checkpoint": Case(("sft", "-c", "sft_toy_reach", "--resume", "{tmp}/ck",
                                                "runner.logger.log_path={tmp}/run"), ("is not an SFT checkpoint",),
                                               files={"ck/trainer_state.json": '{"iteration": 4}', "ck/config.yaml": "a: 1\n"}),
    "eval a toy checkpoint in libero": Case(("eval", "--checkpoint", "{tmp}/run", "--suite", "libero_spatial", "--tasks", "0",
                                             "--trials", "1", "--out", "{tmp}/res"), ("toy_flow policy", "LIBERO"),
                                            setup="toy_run"),
    "eval run with a binary latest": Case(("eval", "--run", "{tmp}/run"), ("latest cannot be read",),
                                          files={"run/checkpoints/latest": b"\xff\x00"}, kept=("run/checkpoints/latest",)),
    "eval checkpoint is a file": Case(("eval", "--checkpoint", "{tmp}/f"), ("is a file, not a checkpoint folder",),
                                      files={"f": "x"}, kept=("f",)),
    "eval damaged checkpoint": Case(("eval", "--checkpoint", "{tmp}/ck", "--out", "{tmp}/res"),
                                    ("model.safetensors is damaged",), setup="damaged_ckpt"),
    "convert damaged checkpoint": Case(("convert", "{tmp}/ck", "{tmp}/out", "--to", "openpi"),
                                       ("model.safetensors is damaged",), setup="damaged_ckpt"),
    "convert overwrite a run": Case(("convert", "{tmp}/p/src", "{tmp}/runs", "--to", "openpi", "--overwrite"),
                                    ("holds the record of a run", "metrics.jsonl"), setup="good_folder_in_p",
                                    files={"runs/a/metrics.jsonl": EP_LINE + "\n"}, kept=("runs/a/metrics.jsonl",)),
    "convert overwrite a checkpoint": Case(("convert", "{tmp}/p/src", "{tmp}/ck", "--to", "openpi", "--overwrite"),
                                           ("holds the record of a run", "trainer_state.json"), setup="good_folder_in_p",
                                           files={"ck/trainer_state.json": "{}"}, kept=("ck/trainer_state.json",)),
    "convert overwrite recorded demos": Case(("convert", "{tmp}/p/src", "{tmp}/demos", "--to", "openpi", "--overwrite"),
                                             ("holds the record of a run", "episode_000000.npz"), setup="good_folder_in_p",
                                             files={"demos/episode_000000.npz": b"demo"}, kept=("demos/episode_000000.npz",)),
    "convert overwrite a lerobot dataset": Case(("convert", "{tmp}/p/src", "{tmp}/ds", "--to", "openpi", "--overwrite"),
                                                ("meta/info.json",), setup="good_folder_in_p",
                                                files={"ds/meta/info.json": "{}"}, kept=("ds/meta/info.json",)),
    "convert overwrite libero hdf5": Case(("convert", "{tmp}/p/src", "{tmp}/h", "--to", "openpi", "--overwrite"),
                                          ("x_demo.hdf5",), setup="good_folder_in_p",
                                          files={"h/x_demo.hdf5": b"h5"}, kept=("h/x_demo.hdf5",)),
    # ---- convert: arguments first (no torch import), and never lose the source ---------------------------
    "convert into the parent": Case(("convert", "{tmp}/p/src", "{tmp}/p", "--to", "openpi", "--overwrite"),
                                    ("contains the source",), setup="good_folder_in_p",
                                    kept=("p/src/model.safetensors", "p/keep.txt")),
    "convert into cwd": Case(("convert", "p/src", ".", "--to", "openpi", "--overwrite"), ("contains the source",),
                             setup="good_folder_in_p", kept=("p/src/model.safetensors",)),
    "convert into itself": Case(("convert", "{tmp}/p/src", "{tmp}/p/src/out", "--to", "openpi"), ("inside",),
                                setup="good_folder_in_p"),
    "convert missing source": Case(("convert", "{tmp}/nope", "{tmp}/out", "--to", "openpi"), ("does not exist",)),
    "convert source is a file": Case(("convert", "{tmp}/f", "{tmp}/out", "--to", "openpi"), ("is a file",),
                                     files={"f": "x"}),
    "convert existing destination": Case(("convert", "{tmp}/p/src", "{tmp}/d", "--to", "openpi"),
                                         ("already exists", "--overwrite"), setup="good_folder_in_p",
                                         files={"d/mine.txt": "mine"}, kept=("d/mine.txt",)),
    "convert destination is a file": Case(("convert", "{tmp}/p/src", "{tmp}/f", "--to", "openpi", "--overwrite"),
                                          ("is a file",), setup="good_folder_in_p", files={"f": "x"}, kept=("f",)),
    "convert under a file": Case(("convert", "{tmp}/p/src", "{tmp}/f/out", "--to", "openpi"), ("is a file",),
                                 setup="good_folder_in_p", files={"f": "x"}),
    "convert format typo": Case(("convert", "{tmp}/p/src", "{tmp}/out", "--to", "openpix"),
                                ('Did you mean "openpi"',), setup="good_folder_in_p"),
    "convert dtype typo": Case(("convert", "{tmp}/p/src", "{tmp}/out", "--to", "openpi", "--dtype", "bf17"),
                               ('Did you mean "bf16"',), setup="good_folder_in_p"),
}


# --------------------------------------------------------------------------------------------------
# builders of files that need code


def _safetensors_bytes() -> bytes:
    import torch
    from safetensors.torch import save

    return save({"paligemma_with_expert.w": torch.zeros(64, 64), "action_in_proj.weight": torch.ones(32, 8)})


def _quickstart_yaml() -> str:
    from vlarl_cli.config.loading import load_config, to_yaml

    return to_yaml(load_config("libero_tiny_ppo").config)


def _ckpt(tmp: Path, weights: bytes) -> None:
    (tmp / "ck").mkdir()
    (tmp / "ck" / "model.safetensors").write_bytes(weights)
    (tmp / "ck" / "config.yaml").write_text(_quickstart_yaml())


def _truncated_ckpt(tmp: Path) -> None:
    data = _safetensors_bytes()
    _ckpt(tmp, data[: len(data) - 100])


def _lying_header_ckpt(tmp: Path) -> None:
    _ckpt(tmp, struct.pack("<Q", 10**6) + b"{}")


def _bad_json_ckpt(tmp: Path) -> None:
    _ckpt(tmp, struct.pack("<Q", 10) + b"{not json!" + b"\x00" * 64)


def _good_folder_in_p(tmp: Path) -> None:
    (tmp / "p" / "src").mkdir(parents=True)
    (tmp / "p" / "src" / "model.safetensors").write_bytes(_safetensors_bytes())
    (tmp / "p" / "keep.txt").write_text("the user's file")


def _alias_bomb(tmp: Path) -> None:
    rows = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    rows += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 40)]
    (tmp / "c.yaml").write_text("\n".join(rows) + "\n")


def _interpolation_bomb(tmp: Path) -> None:
    rows = ["runner: {}", "a0: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    rows += [f"a{i}: [{', '.join([repr('${a' + str(i - 1) + '}')] * 10)}]" for i in range(1, 12)]
    (tmp / "c.yaml").write_text("\n".join(rows) + "\n")


def _damaged_ckpt(tmp: Path) -> None:
    from vlarl_cli.checkpoints.integrity import write_checksums

    _ckpt(tmp, _safetensors_bytes())
    write_checksums(tmp / "ck")
    data = bytearray((tmp / "ck" / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (tmp / "ck" / "model.safetensors").write_bytes(bytes(data))


def _tiny_run(tmp: Path) -> None:
    """A run folder whose latest checkpoint's config is libero_tiny_ppo's (what --resume auto compares with)."""
    from vlarl_cli.config.loading import load_config, to_yaml

    folder = tmp / "run" / "checkpoints" / "global_step_1"
    folder.mkdir(parents=True, exist_ok=True)
    config = load_config("libero_tiny_ppo", [f"runner.logger.log_path={tmp / 'run'}"]).config
    for path, text in ((folder / "config.yaml", to_yaml(config)), (folder / "trainer_state.json", '{"iteration": 1}'),
                       (tmp / "run" / "checkpoints" / "latest", "global_step_1\n")):
        if not path.exists():  # a row's own files (a damaged trainer_state.json) stay
            path.write_text(text)


def _lerobot_v21(tmp: Path, *, fps: float = 10, data_path: str = "data/episode_{episode_index:06d}.parquet") -> None:
    """The metadata of a LeRobot v2.1 dataset (no data files: the rows below fail before reading any)."""
    vec = {"dtype": "float32", "shape": [2], "names": None}
    info = {"codebase_version": "v2.1", "fps": fps, "chunks_size": 1000, "data_path": data_path,
            "features": {"observation.state": vec, "action": vec,
                         "observation.images.image": {"dtype": "image", "shape": [8, 8, 3], "names": None}}}
    (tmp / "ds" / "meta").mkdir(parents=True)
    (tmp / "ds" / "meta" / "info.json").write_text(json.dumps(info))
    (tmp / "ds" / "meta" / "episodes.jsonl").write_text(json.dumps({"episode_index": 0, "tasks": ["t"], "length": 2}))
    (tmp / "ds" / "meta" / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": "t"}))


def _toy_run(tmp: Path) -> None:
    """A real toy_reach checkpoint (what `vlarl rl-train -c toy_reach_ppo` writes), without training."""
    import torch

    from vlarl_cli.config.loading import load_config, to_yaml
    from vlarl_cli.policies.registry import build_policy
    from vlarl_cli.training import checkpoint as ckpt

    config = load_config("toy_reach_ppo").config
    policy = build_policy(config.actor.model)
    ckpt.save_checkpoint(tmp / "run", model_state=policy.state_dict(), optimizer_state={}, scheduler=None,
                         generators={}, trainer_state=ckpt.TrainerState(iteration=1), config_yaml=to_yaml(config))
    assert isinstance(policy, torch.nn.Module)


def _libero_hdf5(tmp: Path, *, problem: object = '{"language_instruction": "pick"}', ee: tuple[int, ...] = (3, 6),
                 gripper: tuple[int, ...] = (3, 2), camera: tuple[int, ...] = (3, 8, 8, 3), demo_group: bool = True) -> None:
    """x_demo.hdf5 in LIBERO's layout (one demo of 3 steps), with the given problem_info and array shapes."""
    import h5py
    import numpy as np

    with h5py.File(tmp / "x_demo.hdf5", "w") as f:
        data = f.create_group("data")
        data.attrs["problem_info"] = problem
        if not demo_group:
            data["demo_0"] = np.zeros(3)
            return
        obs = data.create_group("demo_0").create_group("obs")
        data["demo_0"]["actions"] = np.zeros((3, 7), np.float32)
        obs["ee_states"], obs["gripper_states"] = np.zeros(ee, np.float32), np.zeros(gripper, np.float32)
        obs["agentview_rgb"] = np.zeros(camera, np.uint8)


def _npz_meta_list(tmp: Path) -> None:
    """d/episode_0.npz with every entry of a vlarl episode, its meta a JSON list."""
    import numpy as np

    (tmp / "d").mkdir()
    np.savez(tmp / "d" / "episode_0.npz", states=np.zeros((3, 4), np.float32), actions=np.zeros((3, 2), np.float32),
             task_description=np.array("t"), success=np.array(True), meta=np.array("[1]"))


def _lerobot_rows(tmp: Path, *, images: bool) -> None:
    """A LeRobot v2.1 dataset of one 2-frame episode whose action column holds strings (``images``: with the
    image column that info.json lists)."""
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    _lerobot_v21(tmp)
    png = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(png, format="PNG")
    columns = {"observation.state": [[0.0, 1.0], [1.0, 2.0]], "action": ["left", "right"], "timestamp": [0.0, 0.1],
               "frame_index": [0, 1], "episode_index": [0, 0], "index": [0, 1], "task_index": [0, 0]}
    if images:
        columns["observation.images.image"] = [{"bytes": png.getvalue(), "path": None}] * 2
    (tmp / "ds" / "data").mkdir()
    pq.write_table(pa.table(columns), tmp / "ds" / "data" / "episode_000000.parquet")


BUILDERS: dict[str, Callable[[Path], None]] = {
    "lerobot_string_actions": lambda tmp: _lerobot_rows(tmp, images=True),
    "npz_meta_list": _npz_meta_list,
    "hdf5_problem_not_json": lambda tmp: _libero_hdf5(tmp, problem="{oops"),
    "hdf5_problem_a_list": lambda tmp: _libero_hdf5(tmp, problem="[1]"),
    "hdf5_problem_a_number": lambda tmp: _libero_hdf5(tmp, problem=3),
    "hdf5_flat_states": lambda tmp: _libero_hdf5(tmp, ee=(3,)),
    "hdf5_lengths_differ": lambda tmp: _libero_hdf5(tmp, gripper=(4, 2)),
    "hdf5_flat_camera": lambda tmp: _libero_hdf5(tmp, camera=(3, 8)),
    "hdf5_demo_not_a_group": lambda tmp: _libero_hdf5(tmp, demo_group=False),
    "toy_run": _toy_run,
    "lerobot_escaping": lambda tmp: _lerobot_v21(tmp, data_path="../outside/episode_{episode_index:06d}.parquet"),
    "lerobot_fps0": lambda tmp: _lerobot_v21(tmp, fps=0),
    "truncated_ckpt": _truncated_ckpt, "lying_header_ckpt": _lying_header_ckpt, "bad_json_ckpt": _bad_json_ckpt,
    "good_folder_in_p": _good_folder_in_p, "alias_bomb": _alias_bomb, "interpolation_bomb": _interpolation_bomb, "damaged_ckpt": _damaged_ckpt,
    "tiny_run": _tiny_run, "empty_folder": lambda tmp: (tmp / "d").mkdir(),
}


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row that wrongly passes validation must fail the test, not start a training run or simulators."""
    import vlarl_cli.training.entry as entry

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("a bad-input row reached a launch")

    real_launch = entry.launch

    def guarded_launch(**kwargs: object) -> None:
        if not kwargs.get("dry_run") and not kwargs.get("print_config"):
            # validation happens in launch; only the training itself is replaced
            import vlarl_cli.training.rl as rl

            monkeypatch.setattr(rl, "train", refuse)
        real_launch(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(entry, "launch", guarded_launch)
    import vlarl_cli.training.evaluation.api as evaluation_api

    monkeypatch.setattr(evaluation_api, "run_episodes", refuse)  # an eval row: no simulator either
    import vlarl_cli.training.sft as sft

    monkeypatch.setattr(sft, "record_demos", refuse)  # an sft row: no recording of expert demos


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                   no_launch: None) -> None:
    case = CASES[name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for rel, body in case.files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
    if case.setup:
        BUILDERS[case.setup](tmp_path)
    code = run([a.replace("{tmp}", str(tmp_path)) for a in case.args])
    out, err = capsys.readouterr()
    assert code == case.code, (code, out, err)
    assert "Traceback" not in out + err, err
    for word in case.words:
        assert word in err, (word, err)
    for word in case.absent:
        assert word not in err, (word, err)
    if case.code == 2:
        assert err.startswith("error: ") and "\nfix: " in err, err
    for rel in case.kept:
        assert (tmp_path / rel).exists(), f"{rel} was deleted"


def test_debug_shows_the_traceback_behind_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["rl-train", "-c", str(tmp_path / "nope.yaml"), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "neither a file nor a preset" in err


def test_a_bug_keeps_its_traceback_and_says_where_to_report(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    import vlarl_cli.training.entry as entry

    def broken(**_: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(entry, "launch", broken)
    assert run(["rl-train", "-c", "libero_tiny_ppo"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err and "bug in vlarl" in err and "report" in err


@pytest.mark.parametrize(("command", "words"), [
    (["rl-train", "-c", "libero_tiny_ppo"], "--resume auto"),
    (["eval", "--config", "libero_tiny_ppo"], "skipped"),
])
def test_ctrl_c_exits_130_and_says_how_to_resume(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                command: list[str], words: str) -> None:
    import vlarl_cli.training.entry as entry
    import vlarl_cli.training.evaluation as evaluation

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(entry, "launch", interrupted)
    monkeypatch.setattr(evaluation, "evaluate", interrupted)
    assert run(command) == 130
    err = capsys.readouterr().err
    assert "Interrupted" in err and words in err and "Traceback" not in err


@pytest.mark.parametrize(("errno_name", "words"), [
    ("ENOSPC", "no space is left"), ("EFBIG", "larger than this file system"), ("EROFS", "read-only"),
    ("EACCES", "permission denied"), ("EISDIR", "is a folder where a file is expected"),
])
def test_os_errors_name_the_file_and_the_fix(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                            errno_name: str, words: str) -> None:
    import errno

    import vlarl_cli.training.entry as entry

    def failing(**_: object) -> None:
        raise OSError(getattr(errno, errno_name), "os says no", "/data/runs/x/model.safetensors")

    monkeypatch.setattr(entry, "launch", failing)
    assert run(["rl-train", "-c", "libero_tiny_ppo"]) == 2
    err = capsys.readouterr().err
    assert words in err and "/data/runs/x/model.safetensors" in err and "fix: " in err and "Traceback" not in err


@pytest.mark.parametrize(("raised", "words", "code"), [
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 55360 vs 55252"), "ulimit -f", 2),
    (RuntimeError("saving failed"), "no space is left", 2),  # raised from an OSError(ENOSPC): its cause counts
    (RuntimeError("unexpected value"), "bug in vlarl", 1),  # not a write: a bug keeps its traceback
])
def test_a_write_that_failed_part_way_names_the_disk(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                    raised: RuntimeError, words: str, code: int) -> None:
    import errno

    import vlarl_cli.training.entry as entry

    def failing(**_: object) -> None:
        if str(raised) == "saving failed":
            raise raised from OSError(errno.ENOSPC, "No space left on device", "/data/runs/x/optimizer.pt")
        raise raised

    monkeypatch.setattr(entry, "launch", failing)
    assert run(["rl-train", "-c", "libero_tiny_ppo"]) == code
    assert words in capsys.readouterr().err


def test_sigterm_in_process_exits_143_with_the_resume_note(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import signal

    import vlarl_cli.training.entry as entry

    def terminated(**_: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # what `kill PID` or a scheduler's pre-emption sends
        raise AssertionError("SIGTERM did not stop the command")

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(entry, "launch", terminated)
    assert run(["rl-train", "-c", "libero_tiny_ppo"]) == 143
    err = capsys.readouterr().err
    assert "Terminated (SIGTERM)" in err and "--resume auto" in err and "Traceback" not in err
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the command's only


@pytest.mark.parametrize(("args", "words"), [
    (["--suite", "libero_1O", "--task", "0"], 'Did you mean "libero_10"'),
    (["--suite", "libero_10", "--task", "10"], "--task 10 is out of range for libero_10"),
    (["--suite", "libero_10", "--task", "0", "--protocol", "stdandard"], 'Did you mean "standard"'),
    (["--suite", "libero_10", "--task", "0", "--resolution", "300"], "Resolution 300"),
])
def test_a_live_video_checks_its_episode_before_loading_the_policy(args: list[str], words: str,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Loading a full policy takes minutes: a mistyped suite, task, protocol or resolution is named first."""
    import vlarl_cli.training.evaluation as evaluation

    def loaded(*_: object, **__: object) -> None:
        raise AssertionError("the policy was loaded before the episode was checked")

    monkeypatch.setattr(evaluation, "load_policy", loaded)
    assert run(["video", "--config", "libero_tiny_ppo", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err
