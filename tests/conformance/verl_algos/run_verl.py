"""verl's side of the conformance test: run by ``.reference/rlinf_models/bin/python`` (never imports vlarl).

    python run_verl.py <inputs.pt> <outputs.pt>
    python run_verl.py --check          # imports only (scripts/reference/rlinf_models.sh)

Calls verl 0.9.1's own ``verl/trainer/ppo/core_algos.py`` functions on the inputs the test wrote: the GRPO
(with and without the std, Dr.GRPO's form) and RLOO outcome advantages, the vanilla and GSPO policy losses
(value, gradient with respect to ``log_prob``, metrics) under every ``loss_agg_mode``, and DAPO's group filter
rule. Two stand-ins, because verl's package ``__init__`` starts Ray and its ``verl.workers.config`` pulls in
the profiler (Ray again): ``verl`` is imported as a bare namespace (its submodules run as published), and
``verl.workers.config.ActorConfig`` is a plain class (core_algos only checks ``isinstance`` and reads
attributes) holding the clip settings. DAPO's filter lives in ``ReplayBuffer._dapo_filtered_keys``
(``trainer/ppo/v1/replay_buffer.py``), which needs a running transfer_queue service: its rule (a group with
more than one trajectory is dropped when ``np.std`` of the trajectories' summed rewards is 0) is evaluated
here with the same expression.
"""

import importlib.util
import sys
import types

import numpy as np
import torch


def _import_core_algos():
    spec = importlib.util.find_spec("verl")
    pkg = types.ModuleType("verl")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["verl"] = pkg
    cfg = types.ModuleType("verl.workers.config")
    cfg.ActorConfig = type("ActorConfig", (), {"get": lambda self, k, d=None: getattr(self, k, d)})
    sys.modules["verl.workers.config"] = cfg
    import verl.trainer.ppo.core_algos as core_algos

    return core_algos, cfg.ActorConfig


def main() -> None:
    core, actor_config = _import_core_algos()
    if sys.argv[1] == "--check":  # the reference build's import check
        print("verl core_algos:", ", ".join(sorted(core.POLICY_LOSS_REGISTRY)))
        return
    data = torch.load(sys.argv[1])
    out: dict[str, torch.Tensor] = {}
    rewards, mask, index = data["token_level_rewards"], data["response_mask"], data["index"].numpy()
    for name, kw in (("grpo", {"norm_adv_by_std_in_grpo": True}), ("drgrpo", {"norm_adv_by_std_in_grpo": False}),
                     ("rloo", {})):
        fn = core.get_adv_estimator_fn("grpo" if name == "drgrpo" else name)
        out[f"adv_{name}"] = fn(token_level_rewards=rewards.clone(), response_mask=mask, index=index, **kw)[0]
    for case in data["loss_cases"]:
        cfg = actor_config()
        cfg.clip_ratio, cfg.clip_ratio_low, cfg.clip_ratio_high = 0.2, case["low"], case["high"]
        cfg.clip_ratio_c, cfg.global_batch_info = case["c"], {}
        log_prob = data["log_prob"].clone().requires_grad_(True)
        fn = core.get_policy_loss_fn(case["loss"])
        loss, metrics = fn(old_log_prob=data["old_log_prob"], log_prob=log_prob, advantages=data["advantages"],
                           response_mask=data["loss_mask"], loss_agg_mode=case["agg"], config=cfg)
        loss.backward()
        key = f"{case['loss']}|{case['agg']}"
        out[f"loss|{key}"], out[f"grad|{key}"] = loss.detach(), log_prob.grad
        for m in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
            out[f"{m}|{key}"] = torch.tensor(float(metrics[m]))
    scores = data["group_scores"].numpy()
    out["dapo_dropped"] = torch.tensor([len(g) > 1 and float(np.std(g)) == 0.0 for g in scores])
    torch.save(out, sys.argv[2])


if __name__ == "__main__":
    main()
