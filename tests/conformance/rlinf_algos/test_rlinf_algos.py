"""vlarl's RL core against RLinf 0.3.0's own algorithm functions, on a generated grid of rollouts.

RLinf's side (``run_rlinf.py``) runs ``rlinf/algorithms`` and ``compute_loss_mask`` from the PyPI wheel in the
isolated venv of ``scripts/reference/rlinf_models.sh``, called as its embodied actor calls them. The grid:
rollouts of ``T`` = 4 chunks of ``C`` = 3 steps for 8 envs (2 groups of 4) whose episodes end at the first,
middle and last step of a chunk or not at all, with and without auto-reset (without: RLinf's loss masks and
valid-step counts); GAE, GRPO, raw and REINFORCE++ at chunk and action level; the actor loss at token, action
and chunk level x chunk- and action-level rewards (the four layouts RLinf can run: chunk-level log-probs with
action-level rewards do not broadcast in RLinf), with a log-ratio clamp and the dual clip that bind, the value
loss, and every KL estimator. Compared: loss masks, advantages, returns, loss values, gradients with respect
to the per-element log-probs and the values, clip fraction, approx KL.

With auto-reset vlarl's outcome estimators score the whole rollout (every step valid); RLinf's cannot run
there (they need a loss mask), so those are compared without auto-reset only.

Equal (float32 rounding: measured <= 2.4e-7 absolute, asserted 2e-6) except three differences,
each deliberate and asserted here as the exact relation:

1. ``seq-mean-token-mean`` at chunk level when an episode ends inside a chunk: RLinf weighs a unit by
   ``max_episode_steps / valid_env_steps``, vlarl by ``T / valid_chunks`` (every trajectory counts once); the
   test rebuilds RLinf's value from vlarl's functions with RLinf's weights.
2. RLinf's loss with a loss mask but no valid-step counts (``filter_rewards`` with auto-reset) divides by a count
   of ``[N, 1]`` / ``[N, C, 1]`` mask entries: its loss (and gradient) is ``C * A``, ``C`` or ``A`` times vlarl's
   mean in the chunk-reward/token, chunk-reward/action and action-reward/token layouts; and its clip fraction
   and approx KL are that many times too large wherever such a mask reaches them (``losses.py``, "Counts").
3. REINFORCE++: RLinf puts the whole first-episode score at the episode's last valid step (so every earlier step
   gets it), does not discount, and standardises with the population variance and no epsilon; vlarl's
   return-to-go (discounted by ``algorithm.gamma``; 1 here) equals that score when the only reward is the
   episode's last, and it standardises with the unbiased std + 1e-5: asserted
   as ``vlarl = RLinf * std_population / (std_unbiased + 1e-5)``. (RLinf's embodied reinpp runs only with
   ``group_size`` equal to the batch: it scatters ``[B / group_size, group_size]`` scores into ``[T, B]``.)
"""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from vlarl_cli.algorithms.advantages import (
    aggregate_dones,
    aggregate_rewards,
    compute_advantages,
    loss_mask_from_dones,
    trajectory_valid_fraction,
)
from vlarl_cli.algorithms.losses import (
    aggregate_logprobs,
    kl_penalty,
    loss_weights,
    mask_to_unit,
    ppo_actor_loss,
    to_unit,
    value_loss,
)

ROOT = Path(__file__).resolve().parents[3]
PYTHON = ROOT / ".reference" / "rlinf_models" / "bin" / "python"
RUNNER = Path(__file__).with_name("run_rlinf.py")
T, B, C, A, G = 4, 8, 3, 2, 4
M = T * C  # max_episode_steps
ATOL, RTOL = 2e-6, 0.0  # measured <= 2.4e-7 (float32 rounding)
LAYOUTS = [("token_level", "chunk_level"), ("action_level", "chunk_level"), ("chunk_level", "chunk_level"),
           ("token_level", "action_level"), ("action_level", "action_level")]  # (logprob_type, reward_type)
#: units per sample of each logprob_type: RLinf's loss with a [N, 1] mask and no counts is this many times
#: vlarl's (difference 2)
UNITS = {"token_level": C * A, "action_level": C, "chunk_level": 1}


