"""The GPU paths measured in one call: per family memory / speed against ``--dry-run``, LIBERO with EGL, one
iteration. Prints ONE JSON line and writes the same JSON to a file (``benchmarks/out/`` or ``--out-dir``).

    python benchmarks/gpu_truth.py                         # on a GPU machine: every part, full size, bf16
    python benchmarks/gpu_truth.py --parts family:pi0,libero --timeouts family=120
    python benchmarks/gpu_truth.py --smoke                 # tiny presets on CPU (< 60 s): keeps the script alive

Parts (each a subprocess with its own time limit; a failure or a timeout is recorded and the run goes on):

* ``attention``: which scaled-dot-product kernel the device runs per dtype, mask and grouped-query case
  (pi0 expert shapes): the math kernel keeps the attention scores, the fused ones do not.
* ``family:<name>`` (pi0, pi05, gr00t_n15, gr00t_n16, openvla_oft): the recipe's policy at full size with
  random weights, built as ``rl-train`` builds it (its precision, on the device). One actor update (evaluate,
  loss, backward, AdamW step) at the recipe's micro-batch, or its largest halving the dry run's plan fits in the
  device's memory with the 15% calibration margin (``micro_batch_choice`` says which and why; a plan whose
  micro-batch-independent part alone exceeds the device is refused before building, naming the fixes): peak
  device memory against the plan for one device (``ratio`` = measured / predicted), the activations autograd
  kept against the activation term, and update samples/s; on an out-of-memory error the micro-batch is halved
  and the error recorded, with what the failed attempt left allocated (the retry stops when that exceeds 1 GiB). Rollout:
  ``sample`` latency and throughput at the recipe's env count and denoising steps, and for pi0 / pi0.5 the
  same without the prefix cache. Offload (``actor.enable_offload``): seconds to move the weights and AdamW
  moments to the host and back.
* ``libero``: env steps/s of vlarl's LIBERO vector env at 1, 4, 8, 16 workers (one env each), both cameras
  at 224 px, ``MUJOCO_GL=egl``.
* ``iteration``: two ``rl-train`` iterations of the pi0 LIBERO recipe scaled to one GPU (16 envs on
  libero_spatial, whose assets the device kit carries, one 40-step rollout); the time per phase of the second.

``--smoke`` runs the same code on CPU with the tiny presets, a micro-batch of 2, 2 envs and 64 px images.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = {  # part name -> the recipe rl-train would run
    "pi0": "libero_10_ppo_openpi", "pi05": "libero_10_ppo_openpi_pi05", "gr00t_n15": "libero_10_ppo_gr00t",
    "gr00t_n16": "libero_spatial_ppo_gr00t_n1d6", "openvla_oft": "libero_10_ppo_openvlaoft",
}
PARTS = ("attention", *(f"family:{f}" for f in FAMILIES), "libero", "iteration")
#: seconds per part on the GPU machine (the H200 run of 2026-11-28: GR00T ~31 s; pi0 ~50 s to the end of its update,
#: its fp32 rollout at 64 envs beyond; OpenVLA-OFT built in 14 s, and its offload moves 3x GR00T N1.5's bytes, which
#: took 8.8 s + 1.9 s), 500 s in all, so that one call (timeout 570 s, the kit's install included) and a rerun of the
#: parts that failed fit in the 15 minutes of device time a task is lent (docs/gpu/README.md)
TIMEOUTS = {"attention": 15, "family:pi0": 90, "family:pi05": 90, "family:gr00t_n15": 40, "family:gr00t_n16": 40,
            "family:openvla_oft": 80, "libero": 60, "iteration": 85}
SMOKE_TIMEOUT = 30  # per part; --smoke runs them all in one process
WORKERS = (1, 4, 8, 16)
GIB = 1024**3
#: set by :func:`run_parts` while a part runs: records what the part has measured so far, so that a part killed at
#: its time limit still returns its finished stages (marked ``partial``)
def _no_progress(partial: dict[str, Any]) -> None:
    """Outside :func:`run_parts`: nothing to record."""


_progress: Callable[[dict[str, Any]], None] = _no_progress


# ---------------------------------------------------------------------------------------------- helpers
def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], Any], device: Any, repeats: int) -> float:
    """Median seconds of ``fn`` after one warm-up call."""
    fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def _obs(batch: int, size: int) -> dict[str, Any]:
    import torch

    from vlarl_cli import keys

    g = torch.Generator().manual_seed(0)
    return {keys.MAIN_IMAGES: torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8, generator=g),
            keys.WRIST_IMAGES: torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8, generator=g),
            keys.STATES: torch.rand(batch, 8, generator=g) * 2 - 1,
            keys.TASK_DESCRIPTIONS: ["put both the alphabet soup and the tomato sauce in the basket"] * batch}


def _family_config(family: str, smoke: bool) -> Any:
    from vlarl_cli.config.loading import load_config

    # random weights at the recipe's size: nothing to download
    overrides = ["actor.model.model_path=null", f"actor.model.preset={'tiny' if smoke else 'full'}"]
    tokenizers = os.environ.get("GPU_TRUTH_TOKENIZERS")  # set by the device kit's run.sh
    if family.startswith("gr00t") and not smoke and tokenizers:
        # a full-size GR00T prompt needs Eagle's Qwen3 tokenizer (the kit carries Isaac-GR00T's files)
        overrides.append(f"actor.model.tokenizer_path={Path(tokenizers) / family.removeprefix('gr00t_')}")
    if smoke:
        overrides.append("actor.micro_batch_size=2")
        if family.startswith("pi0"):
            overrides.append("actor.model.openpi.action_horizon=10")  # tiny's 8 < the recipe's 10 executed
    return load_config(FAMILIES[family], overrides).config


def _device(smoke: bool) -> Any:
    import torch

    if smoke:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: run with --smoke on a machine without a GPU")
    return torch.device("cuda", 0)


# ---------------------------------------------------------------------------------------------- family
def _prediction(config: Any, micro_batch: int) -> dict[str, Any]:
    """The dry run's numbers for one device at ``micro_batch``."""
    from vlarl_cli.training.dry_run import (
        activation_plan,
        build_meta_policy,
        count_parameters,
        estimate_memory,
    )

    meta = build_meta_policy(config)
    plan = activation_plan(config, meta)
    activations = 0.0 if plan is None else plan.bytes * micro_batch / plan.micro_batch
    return _prediction_from(estimate_memory(config, count_parameters(meta), 1, activations)["0"])


