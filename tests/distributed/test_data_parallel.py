"""2 gloo processes train exactly like 1 process with the same global batch: data parallel and FSDP2.

The batch is laid out like the runner's (row = slot * N + env, slots = chunk steps); rank r holds envs
[r N/2, (r+1) N/2) of every slot. Every env gives each mini-batch the same number of its slots (in an
order seeded by its global env id), the loss denominators and the metrics are reduced over the ranks (``CrossRank``), gradients are averaged (all-reduce, or FSDP2's reduce-scatter),
so with several mini-batches per epoch and partly masked samples the losses, metrics and final weights
must equal the single-process update on the whole batch (up to float summation order). Without the
reductions the policy loss differs by about 2x (checked by hand when this test was written).
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

SLOTS, ENVS = 4, 8  # 4 chunk steps x 8 envs
N = SLOTS * ENVS
GLOBAL_BATCH = 2 * ENVS  # 2 mini-batches per epoch, 2 slots each


def _settings(global_batch: int, micro: int) -> UpdateSettings:
    return UpdateSettings(update_epoch=2, global_batch_size=global_batch, micro_batch_size=micro,
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
    mask = torch.rand(N, 3, generator=g) > 0.3  # partly masked: per-rank counts differ
    return policy, RolloutBatch(
        replay=out.replay, old_logprobs=out.logprobs, advantages=torch.randn(N, generator=g),
        loss_mask=mask, old_values=out.values.detach(), returns=torch.randn(N, generator=g))


def _rank_rows(rank: int, world: int) -> torch.Tensor:
    """Rows of this rank's envs in every slot, in the local layout slot * (ENVS / world) + local env."""
    local = ENVS // world
    return (torch.arange(SLOTS).unsqueeze(1) * ENVS + rank * local + torch.arange(local)).reshape(-1)


def _run(rank: int, world: int, port: int, mode: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch_dist.init_process_group("gloo", rank=rank, world_size=world)
    from vlarl_cli.distributed import dist, fsdp

    policy, batch = _policy_and_batch()
    local = batch.select(_rank_rows(rank, world))
    grad_sync = dist.gradient_all_reduce
    if mode == "fsdp":
        fsdp.shard_model(policy, device=torch.device("cpu"), class_names=[])
        grad_sync = None
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    metrics = ppo_update(policy, optimizer, local, _settings(GLOBAL_BATCH // world, GLOBAL_BATCH // world // 2),
                         generator=torch.Generator().manual_seed(0), grad_sync=grad_sync,
                         reduce=dist.CrossRank(),
                         env_columns=range(rank * ENVS // world, (rank + 1) * ENVS // world))
    state = fsdp.full_model_state(policy)
    torch.save({"metrics": metrics, "state": state}, Path(out_dir) / f"{mode}_{rank}.pt")
    torch_dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("mode", ["data_parallel", "fsdp"])
def test_two_processes_equal_one(mode: str, tmp_path: Path) -> None:
    policy, batch = _policy_and_batch()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    # micro-batches are GLOBAL_BATCH/4 in both runs; the gradient of one big batch is the same either way
    single = ppo_update(policy, optimizer, batch, _settings(GLOBAL_BATCH, GLOBAL_BATCH // 4),
                        generator=torch.Generator().manual_seed(0), env_columns=range(ENVS))
    assert single["train/actor/optimizer_steps"] == 4.0  # 2 epochs x 2 mini-batches
    assert 0 < single["train/actor/clip_fraction"] < 1  # the clipped branch is exercised
    mp.start_processes(_run, args=(2, _free_port(), mode, str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    result = torch.load(tmp_path / f"{mode}_0.pt", weights_only=True)
    other = torch.load(tmp_path / f"{mode}_1.pt", weights_only=True)
    # every rank reports the metrics of the whole batch
    assert result["metrics"].keys() == single.keys()
    for key, value in single.items():
        assert result["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
        assert other["metrics"][key] == pytest.approx(result["metrics"][key], rel=1e-9, abs=1e-12), key
    reference = policy.state_dict()
    assert result["state"].keys() == reference.keys()
    for name, tensor in reference.items():
        torch.testing.assert_close(result["state"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)