def _reference() -> Path:
    if not PYTHON.is_file():
        if os.environ.get("VLARL_REQUIRE_REFERENCE") == "1":
            pytest.fail(f"{PYTHON} is missing; build it with: bash scripts/reference/rlinf_models.sh")
        pytest.skip("RLinf reference environment missing: bash scripts/reference/rlinf_models.sh")
    return PYTHON


def _rollout(end_only: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rewards ``[T, B, C]``, dones ``[T+1, B, C]`` and values ``[T+1, B, C]``: episodes ending at steps 1, 4, 5,
    6, 8, 11 (first, middle, last step of a chunk) or never; success 1 at some ends; a -0.05 step penalty
    unless ``end_only``; the steps after an end keep the done (no auto-reset) and reward 0."""
    g = torch.Generator().manual_seed(0)
    ends = {0: (1, 1.0), 1: (4, 0.0), 2: (5, 1.0), 3: (None, 0.0), 4: (6, 1.0), 5: (8, 1.0), 6: (11, 0.0),
            7: (None, 0.0)}
    flat_r, flat_d = torch.zeros(B, M), torch.zeros(B, M, dtype=torch.bool)
    for env, (end, r) in ends.items():
        stop = M if end is None else end + 1
        flat_r[env, :stop] = 0.0 if end_only else -0.05
        if end is not None:
            flat_r[env, end] += r
            flat_d[env, end:] = True
    rewards = flat_r.view(B, T, C).permute(1, 0, 2).contiguous()
    dones = torch.cat([torch.zeros(1, B, C, dtype=torch.bool), flat_d.view(B, T, C).permute(1, 0, 2)])
    values = torch.randn(T + 1, B, C, generator=g)
    return rewards, dones, values


def _advantage_cases() -> list[dict[str, Any]]:
    rewards, dones, values = _rollout()
    cases = []
    for adv, level, auto in itertools.product(("gae", "grpo", "raw", "reinpp"), ("chunk_level", "action_level"),
                                               (True, False)):
        if (adv != "gae" and auto) or (adv == "reinpp" and level == "action_level"):
            continue  # RLinf's outcome estimators need a loss mask, i.e. no auto-reset
        r, _, _ = _rollout(end_only=adv == "reinpp")
        cases.append({"kind": "advantages", "adv_type": adv, "reward_type": level, "auto_reset": auto,
                      "rewards": r if adv == "reinpp" else rewards, "dones": dones, "gamma": 0.9, "gae_lambda": 0.8,
                      # RLinf's embodied reinpp scatters [B / group_size, group_size] scores into a [T, B]
                      # matrix: it runs only with group_size = B (its baseline is off, so the size is unused)
                      "group_size": B if adv == "reinpp" else G, **({"values": values if level == "action_level" else values[..., :1]}
                                          if adv == "gae" else {})})
    return cases


def _loss_cases() -> list[dict[str, Any]]:
    _, dones, _ = _rollout()
    g = torch.Generator().manual_seed(1)
    n = T * B
    cases = []
    for (lp, level), mode in itertools.product(LAYOUTS, ("auto_reset", "masks", "mask_only")):
        old = torch.randn(n, C, A, generator=g) - 1.0
        logp = old + 0.8 * torch.randn(n, C, A, generator=g)
        adv = torch.randn(n, 1 if level == "chunk_level" else C, generator=g)
        # a critic where its values fit the units; never with the group filter (a GRPO feature)
        critic = mode != "mask_only" and (lp == "chunk_level" or (lp, level) == ("action_level", "action_level"))
        vshape = (n,) if level == "chunk_level" else (n, C)
        case = {"kind": "loss", "logprob_type": lp, "reward_type": level, "mode": mode, "auto_reset": mode != "masks",
                "dones": dones, "action_dim": A, "logprobs": logp, "old_logprobs": old, "advantages": adv,
                "clip_low": 0.2, "clip_high": 0.28, "clip_c": 3.0, "log_ratio_min": -1.5, "log_ratio_max": 1.5,
                "max_episode_steps": M, "loss_type": "actor_critic" if critic else "actor"}
        if critic:
            case.update(values_new=torch.randn(vshape, generator=g), prev_values=torch.randn(vshape, generator=g),
                        returns=torch.randn(vshape, generator=g), value_clip=0.2, huber_delta=1.0)
        cases.append(case)
    return cases


def _kl_cases() -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(2)
    lp, ref = torch.randn(16, generator=g), torch.randn(16, generator=g) * 3
    return [{"kind": "kl", "logprob": lp, "ref_logprob": ref, "kl_type": k}
            for k in ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")]


@pytest.fixture(scope="module")
def rlinf(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, torch.Tensor]]:
    python = _reference()
    cases = _advantage_cases() + _loss_cases() + _kl_cases()
    tmp = tmp_path_factory.mktemp("rlinf")
    torch.save(cases, tmp / "cases.pt")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    proc = subprocess.run([str(python), str(RUNNER), str(tmp / "cases.pt"), str(tmp / "out.pt")], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(tmp / "out.pt")


def _close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    torch.testing.assert_close(ours.double(), theirs.double(), atol=ATOL, rtol=RTOL)


def test_loss_masks_equal_rlinf(rlinf: list[dict[str, torch.Tensor]]) -> None:
    _, dones, _ = _rollout()
    for case, out in zip(_advantage_cases(), rlinf, strict=False):
        if case["auto_reset"]:
            continue
        action = case["reward_type"] == "action_level"
        ours = loss_mask_from_dones(dones if action else dones.any(-1))
        assert torch.equal(ours, out["loss_mask"] if action else out["loss_mask"][..., 0])
        steps = loss_mask_from_dones(dones).sum(dim=(0, 2))  # valid env steps per env
        assert torch.equal(out["loss_mask_sum"][0, :, -1], steps)


@pytest.mark.parametrize("index", range(len(_advantage_cases())))
def test_advantages_equal_rlinf(rlinf: list[dict[str, torch.Tensor]], index: int) -> None:
    case, out = _advantage_cases()[index], rlinf[index]
    level = case["reward_type"]
    rewards, dones = aggregate_rewards(case["rewards"], level), aggregate_dones(case["dones"], level)
    # with auto-reset every step is valid (training/batch.py); RLinf passes no mask then
    mask = torch.ones(rewards.shape, dtype=torch.bool) if case["auto_reset"] else loss_mask_from_dones(dones)
    values = case.get("values")
    values = None if values is None else (values if level == "action_level" else values[..., 0])
    gamma = 1.0 if case["adv_type"] == "reinpp" else case["gamma"]  # RLinf's reinpp does not discount
    res = compute_advantages(case["adv_type"], rewards, dones, mask, values=values, gamma=gamma,
                             gae_lambda=case["gae_lambda"], group_size=G if case["adv_type"] == "grpo" else 1,
                             normalize=case["adv_type"] != "raw")
    theirs = out["advantages"] if level == "action_level" else out["advantages"][..., 0]
    if case["adv_type"] == "reinpp":  # difference 3: the normalisation
        raw = compute_advantages("reinpp", rewards, dones, mask, gamma=1.0, group_size=1, normalize=False).advantages
        valid = raw[mask]
        ratio = valid.std(unbiased=False) / (valid.std(unbiased=True) + 1e-5)
        _close(res.advantages[mask], theirs[mask] * ratio)
        return
    _close(torch.where(mask, res.advantages, 0.0), torch.where(mask, theirs, 0.0))
    if res.returns is not None:
        _close(res.returns, out["returns"] if level == "action_level" else out["returns"][..., 0])


def _ours_loss(case: dict[str, Any], valid_fraction: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """vlarl's actor (+ value) loss as training/update.py computes it, with gradients."""
    lp, level = case["logprob_type"], case["reward_type"]
    n = T * B
    step_mask = loss_mask_from_dones(case["dones"])  # [T, B, C]
    if level == "chunk_level":
        step_mask = loss_mask_from_dones(case["dones"].any(-1)).unsqueeze(-1).expand(T, B, C)
    masked = case["mode"] == "masks"
    loss_mask = step_mask.reshape(n, C) if masked else torch.ones(n, C, dtype=torch.bool)
    if case["mode"] == "mask_only":  # a filter mask: no env is filtered, so every step is valid
        loss_mask = torch.ones(n, C, dtype=torch.bool)
    agg = "seq-mean-token-mean" if masked else "token-mean"
    if valid_fraction is None:
        unit_mask_steps = step_mask if level == "action_level" else step_mask[..., 0]
        valid_fraction = trajectory_valid_fraction(unit_mask_steps).reshape(n)
    logp = case["logprobs"].clone().requires_grad_(True)
    shape = logp.shape
    unit = mask_to_unit(loss_mask, lp, shape)
    weight, den = loss_weights(unit, agg, valid_fraction=valid_fraction, steps_per_trajectory=T)
    adv = case["advantages"].reshape(n) if level == "chunk_level" else case["advantages"]
    adv = torch.where(unit, to_unit(adv, lp, shape, loss_mask), torch.zeros(()))
    loss, metrics = ppo_actor_loss(aggregate_logprobs(logp, lp), aggregate_logprobs(case["old_logprobs"], lp), adv,
                                   weight, den, clip_ratio_low=case["clip_low"], clip_ratio_high=case["clip_high"],
                                   clip_ratio_c=case["clip_c"], log_ratio_min=case["log_ratio_min"],
                                   log_ratio_max=case["log_ratio_max"])
    values = None
    if case["loss_type"] == "actor_critic":
        values = case["values_new"].clone().requires_grad_(True)
        v_mask = loss_mask if values.dim() == 2 else loss_mask.any(-1)
        vw, vden = loss_weights(v_mask, agg, valid_fraction=valid_fraction, steps_per_trajectory=T)
        vl, _ = value_loss(values, case["prev_values"], case["returns"], vw, vden, value_clip=case["value_clip"],
                           huber_delta=case["huber_delta"])
        loss = loss + vl
    loss.backward()
    out = {"loss": loss.detach(), "grad_logprobs": logp.grad, "clip_fraction": metrics["clipfrac"],
           "approx_kl": metrics["approx_kl"]}
    if values is not None:
        out["grad_values"] = values.grad
    return out


def _loss_index(i: int) -> int:
    return len(_advantage_cases()) + i


@pytest.mark.parametrize("index", range(len(_loss_cases())))
def test_losses_equal_rlinf(rlinf: list[dict[str, torch.Tensor]], index: int) -> None:
    case, theirs = _loss_cases()[index], rlinf[_loss_index(index)]
    lp, level = case["logprob_type"], case["reward_type"]
    ours = _ours_loss(case)
    factor = UNITS[lp] if case["mode"] == "mask_only" else 1  # difference 2
    if case["mode"] == "masks" and level == "chunk_level":  # difference 1: RLinf's weights
        steps = loss_mask_from_dones(case["dones"]).sum(dim=(0, 2)).float()  # valid env steps per env
        rlinf_fraction = (steps / M).repeat(T)
        assert not torch.allclose(ours["loss"], theirs["loss"], atol=1e-3)  # episodes end inside chunks here
        ours = _ours_loss(case, valid_fraction=rlinf_fraction)
    _close(ours["loss"] * factor, theirs["loss"])
    _close(ours["grad_logprobs"] * factor, theirs["grad_logprobs"].view_as(ours["grad_logprobs"]))
    if "grad_values" in ours:
        _close(ours["grad_values"], theirs["grad_values"].view_as(ours["grad_values"]))
    # metrics: RLinf divides by a count of mask entries that lacks the dims its sums run over (difference 2)
    mask_units = 1 if case["mode"] == "mask_only" or level == "chunk_level" else C  # RLinf's mask: [N, 1] or [N, C]
    metric_factor = 1 if case["mode"] == "auto_reset" else UNITS[lp] // mask_units
    _close(ours["clip_fraction"] * metric_factor, theirs["clip_fraction"])
    _close(ours["approx_kl"] * metric_factor, theirs["approx_kl"])


def test_kl_estimators_equal_rlinf(rlinf: list[dict[str, torch.Tensor]]) -> None:
    start = len(_advantage_cases()) + len(_loss_cases())
    for case, out in zip(_kl_cases(), rlinf[start:], strict=True):
        _close(kl_penalty(case["logprob"], case["ref_logprob"], case["kl_type"]), out["kl"])
