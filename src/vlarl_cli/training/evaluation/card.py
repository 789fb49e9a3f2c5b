"""The protocol card (``card.json``): everything a success rate depends on, and the check that refuses
to resume into a folder whose card differs in anything but the episode plan.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from vlarl_cli import __version__
from vlarl_cli.envs.libero.suites import all_suite_order
from vlarl_cli.keys import policy_cameras, policy_device, policy_obs_mode
from vlarl_cli.training.evaluation.plan import EpisodeKey, EvalSettings
from vlarl_cli.training.evaluation.source import PolicyInfo


def make_card(settings: EvalSettings, policy: Any, info: PolicyInfo | None,
              plan: list[EpisodeKey]) -> dict[str, Any]:
    """The protocol card: everything a success rate depends on. ``plan`` fills its ``plan`` part."""
    from vlarl_cli.envs.libero.protocol import get_protocol
    p = get_protocol(settings.protocol)
    chunk = int(getattr(policy, "num_action_chunks", 0))
    denoising = policy_denoising_steps(policy)
    suites = sorted({k.suite for k in plan}, key=all_suite_order().index)
    temperature = settings.temperature if not settings.deterministic else None
    mode = "deterministic" if settings.deterministic else "sampled"
    # render_quality enters the card only when not exact, so folders written before it existed still resume
    rendering = {} if settings.render_quality == "exact" else {"render_quality": settings.render_quality}
    return {
        "protocol": p.name,
        "protocol_source": p.notes,
        "init_states": "LIBERO fixed init states (task order 0); trial i starts from init state i",
        "max_steps": {s: settings.effective(s)[0] for s in suites},
        "settle_steps": settings.effective(suites[0])[1] if suites else p.settle_steps,
        "settle_action": list(p.settle_action),
        "env_seed": settings.effective(suites[0])[2] if suites else p.seed,
        "env_seed_applied": {"once_per_task": "once when a task's simulator is built (resets continue the stream)",
                             "every_reset": "before every reset (RLinf: seed * k + i)"}[p.seeding],
        "reset": "hard" if settings.effective_hard_reset else "soft (checked bit-identical to hard)",
        "eval_order": p.eval_order,
        "action_mode": mode if temperature is None else f"{mode} (temperature {temperature})",
        "temperature": temperature,
        # what the policy's deterministic mode means under this protocol (OpenVLA-OFT's configure_eval)
        "eval_sampling": ({"do_sample": policy.eval_do_sample, "temperature": policy.eval_temperature}
                          if hasattr(policy, "eval_do_sample") else None),
        "replan_size": settings.replan(chunk) if chunk else 0,
        "denoising_steps": denoising,
        "model_type": settings.model_type,
        "resolution": settings.resolution,
        "cameras": list(policy_cameras(policy)),
        # "state": no camera, privileged 14-d state (envs/libero/env.py EnvOptions.obs_mode), not a protocol's
        "obs_mode": policy_obs_mode(policy),
        **rendering,
        **_pro_card(suites),
        **_plus_card(suites),
        "policy_seed": settings.policy_seed,
        # the policy's batch (runner.py): a resume at another batch may change episodes' last float bits
        "policy_batch": settings.num_envs,
        "checkpoint": asdict(info) if info is not None else None,
        # the prompt tokenizer (path, sha256, vocab_size, source) of policies that read a real one
        "tokenizer": getattr(policy, "tokenizer_record", None),
        "deviations": (settings.deviations(suites) + settings.policy_deviations(chunk, denoising)
                       + _observation_deviations(policy)),
        "vlarl_version": __version__,
        # where the numbers were computed (a resume elsewhere is said, not refused: compute_note)
        "compute": compute_record(policy),
        "plan": {
            "suite": settings.suite,
            "trials_per_task": settings.trials,
            "tasks": {s: sorted({k.task for k in plan if k.suite == s}) for s in suites},
            "episodes": len(plan),
        },
    }


def policy_denoising_steps(policy: Any) -> int | None:
    """Denoising steps of a flow policy (pi0 / pi0.5 ``cfg.num_steps``), None for other policies."""
    steps = getattr(getattr(policy, "cfg", None), "num_steps", None)
    return int(steps) if isinstance(steps, int) else None


def card_conflicts(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Card fields (outside the plan and the per-suite step limits of new suites) that differ."""
    out = []
    for k in sorted(set(old) | set(new)):
        if k in ("plan", "deviations", "protocol_source", "policy_batch", "compute"):  # batch_note, compute_note
            continue
        a, b = old.get(k), new.get(k)
        if k == "max_steps" and isinstance(a, dict) and isinstance(b, dict):
            if any(a[s] != b[s] for s in set(a) & set(b)):
                out.append(k)
        elif k == "checkpoint" and isinstance(a, dict) and isinstance(b, dict):
            if a.get("sha256") != b.get("sha256"):
                out.append("checkpoint.sha256")
        elif a != b:
            out.append(k)
    return out


