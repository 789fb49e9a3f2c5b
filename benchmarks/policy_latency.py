"""pi0 policy latency on CPU: cached vs uncached denoising, and evaluate cost. Prints ONE JSON line.

    python benchmarks/policy_latency.py                      # tiny + small presets, K = 1, 4, 10
    python benchmarks/policy_latency.py --presets tiny --steps 4 --batch 8 --threads 2

For each preset (pi0 variant, random weights) and each K:
  * ``cached_s``: prefix encoded once, then K expert-only passes (what ``Pi0Policy.sample`` does);
  * ``uncached_s``: the joint prefix + expert pass recomputed at every step (openpi's training forward);
  * ``speedup`` = uncached / cached, and ``bound_s`` = prefix_s + K * expert_step_s, the cost the cached
    path should not exceed (the target: "at most prefix + K x expert").
Plus ``build_s`` (construction with random init, imports excluded), ``sample_s`` (end-to-end ``sample`` with image resizing and tokenisation, K = the preset's
default 4) and ``evaluate_per_sample_s`` (``evaluate`` forward + backward of the log-prob sum, per
sample). Times are medians over ``--repeats`` runs, in seconds.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from _bench import add_smoke, emit


def _median_time(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_preset(name: str, batch: int, steps: list[int], repeats: int) -> dict[str, Any]:
    from vlarl_cli import keys
    from vlarl_cli.policies.pi0.config import preset
    from vlarl_cli.policies.pi0.policy import Pi0Policy

    Pi0Policy(preset(name, "pi0", num_steps=4))  # warm-up: pays the one-off transformers imports
    t0 = time.perf_counter()
    policy = Pi0Policy(preset(name, "pi0", num_steps=4)).eval()
    build_s = time.perf_counter() - t0
    cfg = policy.cfg
    g = torch.Generator().manual_seed(0)
    s = cfg.image_size
    images = torch.rand(batch, 2, 3, s, s, generator=g) * 2 - 1
    masks = torch.ones(batch, 2, dtype=torch.bool)
    tokens = torch.randint(4, 260, (batch, cfg.max_token_len), generator=g)
    tmask = torch.zeros(batch, cfg.max_token_len, dtype=torch.bool)
    tmask[:, :12] = True
    state = torch.randn(batch, cfg.max_state_dim, generator=g)
    noise = torch.randn(batch, cfg.action_horizon, cfg.max_action_dim, generator=g)
    t_half = torch.full((batch,), 0.5)

    out: dict[str, Any] = {"parameters": policy.num_parameters(), "build_s": round(build_s, 4),
                           "prefix_tokens": 2 * cfg.tokens_per_image + cfg.max_token_len}
    with torch.no_grad():
        prefix_s = _median_time(lambda: policy.encode_prefix(images, masks, tokens, tmask), repeats)
        cache = policy.expert_cache(policy.encode_prefix(images, masks, tokens, tmask))
        expert_s = _median_time(lambda: policy.expert_forward(cache, state, noise, t_half), repeats)

        def uncached(k: int) -> torch.Tensor:
            x = noise
            for i in range(k):
                t = torch.full((batch,), 1.0 - i / k)
                _, feats = policy.joint_forward(images, masks, tokens, tmask, state, x, t)
                x = x - policy.velocity_from_features(feats) / k
            return x

        per_k = {}
        for k in steps:
            cached_s = _median_time(lambda k=k: policy.sample_actions(images, masks, tokens, tmask, state, noise,
                                                                      num_steps=k), repeats)
            uncached_s = _median_time(lambda k=k: uncached(k), repeats)
            per_k[str(k)] = {"cached_s": round(cached_s, 5), "uncached_s": round(uncached_s, 5),
                             "speedup": round(uncached_s / cached_s, 3),
                             "bound_s": round(prefix_s + k * expert_s, 5)}
    out.update({"prefix_s": round(prefix_s, 5), "expert_step_s": round(expert_s, 5), "steps": per_k})

    raw = torch.randint(0, 256, (batch, 256, 256, 3), generator=g, dtype=torch.uint8)
    obs = {keys.MAIN_IMAGES: raw, keys.WRIST_IMAGES: raw.flip(1), keys.STATES: torch.randn(batch, 8, generator=g),
           keys.TASK_DESCRIPTIONS: ["put the black bowl on the plate"] * batch}
    out["sample_s"] = round(_median_time(lambda: policy.sample(obs), repeats), 5)
    replay = policy.sample(obs).replay

    def evaluate() -> None:
        policy.zero_grad(set_to_none=True)
        ev = policy.evaluate(replay)
        (ev.logprobs.sum() + ev.values.sum()).backward()

    policy.train()
    out["evaluate_per_sample_s"] = round(_median_time(evaluate, repeats) / batch, 5)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--steps", default="1,4,10", help="comma-separated denoising step counts K")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    add_smoke(ap)
    args = ap.parse_args()
    if args.smoke:
        args.presets, args.steps, args.batch, args.repeats = "tiny", "1", 1, 1
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    steps = [int(k) for k in args.steps.split(",")]
    results = {name: bench_preset(name, args.batch, steps, args.repeats) for name in args.presets.split(",")}
    emit({"benchmark": "policy_latency", "family": "pi0", "variant": "pi0", "batch": args.batch,
          "threads": args.threads, "arch": platform.machine(), "results": results}, smoke=args.smoke)


if __name__ == "__main__":
    main()
