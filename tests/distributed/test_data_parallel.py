"""2 gloo processes train exactly like 1 process with the same global batch: data parallel and FSDP2.

Each rank holds half of every mini-batch (rows r::2 of a fixed rollout); gradients are averaged over the
ranks (all-reduce, or FSDP2's reduce-scatter), so losses, metrics and the final weights must equal the
single-process update on the whole batch. All masks are valid, so per-rank token means average to the
global mean exactly (up to float summation order).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as torch_dist
import torch.multiprocessing as mp

from vlarl_cli import keys
from vlarl_cli.policies.flow_matching import FlowConfig
from vlarl_cli.policies.toy import ToyFlowPolicy
from vlarl_cli.training.update import RolloutBatch, UpdateSettings, ppo_update

N = 16


def _settings(global_batch: int, micro: int) -> UpdateSettings:
    return UpdateSettings(update_epoch=1, global_batch_size=global_batch, micro_batch_size=micro,
                          clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, value_clip=0.2,
                          huber_delta=10.0, entropy_bonus=0.0, kl_beta=0.0, kl_type="kl",
                          logprob_type="action_level", loss_agg="token-mean", clip_grad=1.0)


def _policy_and_batch() -> tuple[ToyFlowPolicy, RolloutBatch]:
    policy = ToyFlowPolicy(state_dim=4, action_dim=2, chunk=3, flow=FlowConfig(num_steps=3), seed=0)
    g = torch.Generator().manual_seed(5)
    obs = {keys.STATES: torch.randn(N, 4, generator=g)}
    with torch.no_grad():
        out = policy.sample(obs)
    # a perturbed copy of the weights acts as "old policy" so ratios differ from 1 and clipping happens
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return policy, RolloutBatch(
        replay=out.replay, old_logprobs=out.logprobs, advantages=torch.randn(N, generator=g),
        loss_mask=torch.ones(N, 3, dtype=torch.bool), old_values=out.values.detach(),
        returns=torch.randn(N, generator=g))


def _run(rank: int, world: int, port: int, mode: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch_dist.init_process_group("gloo", rank=rank, world_size=world)
    from vlarl_cli.distributed import dist, fsdp

    policy, batch = _policy_and_batch()
    local = batch.select(torch.arange(rank, N, world))
    grad_sync = dist.gradient_all_reduce
    if mode == "fsdp":
        fsdp.shard_model(policy, device=torch.device("cpu"), class_names=[])
        grad_sync = None
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    metrics = ppo_update(policy, optimizer, local, _settings(N // world, N // world // 2),
                         generator=torch.Generator().manual_seed(0), grad_sync=grad_sync)
    names = sorted(k for k in metrics if isinstance(metrics[k], float))
    values = torch.tensor([metrics[k] for k in names], dtype=torch.float64)
    dist.all_reduce_mean_(values)
    state = fsdp.full_model_state(policy)
    if rank == 0:
        torch.save({"metrics": dict(zip(names, values.tolist(), strict=True)), "state": state},
                   Path(out_dir) / f"{mode}.pt")
    torch_dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("mode", ["data_parallel", "fsdp"])
def test_two_processes_equal_one(mode: str, tmp_path: Path) -> None:
    policy, batch = _policy_and_batch()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    # micro-batches are N/4 in both runs; the gradient of one big batch is the same either way
    single = ppo_update(policy, optimizer, batch, _settings(N, N // 4), generator=torch.Generator().manual_seed(0))
    mp.start_processes(_run, args=(2, _free_port(), mode, str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    result = torch.load(tmp_path / f"{mode}.pt", weights_only=True)
    # per-rank means average to the global mean; sums and counters are compared separately
    for key in ("actor/policy_loss", "actor/value_loss", "actor/approx_kl", "actor/pg_clipfrac", "actor/ratio",
                "actor/loss"):
        assert result["metrics"][key] == pytest.approx(single[key], rel=1e-5, abs=1e-7), key
    assert result["metrics"]["actor/grad_norm"] == pytest.approx(single["actor/grad_norm"], rel=1e-5)
    reference = policy.state_dict()
    assert result["state"].keys() == reference.keys()
    for name, tensor in reference.items():
        torch.testing.assert_close(result["state"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)
