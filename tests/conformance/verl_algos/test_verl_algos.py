"""vlarl's RLOO, GRPO / Dr.GRPO, vanilla and GSPO losses and DAPO's group filter against verl 0.9.1's own code.

verl's side (``run_verl.py``) runs ``verl/trainer/ppo/core_algos.py`` from the PyPI wheel in the isolated venv
of ``scripts/reference/rlinf_models.sh`` on the same inputs. The layouts differ and are mapped here: verl
holds ``[sequences, tokens]``; vlarl holds chunk steps ``t``-major (row ``t * B + b``) with a trajectory id
per row, so verl's sequence ``b`` is vlarl's trajectory ``b`` and its token ``t`` the chunk step ``t``.

Cases: 3 groups of 4 episodes of 6 chunk steps ending at different steps (one group all equal: zero
advantage, dropped by DAPO); losses on 6 sequences of 5 units with trailing masked units and log-ratios
of +-25 (vanilla's [-20, 20] clamp binds) and a trajectory whose mean log-ratio exceeds 10 (GSPO's clamp
binds), each policy loss under every ``loss_agg_mode``: value, gradient with respect to the current
log-probs, clip fraction, approx KL, dual-clip fraction. Both run float32 on the CPU with the same formulas;
measured differences (float32 rounding of different summation orders): advantages <= 7.5e-8, vanilla <= 1.1e-7
absolute, GSPO <= 4.6e-7 relative (6.1e-5 absolute on values of ~1e2 at its clamp); asserted 1e-6 absolute
plus 1e-6 relative.
"""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import pytest
import torch

from vlarl_cli.algorithms.advantages import compute_advantages, episode_scores, loss_mask_from_dones
from vlarl_cli.algorithms.losses import get_policy_loss_fn, loss_weights
from vlarl_cli.training.rollout import Rollout
from vlarl_cli.training.sampling import group_signal

ROOT = Path(__file__).resolve().parents[3]
PYTHON = ROOT / ".reference" / "rlinf_models" / "bin" / "python"
RUNNER = Path(__file__).with_name("run_verl.py")
ATOL = 1e-6
RTOL = 1e-6  # GSPO at its clamp: exp(10) x advantages ~ 1e2, float32 relative rounding ~ 1e-7
AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
T, B, G, C = 6, 12, 4, 2  # chunk steps, envs, group size, env steps per chunk


def _reference() -> Path:
    if not PYTHON.is_file():
        if os.environ.get("VLARL_REQUIRE_REFERENCE") == "1":
            pytest.fail(f"{PYTHON} is missing; build it with: bash scripts/reference/rlinf_models.sh")
        pytest.skip("verl reference environment missing: bash scripts/reference/rlinf_models.sh")
    return PYTHON


def _episodes() -> tuple[torch.Tensor, torch.Tensor]:
    """Per-step rewards ``[T, B, C]`` and dones ``[T+1, B, C]``: success rewards of different sizes at
    different steps, episodes ending mid-chunk, group 2 all failures."""
    rewards = torch.zeros(T, B, C)
    dones = torch.zeros(T + 1, B, C, dtype=torch.bool)
    ends = {0: (2, 1, 1.0), 1: (4, 0, 0.5), 3: (1, 1, 1.0), 4: (5, 1, 1.0), 5: (3, 0, 1.0), 6: (2, 0, 0.5),
            7: (5, 0, 1.0)}  # env: (chunk step, step in chunk, reward)
    for env, (t, c, r) in ends.items():
        rewards[t, env, c] = r
        flat = dones[1:].permute(1, 0, 2).reshape(B, T * C)
        flat[env, t * C + c:] = True
        dones[1:] = flat.reshape(B, T, C).permute(1, 0, 2)
    return rewards, dones


def _rollout(rewards: torch.Tensor, dones: torch.Tensor) -> Rollout:
    zeros = torch.zeros(T, B, C)
    return Rollout(replay={}, logprobs=torch.zeros(T, B, C, 1), values=torch.zeros(T + 1, B), rewards=rewards,
                   dones=dones, truncated=zeros.bool(), final_values=torch.zeros(T, B), success=zeros.bool())


