"""OpenVLA-OFT as RLinf and the OFT authors run it.

Two implement versions (:data:`~vlarl_cli.policies.openvla_oft.config.IMPLEMENT_VERSIONS`):

* ``rlinf`` (RLinf's LIBERO / ManiSkill checkpoints): 256 action bins per element, sampled tokens and token
  log-probs, one image, no STOP token, images resized as RLinf's tensor processor does.
* ``official`` (the OFT authors' layout, RLinf ``openvla_oft/official``): STOP token after the action slots,
  proprio token, several images; the action head is RLinf's token head, or the OFT authors' L1-regression
  MLP-ResNet (``action_head--*_checkpoint.pt``) with a learned-std Gaussian for PPO / GRPO. A folder with
  an L1 head is routed there and is never decoded through the token head.

RLinf's critic (``value_head.mlp.*``, ``value_type`` chunk_level / action_level) reads the last prompt
token; PEFT adapters (``lora_path``) merge on load; ``is_lora`` trains LoRA where RLinf puts it.

Usage::

    from vlarl_cli.policies.openvla_oft import ModelSettings, build_policy

    policy = build_policy(ModelSettings(preset="tiny"), "cpu")
    out = policy.sample(obs)                 # obs: main_images [B, H, W, 3] uint8 / task_descriptions
    ev = policy.evaluate(out.replay)         # ev.logprobs == out.logprobs under unchanged weights

Heavy modules (transformers model classes) load only when a policy is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vlarl_cli.policies.openvla_oft.config import ModelSettings, OftConfig, preset

if TYPE_CHECKING:
    import torch

    from vlarl_cli.policies.openvla_oft.policy import OftPolicy

__all__ = ["ModelSettings", "OftConfig", "build_policy", "preset"]


def build_policy(model: ModelSettings, device: torch.device | str = "cpu") -> OftPolicy:
    """Build an OpenVLA-OFT policy from the recipe's model settings.

    Without ``model_path``: the preset's architecture with fresh weights; on ``torch.device("meta")``
    nothing is allocated (the ``full`` preset for dry runs and parameter counts). With ``model_path``:
    the checkpoint's architecture and weights (``vlarl`` or OpenVLA HF layout), with the recipe's RL
    fields (chunking, temperature, value head, LoRA, unnorm key, ...) applied on top.
    """
    from typing import cast

    import torch

    from vlarl_cli.policies.openvla_oft.policy import OftPolicy
    from vlarl_cli.precision import DTYPES as dtypes
    dev = torch.device(device)
    rl: dict[str, Any] = model.rl_fields()
    if model.lora_path and not model.model_path and torch.device(device).type != "meta":
        from vlarl_cli.errors import ConfigError

        raise ConfigError("lora_path is set without model_path: a LoRA adapter needs the base checkpoint it was "
                          "trained on.", "Set actor.model.model_path to the base OpenVLA-OFT folder.")
    if model.model_path:
        from vlarl_cli.policies.openvla_oft.checkpoint import load_policy

        policy = cast(OftPolicy, load_policy(model.model_path, format=model.checkpoint_format, device=dev,
                             dtype=dtypes[rl["precision"]], overrides=rl,
                             dataset_statistics_path=model.norm_stats_path, settings=model,
                             lora_path=model.lora_path))
    else:
        cfg = model.to_oft_config()
        stats = None
        if model.norm_stats_path:
            from vlarl_cli.policies.openvla_oft.processing import load_dataset_statistics

            stats = load_dataset_statistics(model.norm_stats_path)
        # built directly on the device: the 7.5B model initialised on the host first took over a minute on a GPU
        # machine (docs/gpu); on "meta" nothing is allocated
        with torch.device(dev):
            policy = OftPolicy(cfg, dataset_statistics=stats)
        policy = policy.to(dtype=dtypes[cfg.precision])
    policy.gradient_checkpointing = model.gradient_checkpointing
    return policy