def _prediction_from(estimate: Any) -> dict[str, Any]:
    """:func:`_prediction`'s figures from one :class:`MemoryEstimate` (a :class:`DeviceFit`'s, no rebuild)."""
    total, activations = estimate.device_total, estimate.activations
    return {"predicted_bytes": int(total), "predicted_activation_bytes": int(activations),
            "predicted_static_bytes": int(total - activations),
            "activation_share": round(activations / total, 3) if total else None}


def _device_bytes(device: Any) -> int:
    """The device's memory; on the CPU (``--smoke``) the host's."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _fit_record(fit: Any) -> dict[str, Any]:
    """What the dry run says of each micro-batch on this device, and the one measured."""
    return {"recipe_micro_batch": fit.recipe_micro_batch, "chosen_micro_batch": fit.micro_batch,
            "device_bytes": int(fit.device_bytes), "fixed_bytes": int(fit.fixed.device_total),
            "planned_bytes": {str(mb): int(e.device_total) for mb, e in fit.planned.items()}, "reason": fit.reason()}


def _update_once(policy: Any, optimizer: Any, replay: Any, measure: bool) -> int:
    """One actor update (evaluate, loss, backward, AdamW step); the bytes autograd kept when ``measure``."""
    from vlarl_cli.policies.activations import saved_tensor_bytes

    optimizer.zero_grad(set_to_none=True)
    if measure:
        kept, out = saved_tensor_bytes(lambda: policy.evaluate(replay), policy)
    else:
        kept, out = 0, policy.evaluate(replay)
    loss = out.logprobs.float().mean() + out.values.float().mean()
    if out.entropy is not None:
        loss = loss - 0.01 * out.entropy.float().mean()
    loss.backward()
    optimizer.step()
    return kept


def _update(policy: Any, optimizer: Any, micro_batch: int, size: int, device: Any) -> dict[str, Any]:
    """Two updates (the first creates AdamW's moments), the peak and the kept activations of the second, then the
    median time of further ones."""
    import torch

    with torch.no_grad():
        replay = policy.sample(_obs(micro_batch, size)).replay
    policy.train()
    start = time.perf_counter()
    _update_once(policy, optimizer, replay, measure=False)  # creates the AdamW moments
    _sync(device)
    _progress({"update": {"micro_batch": micro_batch, "first_update_s": round(time.perf_counter() - start, 3)}})
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    kept = _update_once(policy, optimizer, replay, measure=True)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    # one timed update (the device's time is scarce: 15 minutes per lent day, all parts together)
    seconds = _timed(lambda: _update_once(policy, optimizer, replay, measure=False), device, 1)
    policy.eval()
    return {"micro_batch": micro_batch, "peak_bytes": peak, "kept_activation_bytes": kept,
            "update_s": round(seconds, 4), "update_samples_per_s": round(micro_batch / seconds, 2)}


class NoFit(RuntimeError):
    """A micro-batch cannot help: the plan's fixed part exceeds the device, or a failed attempt left memory held."""


def _held_bytes(policy: Any, optimizer: Any) -> int:
    """What an update keeps between attempts: the weights and AdamW's moments (distinct storages)."""
    tensors = [*policy.parameters(), *(t for st in optimizer.state.values() for t in st.values() if hasattr(t, "untyped_storage"))]
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def _live_bytes(device: Any) -> int:
    """Bytes allocated on ``device``: the caching allocator's count on CUDA; on the CPU the distinct storages of
    the tensors Python can still reach (what a reference cycle or a kept traceback would hold)."""
    import gc

    import torch

    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    storages = {}
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads __class__, which some deprecated module proxies warn on
        if issubclass(type(obj), torch.Tensor) and obj.device.type == device.type and not obj.is_meta:
            st = obj.untyped_storage()
            storages[st.data_ptr()] = st.nbytes()
    return sum(storages.values())


def _free_failed_attempt(policy: Any, optimizer: Any, device: Any) -> int:
    """Drop the gradients, collect, empty the cache (outside the ``except`` block: its traceback holds the failed
    graph); the bytes still allocated besides the weights and AdamW moments."""
    import gc

    import torch

    optimizer.zero_grad(set_to_none=True)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return _live_bytes(device) - _held_bytes(policy, optimizer)


def _update_fitting(policy: Any, optimizer: Any, micro_batch: int, size: int, device: Any,
                    leak_bytes: float = GIB) -> dict[str, Any]:
    """:func:`_update` at ``micro_batch``, halved after each out-of-memory error (recorded with the bytes the failed
    attempt left allocated). Stops early (:class:`NoFit`) when those exceed ``leak_bytes``: a smaller micro-batch
    would then fail for what is held, not for its own size (the H200 run of 2026-11-28 retried down to 1 that way)."""
    import torch

    ooms: list[int] = []
    left: list[int] = []
    before = _live_bytes(device) - _held_bytes(policy, optimizer)  # what the part holds besides (its inputs, say)
    while True:
        try:
            return {**_update(policy, optimizer, micro_batch, size, device), "out_of_memory_at": ooms,
                    "left_after_out_of_memory_bytes": left}
        except torch.OutOfMemoryError:
            ooms.append(micro_batch)
            if micro_batch == 1:
                raise
        left.append(max(0, _free_failed_attempt(policy, optimizer, device) - before))
        _progress({"update": {"out_of_memory_at": ooms, "left_after_out_of_memory_bytes": left}})
        if left[-1] > leak_bytes:
            raise NoFit(f"after the out-of-memory error at micro-batch {micro_batch}, {left[-1] / GIB:.2f} GiB stayed "
                        f"allocated beyond the weights and AdamW moments: the failed attempt was not freed, so a "
                        f"smaller micro-batch would fail for what is held, not for its own size; not retrying")
        micro_batch //= 2


def _pi0_uncached(policy: Any, obs: dict[str, Any]) -> Callable[[], Any]:
    """pi0's sampler without the prefix cache: the joint prefix + expert forward at every step."""
    import torch

    from vlarl_cli.policies.pi0.processing import to_model_images

    inputs = {k: v.to(policy.device) if hasattr(v, "to") else v for k, v in policy.processor.prepare(obs).items()}
    images = to_model_images(inputs["images"], policy._dtype())
    cfg, b = policy.cfg, inputs["tokens"].shape[0]

    @torch.no_grad()
    def run() -> Any:
        x = torch.randn(b, cfg.action_horizon, cfg.max_action_dim, device=policy.device)
        for i in range(cfg.num_steps):
            t = torch.full((b,), 1.0 - i / cfg.num_steps, device=policy.device)
            _, feats = policy.joint_forward(images, inputs["image_masks"], inputs["tokens"], inputs["token_mask"],
                                            inputs["state"], x, t)
            x = x - policy.velocity_from_features(feats).float() / cfg.num_steps
        return x

    return run


def _rollout(policy: Any, family: str, envs: int, size: int, device: Any, repeats: int) -> dict[str, Any]:
    import torch

    obs = _obs(envs, size)
    with torch.no_grad():
        seconds = _timed(lambda: policy.sample(obs), device, repeats)
    out: dict[str, Any] = {"batch": envs, "sample_s": round(seconds, 4),
                           "samples_per_s": round(envs / seconds, 2)}
    if family.startswith("pi0"):
        uncached = _timed(_pi0_uncached(policy, obs), device, repeats)
        out.update(prefix_cache="on (sample_s) / off (uncached_s)", uncached_s=round(uncached, 4),
                   cache_speedup=round(uncached / seconds, 2))
    else:
        out["prefix_cache"] = "none in this family"
    return out


def _offload(policy: Any, optimizer: Any, device: Any) -> dict[str, Any]:
    from vlarl_cli.training.actor import offload_module, offload_optimizer_state

    if device.type != "cuda":
        return {"note": "device is the CPU: nothing moves"}
    start = time.perf_counter()
    offload_module(policy, "cpu")
    offload_optimizer_state(optimizer, "cpu")
    _sync(device)
    out_s = time.perf_counter() - start
    start = time.perf_counter()
    offload_module(policy, device)
    offload_optimizer_state(optimizer, device)
    _sync(device)
    return {"to_host_s": round(out_s, 3), "to_device_s": round(time.perf_counter() - start, 3)}


def part_family(family: str, smoke: bool) -> dict[str, Any]:
    import torch

    from vlarl_cli.training.actor import build_policy_for
    from vlarl_cli.training.common import build_optimizer
    from vlarl_cli.training.dry_run import build_meta_policy, plan_device_fit, refusal

    config, device = _family_config(family, smoke), _device(smoke)
    meta = build_meta_policy(config)  # the dry run's plan on this device, before anything is built on it
    fit = plan_device_fit(config, _device_bytes(device), meta)
    result: dict[str, Any] = {"recipe": FAMILIES[family], "micro_batch_choice": _fit_record(fit)}
    _progress(result)
    if fit.micro_batch is None:  # no halving can help: say so before building, with the fixes
        raise NoFit(refusal(config, fit))
    del meta
    start = time.perf_counter()
    policy = build_policy_for(config, device)
    _sync(device)
    result.update(build_s=round(time.perf_counter() - start, 2), parameters=sum(p.numel() for p in policy.parameters()),
                  dtype=str(next(policy.parameters()).dtype).removeprefix("torch."),
                  denoising_steps=config.actor.model.effective_denoising_steps)
    _progress(result)
    size = 64 if smoke else 224
    optimizer = build_optimizer(policy, config)
    update = _update_fitting(policy, optimizer, fit.micro_batch, size, device)
    pred = _prediction_from(fit.planned[update["micro_batch"]])
    if update["peak_bytes"]:
        pred["ratio"] = round(update["peak_bytes"] / pred["predicted_bytes"], 3)
    if pred["predicted_activation_bytes"]:
        pred["activation_ratio"] = round(update["kept_activation_bytes"] / pred["predicted_activation_bytes"], 3)
    result.update(update=update, memory=pred)
    _progress(result)
    envs = 2 if smoke else config.train_num_envs // max(1, config.rollout.pipeline_stage_num)
    result["rollout"] = _rollout(policy, family, envs, size, device, 1 if smoke else 2)
    _progress(result)
    result["offload"] = _offload(policy, optimizer, device)
    if device.type == "cuda":
        result["max_allocated_gib"] = round(torch.cuda.max_memory_allocated(device) / GIB, 2)
    return result


# ---------------------------------------------------------------------------------------------- attention
def _sdpa_case(dtype: Any, masked: bool, gqa: bool, device: Any) -> dict[str, Any]:
    """Which kernels run one attention of pi0's expert shape (51 queries over 611 keys, 8 heads of 256, 1 kv
    head with ``gqa``), and whether the default choice keeps the math kernel's tensors (its scores)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from vlarl_cli.policies.activations import saved_tensor_bytes

    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(4, 8, 51, 256, device=device, dtype=dtype, generator=g, requires_grad=True)
    k, v = (torch.randn(4, 1 if gqa else 8, 611, 256, device=device, dtype=dtype, generator=g, requires_grad=True)
            for _ in range(2))
    mask = torch.zeros(4, 1, 51, 611, device=device, dtype=dtype) if masked else None

    def call() -> Any:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

    kept: dict[str, Any] = {}
    for name in ("DEFAULT", "MATH", "EFFICIENT_ATTENTION", "FLASH_ATTENTION", "CUDNN_ATTENTION"):
        try:
            if name == "DEFAULT":
                kept[name] = saved_tensor_bytes(call, torch.nn.Module())[0]
            else:
                with sdpa_kernel(getattr(SDPBackend, name)):
                    kept[name] = saved_tensor_bytes(call, torch.nn.Module())[0]
        except (RuntimeError, AttributeError) as err:
            kept[name] = f"unavailable ({type(err).__name__})"
    chosen = [n for n in kept if n != "DEFAULT" and kept[n] == kept["DEFAULT"]]
    return {"kept_bytes": kept, "default_keeps_like": chosen}


def part_attention(smoke: bool) -> dict[str, Any]:
    """The attention kernel the device picks per dtype / mask / grouped-query case: the activation term keeps
    scores only where the math kernel runs (``policies/activations.py``)."""
    import torch

    device = _device(smoke)
    out: dict[str, Any] = {}
    for dtype in (torch.float32, torch.bfloat16):
        for masked in (False, True):
            for gqa in (False, True):
                key = f"{str(dtype).removeprefix('torch.')}_{'mask' if masked else 'nomask'}_{'gqa' if gqa else 'mha'}"
                out[key] = _sdpa_case(dtype, masked, gqa, device)
                _progress(out)
    return out


# ---------------------------------------------------------------------------------------------- libero
def part_libero(smoke: bool) -> dict[str, Any]:
    import numpy as np

    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec

    os.environ.setdefault("MUJOCO_GL", "egl")
    workers, resolution, steps = ((1,), 128, 5) if smoke else (WORKERS, 224, 30)
    out: dict[str, Any] = {"mujoco_gl": os.environ["MUJOCO_GL"], "resolution": resolution, "cameras": 2,
                           "cpus": os.cpu_count()}
    for n in workers:
        spec = VectorEnvSpec(suite="libero_spatial", task_ids=(0,), num_envs=n, num_workers=n, resolution=resolution,
                             cameras=("main", "wrist"), max_episode_steps=10_000)
        with LiberoVectorEnv(spec) as vec:
            start = time.perf_counter()
            vec.reset()
            first = time.perf_counter() - start
            actions = np.zeros((n, 1, 7), dtype=np.float32)
            start = time.perf_counter()
            for _ in range(steps):
                vec.step_chunk(actions)
            seconds = time.perf_counter() - start
        out[f"workers_{n}"] = {"env_steps_per_s": round(n * steps / seconds, 2), "first_reset_s": round(first, 2)}
        _progress(out)
    return out


# ---------------------------------------------------------------------------------------------- iteration
def iteration_recipe(smoke: bool, log: Path) -> tuple[str, list[str]]:
    """The recipe and overrides of the ``iteration`` part."""
    common = [f"runner.logger.log_path={log}", "runner.max_epochs=2", "runner.save_interval=-1",
              "runner.val_check_interval=-1"]
    if smoke:
        return "toy_reach_ppo", common
    return "libero_10_ppo_openpi", [
        *common, "actor.model.model_path=null", "actor.model.preset=full", "env.train.total_num_envs=16",
        "env.train.task_suite_name=libero_spatial", "env.eval.task_suite_name=libero_spatial",
        "env.train.max_steps_per_rollout_epoch=40", "env.train.max_episode_steps=40",
        "algorithm.rollout_epoch=1", "actor.global_batch_size=64", "actor.micro_batch_size=32"]


def part_iteration(smoke: bool) -> dict[str, Any]:
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.rl import train

    log = Path(tempfile.mkdtemp(prefix="gpu_truth_iteration_"))
    name, overrides = iteration_recipe(smoke, log)
    _progress({"log_path": str(log)})  # a run stopped at its time limit: spawn() reads how far it got there
    metrics = train(load_config(name, overrides)).last_metrics
    keys = {"iteration_s": "time/step", "collect_s": "time/generate_rollouts", "env_s": "time/env/env_interact_step",
            "inference_s": "time/rollout/predict", "actor_s": "time/actor_training",
            "env_steps_per_s": "time/env_steps_per_s"}
    out: dict[str, Any] = {"recipe": name, "overrides": overrides}
    out.update({k: round(float(metrics[m]), 4) for k, m in keys.items() if m in metrics})
    if "collect_s" in out and out.get("env_s") and out.get("inference_s"):
        # 1.0: env stepping and inference fully overlapped; 0.5: run one after the other
        out["pipelining_ratio"] = round(max(out["env_s"], out["inference_s"]) / out["collect_s"], 3)
    return out


# ---------------------------------------------------------------------------------------------- runner
def run_part(part: str, smoke: bool) -> dict[str, Any]:
    if part.startswith("family:"):
        return part_family(part.split(":", 1)[1], smoke)
    if part == "attention":
        return part_attention(smoke)
    if part == "libero":
        return part_libero(smoke)
    if part == "iteration":
        return part_iteration(smoke)
    raise ValueError(f"unknown part {part!r}; parts: {', '.join(PARTS)}")


def run_parts(parts: list[str], smoke: bool, result_file: Path) -> None:
    """Run ``parts`` one after the other in this process; each result (or its error) is written to
    ``result_file`` as soon as it is known, so a process killed at its time limit keeps what it finished."""
    import traceback

    import torch

    global _progress
    threads = torch.get_num_threads()
    if smoke:  # tiny models: one thread is fastest, and a shared CI machine is not oversubscribed
        torch.set_num_threads(1)
    results: dict[str, Any] = {}

    def write() -> None:
        tmp = result_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(results))
        tmp.replace(result_file)

    try:
        for part in parts:
            start = time.perf_counter()

            def progress(partial: dict[str, Any], part: str = part, start: float = start) -> None:
                results[part] = {**results.get(part, {}), "ok": False, "partial": True,
                                 **json.loads(json.dumps(partial, default=str)),
                                 "seconds": round(time.perf_counter() - start, 1)}
                write()

            _progress = progress
            try:
                results[part] = {"ok": True, **run_part(part, smoke)}
            except Exception as err:  # recorded (with what the part had measured), and the next part runs
                results[part] = {**results.get(part, {}), "ok": False, "error": f"{type(err).__name__}: {err}"[:1000],
                                 "traceback_tail": traceback.format_exc()[-1500:]}
            results[part]["seconds"] = round(time.perf_counter() - start, 1)
            write()
    finally:
        _progress = _no_progress
        torch.set_num_threads(threads)


def spawn(parts: list[str], smoke: bool, timeout: float) -> dict[str, Any]:
    """Run ``parts`` in a child process within ``timeout`` seconds: each part's JSON; a part the child did not
    finish (time limit, crash) gets the reason and the child's last output lines."""
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "parts.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", ",".join(parts), "--result", str(result_file)]
        cmd += ["--smoke"] if smoke else []
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            error, tail = f"the process ended with exit status {proc.returncode}", proc.stderr
        except subprocess.TimeoutExpired as err:
            out = err.stderr or b""
            error, tail = f"timed out after {timeout:.0f} s", out.decode(errors="replace") if isinstance(out, bytes) else out
        done = json.loads(result_file.read_text()) if result_file.exists() else {}
    unfinished = {p: {**done.get(p, {}), "ok": False, "error": error, "output_tail": tail[-1500:],
                      **_run_folder_tails(done.get(p, {}).get("log_path"))}
                  for p in parts if p not in done or done[p].get("partial")}
    return {**done, **unfinished}