def _loss_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    b, length = 6, 5
    mask = torch.ones(b, length)
    mask[1, 3:] = mask[4, 2:] = 0.0
    old = torch.randn(b, length, generator=g) - 2.0
    log_prob = old + 0.3 * torch.randn(b, length, generator=g)
    log_prob[0, 1], log_prob[2, 4] = old[0, 1] + 25.0, old[2, 4] - 25.0  # vanilla's clamp binds
    log_prob[3] = old[3] + torch.tensor([12.0, 11.0, 13.0, 10.5, 12.5])  # GSPO's clamp at 10 binds
    adv = torch.randn(b, 1, generator=g).expand(b, length).contiguous()
    adv[5] = -adv[5].abs() - 0.5  # negative advantages: the dual clip binds where the ratio is large
    log_prob[5, 0] = old[5, 0] + 2.0
    return {"log_prob": log_prob, "old_log_prob": old, "advantages": adv, "loss_mask": mask}


@pytest.fixture(scope="module")
def verl(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    python = _reference()
    rewards, dones = _episodes()
    chunk_rewards, chunk_dones = rewards.sum(-1), dones.any(-1)
    mask = loss_mask_from_dones(chunk_dones)  # [T, B]
    scores = episode_scores(chunk_rewards, mask)
    cases = [{"loss": loss, "agg": agg, "low": 0.2, "high": 0.28, "c": 3.0}
             for loss in ("vanilla", "gspo") for agg in AGGS]
    inputs = {"token_level_rewards": (chunk_rewards * mask).T.contiguous(), "response_mask": mask.T.float(),
              "index": torch.arange(B) // G, "loss_cases": cases, "group_scores": scores.view(-1, G),
              **_loss_inputs()}
    tmp = tmp_path_factory.mktemp("verl")
    torch.save(inputs, tmp / "in.pt")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    proc = subprocess.run([str(python), str(RUNNER), str(tmp / "in.pt"), str(tmp / "out.pt")], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(tmp / "out.pt")


@pytest.mark.parametrize(("name", "normalize"), [("grpo", True), ("drgrpo", True), ("rloo", False)])
def test_outcome_advantages_equal_verl(verl: dict[str, torch.Tensor], name: str, normalize: bool) -> None:
    rewards, dones = _episodes()
    res = compute_advantages(name, rewards.sum(-1), dones.any(-1), group_size=G, normalize=normalize)
    torch.testing.assert_close(res.advantages.T, verl[f"adv_{name}"], atol=ATOL, rtol=0)
    assert (res.advantages[:, 8:] == 0).all()  # the all-failure group has no signal under every estimator


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("loss", ["vanilla", "gspo"])
def test_policy_losses_equal_verl(verl: dict[str, torch.Tensor], loss: str, agg: str) -> None:
    data = _loss_inputs()
    b, length = data["log_prob"].shape

    def rows(x: torch.Tensor) -> torch.Tensor:  # verl [B, L] -> vlarl rows t * B + b
        return x.T.reshape(-1)

    logp = rows(data["log_prob"]).clone().requires_grad_(True)
    mask = rows(data["loss_mask"]).bool()
    valid_fraction = rows((data["loss_mask"].sum(1, keepdim=True) / length).expand(b, length))
    weight, den = loss_weights(mask, agg, valid_fraction=valid_fraction, steps_per_trajectory=length)
    clamp = {"log_ratio_min": -math.inf, "log_ratio_max": 10.0} if loss == "gspo" else {}
    value, m = get_policy_loss_fn(loss)(logp, rows(data["old_log_prob"]), rows(data["advantages"]), weight, den,
                                        clip_ratio_low=0.2, clip_ratio_high=0.28,
                                        clip_ratio_c=3.0 if loss == "vanilla" else None,
                                        trajectory=torch.arange(b).repeat(length), **clamp)
    value.backward()
    key = f"{loss}|{agg}"
    torch.testing.assert_close(value.detach(), verl[f"loss|{key}"], atol=ATOL, rtol=RTOL)
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad.view(length, b).T, verl[f"grad|{key}"], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(m["clipfrac"], verl[f"actor/pg_clipfrac|{key}"], atol=ATOL, rtol=0)
    torch.testing.assert_close(m["approx_kl"], verl[f"actor/ppo_kl|{key}"], atol=ATOL, rtol=RTOL)
    if loss == "vanilla":
        torch.testing.assert_close(m["dual_clipfrac"], verl[f"actor/pg_clipfrac_lower|{key}"], atol=ATOL, rtol=0)


def test_dynamic_sampling_keeps_the_groups_dapo_keeps(verl: dict[str, torch.Tensor]) -> None:
    signal = group_signal(_rollout(*_episodes()), G, auto_reset=False, reward_type="chunk_level")
    assert signal.tolist() == [True, True, False]
    assert torch.equal(signal, ~verl["dapo_dropped"])