def batch_note(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The line a resume at another policy batch prints (None: the same batch, or a card without one)."""
    a, b = old.get("policy_batch"), new.get("policy_batch")
    if a is None or a == b:
        return None
    return (f"resuming with a policy batch of {b} where the first run used {a}: the episodes run now may differ "
            f"from an uninterrupted run in their last float bits (pass --num-envs {a} for identical episodes)")


def compute_record(policy: Any) -> dict[str, str]:
    """torch's version, the policy's device and the instruction set of torch's CPU kernels (AVX2 and AVX-512
    kernels round differently, so a CPU evaluation's episodes can differ in their last float bits between
    machines, and a near-tie action can flip an episode)."""
    import torch

    device = policy_device(policy)
    name = torch.cuda.get_device_name(device) if device is not None and device.type == "cuda" else "cpu"
    return {"torch": torch.__version__, "device": name, "cpu_kernels": torch.backends.cpu.get_cpu_capability()}


def compute_note(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The line a resume on another machine or torch prints (None: the same, or a card from before the record)."""
    a, b = old.get("compute"), new.get("compute")
    if not isinstance(a, dict) or not isinstance(b, dict) or a == b:
        return None
    moved = ", ".join(f"{k} {a.get(k)} -> {b.get(k)}" for k in sorted(b) if a.get(k) != b.get(k))
    return (f"resuming where the first episodes were computed elsewhere ({moved}): the episodes run now may differ "
            "from an uninterrupted run in their last float bits")


def _observation_deviations(policy: Any) -> list[str]:
    """Every published protocol gives the policy camera images; a state-mode policy sees none."""
    if policy_obs_mode(policy) == "state":
        return ["obs_mode state: no camera; the policy reads the 8-d proprio state plus the positions of the "
                "goal's object and target (privileged, 14-d) instead of images"]
    return []


def _plus_card(suites: list[str]) -> dict[str, Any]:
    """For LIBERO-Plus suites: the environment's provenance, init states, instruction, categories."""
    from vlarl_cli.envs.libero_plus.suites import card

    return card(suites)


def _pro_card(suites: list[str]) -> dict[str, Any]:
    """For LIBERO-PRO suites: where their files come from, whose instruction the policy reads, what each
    category perturbs (absent otherwise, so folders of other suites keep their cards)."""
    from vlarl_cli.envs.libero_pro.catalog import INSTRUCTION_SOURCES, pro_suites
    from vlarl_cli.envs.libero_pro.data import WHEEL_REQUIREMENT

    pro = [pro_suites()[s] for s in suites if s in pro_suites()]
    if not pro:
        return {}
    return {"libero_pro": {
        "files": f"bddl + init states of {WHEEL_REQUIREMENT} (sha256-checked), run in vlarl's LIBERO",
        "init_states": "PRO's 50 per task; trial i starts from init state i",
        "instruction": INSTRUCTION_SOURCES["bddl"],
        "categories": {s.name: f"{s.category.title}: {s.category.changes}" for s in pro},
    }}