def _run_folder_tails(log_path: str | None) -> dict[str, Any]:
    """The files an unfinished ``rl-train`` wrote (names and sizes, the last lines of its text files)."""
    if not log_path or not Path(log_path).is_dir():
        return {}
    files = sorted(f for f in Path(log_path).rglob("*") if f.is_file())
    tails = {str(f.relative_to(log_path)): f.read_text(errors="replace")[-600:] for f in files
             if f.suffix in (".log", ".jsonl", ".txt") and f.stat().st_size}
    return {"run_folder": {str(f.relative_to(log_path)): f.stat().st_size for f in files[:50]}, "run_tails": tails}


def environment() -> dict[str, Any]:
    import importlib.metadata as md

    import torch

    versions = {}
    for name in ("torch", "transformers", "vlarl", "mujoco", "robosuite", "libero", "pydantic", "numpy"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    memory = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None
    return {"device": device, "device_memory_bytes": memory, "cuda": torch.version.cuda, "python": platform.python_version(),
            "arch": platform.machine(), "cpus": os.cpu_count(), "versions": versions,
            "git": _git_commit()}


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _timeouts(spec: list[str], smoke: bool) -> dict[str, float]:
    """Each part's limit; ``--timeouts`` takes ``PART=SECONDS`` or ``KIND=SECONDS`` (``family=60``: every family)."""
    limits = {k: float(SMOKE_TIMEOUT if smoke else v) for k, v in TIMEOUTS.items()}
    for item in spec:
        key, _, value = item.partition("=")
        matched = [k for k in limits if k == key or k.split(":")[0] == key]
        if not matched or not value:
            raise SystemExit(f"--timeouts takes PART=SECONDS or KIND=SECONDS with PART one of {', '.join(limits)} "
                             f"and KIND one of attention, family, libero, iteration; got {item!r}")
        limits.update({k: float(value) for k in matched})
    return limits


def planned_seconds(parts: list[str] | tuple[str, ...], limits: dict[str, float]) -> float:
    """The longest the parts can take together (each at its time limit)."""
    return sum(limits[p] for p in parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny presets on CPU, quick")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, from: {', '.join(PARTS)}")
    parser.add_argument("--timeouts", nargs="*", default=[], help="PART=SECONDS or KIND=SECONDS (family=60: every family part)")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "out")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_parts(args.child.split(","), args.smoke, args.result)
        return
    parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    limits = _timeouts(args.timeouts, args.smoke)
    report: dict[str, Any] = {"benchmark": "gpu_truth", "smoke": args.smoke, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              **environment(), "settings": {"parts": parts, "timeouts_s": limits}, "parts": {}}
    if args.smoke:  # one process for everything: the imports are most of a tiny run's time
        report["parts"] = spawn(parts, True, planned_seconds(parts, limits))
    for part in [] if args.smoke else parts:  # one process per part: its own memory, its own time limit
        report["parts"].update(spawn([part], False, limits[part]))
    report["failed"] = [p for p, r in report["parts"].items() if not r["ok"]]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _bench  # versions, cores and load average beside the figures, as every benchmark

    report["machine"] = _bench.machine()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    name = f"gpu_truth{'_smoke' if args.smoke else ''}_{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json"
    (args.out_dir / name).write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
