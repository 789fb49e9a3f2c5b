"""RLinf's side of the algorithm conformance test: run by ``.reference/rlinf_models/bin/python`` (never imports
vlarl).

    python run_rlinf.py <cases.pt> <outputs.pt>

Feeds each case to RLinf 0.3.0's own functions the way its embodied actor does
(``rlinf/workers/actor/fsdp_actor_worker.py``): ``compute_loss_mask`` (``rlinf/utils/metric_utils.py``) for the
loss mask and the valid-step counts when the env does not auto-reset (chunk level: ``any`` over the chunk and
the last count), ``calculate_adv_and_returns`` (``rlinf/algorithms/registry.py``: the embodied
pre-/post-processing, the scores and the registered estimator), ``policy_loss`` (the actor loss, and the
critic loss for ``actor_critic``, with ``max_episode_steps`` and the counts) and ``kl_penalty``. One stand-in:
``rlinf.scheduler`` (imported by ``rlinf.utils.utils`` for a type; it imports Ray) is an empty module with a
``Worker`` class.
"""

import sys
import types

import torch


def _import_rlinf():
    scheduler = types.ModuleType("rlinf.scheduler")
    scheduler.Worker = type("Worker", (), {})
    sys.modules["rlinf.scheduler"] = scheduler
    from rlinf.algorithms.registry import calculate_adv_and_returns, policy_loss
    from rlinf.algorithms.utils import kl_penalty
    from rlinf.utils.metric_utils import compute_loss_mask

    return calculate_adv_and_returns, policy_loss, kl_penalty, compute_loss_mask


def _masks(case, compute_loss_mask):
    if case.get("mode") == "mask_only":  # filter_rewards with auto-reset: the group filter's [T, B, 1] mask alone
        return torch.ones(case["dones"].shape[0] - 1, case["dones"].shape[1], 1, dtype=torch.bool), None
    if case["auto_reset"]:
        return None, None
    mask, count = compute_loss_mask(case["dones"])
    if case["reward_type"] == "chunk_level":
        mask, count = mask.any(dim=-1, keepdim=True), count[..., -1:]
    return mask, count


def _advantages(case, calculate, compute_loss_mask):
    mask, count = _masks(case, compute_loss_mask)
    out = calculate(task_type="embodied", adv_type=case["adv_type"], rewards=case["rewards"].clone(),
                    dones=case["dones"].clone(), values=case.get("values"), gamma=case["gamma"],
                    gae_lambda=case["gae_lambda"], group_size=case["group_size"], reward_type=case["reward_type"],
                    loss_mask=mask, loss_mask_sum=count)
    res = {"advantages": out["advantages"]}
    if "returns" in out:
        res["returns"] = out["returns"]
    if mask is not None:
        res["loss_mask"], res["loss_mask_sum"] = mask, count
    return res


def _loss(case, policy_loss, compute_loss_mask):
    mask, count = _masks(case, compute_loss_mask)
    n = case["advantages"].shape[0]

    def flat(x):
        return None if x is None else x.reshape(n, -1)

    logprobs = case["logprobs"].clone().requires_grad_(True)
    kwargs = {"loss_type": case["loss_type"], "logprob_type": case["logprob_type"], "reward_type": case["reward_type"],
              "single_action_dim": case["action_dim"], "logprobs": logprobs, "old_logprobs": case["old_logprobs"],
              "advantages": case["advantages"], "clip_ratio_high": case["clip_high"], "clip_ratio_low": case["clip_low"],
              "clip_ratio_c": case["clip_c"], "clip_log_ratio_min": case["log_ratio_min"],
              "clip_log_ratio_max": case["log_ratio_max"], "loss_mask": flat(mask), "loss_mask_sum": flat(count),
              "max_episode_steps": case["max_episode_steps"], "task_type": "embodied", "critic_warmup": False}
    values = None
    if case["loss_type"] == "actor_critic":
        values = case["values_new"].clone().requires_grad_(True)
        kwargs.update(values=values, prev_values=case["prev_values"], returns=case["returns"],
                      value_clip=case["value_clip"], huber_delta=case["huber_delta"])
    loss, metrics = policy_loss(**kwargs)
    loss.backward()
    res = {"loss": loss.detach(), "grad_logprobs": logprobs.grad, "clip_fraction": torch.tensor(metrics["actor/clip_fraction"]),
           "approx_kl": torch.tensor(metrics["actor/approx_kl"])}
    if values is not None:
        res["grad_values"] = values.grad
    return res


def main() -> None:
    calculate, policy_loss, kl_penalty, compute_loss_mask = _import_rlinf()
    cases = torch.load(sys.argv[1])
    out = []
    for case in cases:
        if case["kind"] == "advantages":
            out.append(_advantages(case, calculate, compute_loss_mask))
        elif case["kind"] == "loss":
            out.append(_loss(case, policy_loss, compute_loss_mask))
        else:
            out.append({"kl": kl_penalty(case["logprob"], case["ref_logprob"], case["kl_type"])})
    torch.save(out, sys.argv[2])


if __name__ == "__main__":
    main()
