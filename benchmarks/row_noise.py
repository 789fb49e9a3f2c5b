"""Cost of per-env sampling streams (policies.noise.RowGenerator) against one batched generator.

    python benchmarks/row_noise.py [--envs 64] [--horizon 50] [--dim 32] [--steps 10]

Times the random draws of one flow-policy ``sample`` call (initial noise, denoise index, one transition
noise per step) for a batch of ``--envs`` envs, and the whole tiny-pi0 ``sample`` with either generator.
Prints one JSON line; the ratios say what batch-split invariance costs.
"""

from __future__ import annotations

import argparse
import time

import torch

from _bench import add_smoke, emit


def _draws(generator, b: int, h: int, d: int, steps: int) -> None:
    from vlarl_cli.policies import noise

    noise.randn((b, h, d), generator)
    noise.randint(steps, (b,), generator)
    for _ in range(steps):
        noise.randn((b, h, d), generator)


def _best(fn, repeats: int = 20) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--horizon", type=int, default=50)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.envs, args.horizon, args.steps = 2, 5, 1
    torch.set_num_threads(1)
    from vlarl_cli import keys
    from vlarl_cli.policies.noise import RowGenerator
    from vlarl_cli.policies.pi0.config import preset
    from vlarl_cli.policies.pi0.policy import Pi0Policy

    b = args.envs
    rows = RowGenerator.from_seeds(range(b))
    plain = torch.Generator().manual_seed(0)
    draws_rows = _best(lambda: _draws(rows, b, args.horizon, args.dim, args.steps))
    draws_plain = _best(lambda: _draws(plain, b, args.horizon, args.dim, args.steps))

    policy = Pi0Policy(preset("tiny", "pi0")).eval()
    g = torch.Generator().manual_seed(0)
    obs = {keys.MAIN_IMAGES: torch.randint(0, 256, (b, 64, 64, 3), dtype=torch.uint8, generator=g),
           keys.WRIST_IMAGES: torch.randint(0, 256, (b, 64, 64, 3), dtype=torch.uint8, generator=g),
           keys.STATES: torch.randn(b, 8, generator=g), keys.TASK_DESCRIPTIONS: ["pick up the bowl"] * b}
    sample_rows = _best(lambda: policy.sample(obs, generator=rows), 5)
    sample_plain = _best(lambda: policy.sample(obs, generator=plain), 5)
    emit({
        "benchmark": "row_noise", "envs": b, "horizon": args.horizon, "dim": args.dim, "steps": args.steps,
        "draws_row_s": draws_rows, "draws_batched_s": draws_plain, "draws_row_over_batched": draws_rows / draws_plain,
        "tiny_pi0_sample_row_s": sample_rows, "tiny_pi0_sample_batched_s": sample_plain,
        "tiny_pi0_sample_row_over_batched": sample_rows / sample_plain,
    }, smoke=args.smoke)


if __name__ == "__main__":
    main()
