"""Tiny policies implementing the Policy contract (``policies/base.py``) on state vectors.

They exist to test the RL machinery end to end in seconds on a CPU (``envs/toy.py``,
``tests/training/test_learning.py``, ``benchmarks/learning_curve.py``) and are handy for smoke runs:

* :class:`ToyFlowPolicy`: an MLP velocity field denoised by the shared flow-matching sampler
  (``policies/flow_matching.py``), so it exercises exactly the code pi0 / GR00T use; replay = states +
  chain + denoise index. ``flow_noise`` adds a learned noise head.
* :class:`ToyGaussianPolicy`: MLP mean + state-independent log-std (the cleanrl continuous PPO policy).
* :class:`ToyTokenPolicy`: per-dimension categorical over action bins with a sampling temperature
  (the OpenVLA-OFT discrete-token scheme, ``policies/token.py``).

All read ``obs[keys.STATES]`` ``[B, state_dim]``, emit chunks ``[B, C, A]`` and carry an MLP
:class:`~vlarl_cli.policies.value_head.ValueHead` critic on the state: values ``[B]``, or ``[B, C]`` (one
per executed action) for the flow and Gaussian policies with ``action_values`` (``value_type: action_level``).
Sampling noise comes from the policy's own seeded ``torch.Generator`` so runs are reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vlarl_cli import keys
from vlarl_cli.policies import noise as noise_lib
from vlarl_cli.policies.base import EvaluateOutput, Observation, PolicyOutput, Replay
from vlarl_cli.policies.flow_matching import FlowConfig, VelocityOutput, flow_logprobs, sample_flow
from vlarl_cli.policies.noise import AnyGenerator
from vlarl_cli.policies.token import sample_tokens, token_logprobs, tokens_to_actions
from vlarl_cli.policies.value_head import ValueHead

__all__ = ["ToyFlowPolicy", "ToyGaussianPolicy", "ToyTokenPolicy"]

CHAIN = "chain"
DENOISE_INDEX = "denoise_index"
RAW_ACTIONS = "raw_actions"
TOKENS = "tokens"


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Build modules under a fixed seed without touching the caller's global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, out_dim))


def _states(obs: Observation | Replay) -> Tensor:
    s = obs[keys.STATES]
    if not isinstance(s, Tensor) or s.dim() != 2:
        raise ValueError(f"toy policies expect obs['{keys.STATES}'] as a [B, state_dim] tensor")
    return s.float()


class ToyFlowPolicy(nn.Module):
    """Flow-matching chunk policy: velocity MLP on ``[x_t, t, state]``; action horizon = ``chunk``."""

    cameras: tuple[str, ...] = ()  # states only: ManiSkill builds state observations for it
    env_gripper = "maniskill"  # no LIBERO processor: it learns the simulator's own gripper (keys.policy_gripper)

    def __init__(self, state_dim: int = 4, action_dim: int = 2, chunk: int = 4, *,
                 flow: FlowConfig | None = None, hidden: int = 64, seed: int = 0, action_values: bool = False
                 ) -> None:
        super().__init__()
        self.num_action_chunks, self.action_dim = chunk, action_dim
        self.flow = flow or FlowConfig()
        with _seeded(seed):
            out = chunk * action_dim * (2 if self.flow.method == "flow_noise" else 1)
            self.velocity = _mlp(chunk * action_dim + 1 + state_dim, hidden, out)
            self.value_head = ValueHead(state_dim, hidden=(hidden, hidden), num_values=chunk if action_values else 1)
        self.generator = torch.Generator().manual_seed(seed + 1)

    def _velocity_fn(self, states: Tensor):
        c, a = self.num_action_chunks, self.action_dim

        def fn(x: Tensor, t: Tensor) -> VelocityOutput:
            out = self.velocity(torch.cat([x.reshape(x.shape[0], -1), t.view(-1, 1).to(x.dtype), states], dim=-1))
            v = out[:, : c * a].view(-1, c, a)
            raw = out[:, c * a :].view(-1, c, a) if self.flow.method == "flow_noise" else None
            return VelocityOutput(velocity=v, noise_logvar_raw=raw)

        return fn

    def sample(self, obs: Observation, deterministic: bool = False, generator: AnyGenerator = None
               ) -> PolicyOutput:
        states = _states(obs)
        g = generator if generator is not None else self.generator
        noise = noise_lib.randn((states.shape[0], self.num_action_chunks, self.action_dim), g)
        fs = sample_flow(self._velocity_fn(states), noise, self.flow, deterministic=deterministic, generator=g)
        return PolicyOutput(actions=fs.actions, logprobs=fs.logprobs, values=self.value_head(states),
                            replay={keys.STATES: states, CHAIN: fs.chain, DENOISE_INDEX: fs.denoise_index})

    def evaluate(self, replay: Replay) -> EvaluateOutput:
        states = _states(replay)
        logp, entropy = flow_logprobs(self._velocity_fn(states), replay[CHAIN], replay[DENOISE_INDEX], self.flow)
        return EvaluateOutput(logprobs=logp, values=self.value_head(states), entropy=entropy)

    def supervised_loss(self, obs: Observation, actions: Tensor, *, generator: torch.Generator | None = None,
                        noise: Tensor | None = None, time: Tensor | None = None) -> Tensor:
        """Flow-matching behaviour-cloning loss (scalar mean) of demonstration chunks ``actions [B, C, A]``.

        openpi's recipe (``src/openpi/models/pi0.py`` ``compute_loss``), in the sampler's time
        ``tau`` (1 = noise): ``tau ~ Beta(1.5, 1) * 0.999 + 0.001``, ``x = tau noise + (1 - tau) actions``,
        target ``u = noise - actions``, loss ``mean((v(x, tau) - u)^2)`` over batch, steps and dims. With
        ``flow.noise_at = 0`` (GR00T time) the model sees ``t = 1 - tau`` and must return ``-u``.
        ``noise [B, C, A]`` / ``time [B]`` (tau) fix the draws; otherwise they come from ``generator``.
        The toy acts in env space directly (no normalisation).
        """
        states = _states(obs)
        b, c, a = states.shape[0], self.num_action_chunks, self.action_dim
        if tuple(actions.shape) != (b, c, a):
            raise ValueError(f"actions must be [{b}, {c}, {a}], got {tuple(actions.shape)}")
        target = actions.to(states)
        if noise is None:
            noise = torch.randn(target.shape, generator=generator)
        if time is None:
            # Beta(1.5, 1) by inversion: its CDF is u^1.5, so U^(1/1.5) with U uniform (generator-driven)
            time = torch.rand(b, generator=generator) ** (1.0 / 1.5) * 0.999 + 0.001
        noise, tau = noise.to(states), time.to(states).view(b, 1, 1)
        x_t = tau * noise + (1 - tau) * target
        u = noise - target
        if self.flow.noise_at == 1.0:
            v = self._velocity_fn(states)(x_t, tau.view(b)).velocity
        else:
            v = -self._velocity_fn(states)(x_t, 1 - tau.view(b)).velocity
        return ((v - u) ** 2).mean()


class ToyGaussianPolicy(nn.Module):
    """Diagonal Gaussian chunk policy: ``N(mlp(state), exp(log_std)^2)`` per element."""

    cameras: tuple[str, ...] = ()  # states only: ManiSkill builds state observations for it
    env_gripper = "maniskill"  # no LIBERO processor: it learns the simulator's own gripper (keys.policy_gripper)

    def __init__(self, state_dim: int = 4, action_dim: int = 2, chunk: int = 4, *, hidden: int = 64,
                 init_std: float = 1.0, seed: int = 0, action_values: bool = False) -> None:
        super().__init__()
        self.num_action_chunks, self.action_dim = chunk, action_dim
        with _seeded(seed):
            self.mean = _mlp(state_dim, hidden, chunk * action_dim)
            self.log_std = nn.Parameter(torch.full((chunk, action_dim), math.log(init_std)))
            self.value_head = ValueHead(state_dim, hidden=(hidden, hidden), num_values=chunk if action_values else 1)
        self.generator = torch.Generator().manual_seed(seed + 1)

    def _dist(self, states: Tensor) -> torch.distributions.Normal:
        mean = self.mean(states).view(-1, self.num_action_chunks, self.action_dim)
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean))

    def sample(self, obs: Observation, deterministic: bool = False, generator: AnyGenerator = None
               ) -> PolicyOutput:
        states = _states(obs)
        dist = self._dist(states)
        if deterministic:
            actions, logp = dist.mean, torch.zeros_like(dist.mean)
        else:
            g = generator if generator is not None else self.generator
            actions = dist.mean + dist.stddev * noise_lib.randn(dist.mean.shape, g)
            logp = dist.log_prob(actions)
        return PolicyOutput(actions=actions, logprobs=logp, values=self.value_head(states),
                            replay={keys.STATES: states, RAW_ACTIONS: actions})

    def evaluate(self, replay: Replay) -> EvaluateOutput:
        states = _states(replay)
        dist = self._dist(states)
        return EvaluateOutput(logprobs=dist.log_prob(replay[RAW_ACTIONS]), values=self.value_head(states),
                              entropy=dist.entropy())

    def supervised_loss(self, obs: Observation, actions: Tensor) -> Tensor:
        """Negative log-likelihood (scalar mean over batch, steps, dims) of demonstration chunks
        ``actions [B, C, A]`` under ``N(mean(state), exp(log_std)^2)``."""
        states = _states(obs)
        dist = self._dist(states)
        if actions.shape != dist.mean.shape:
            raise ValueError(f"actions must be {list(dist.mean.shape)}, got {list(actions.shape)}")
        return -dist.log_prob(actions.to(states)).mean()


class ToyTokenPolicy(nn.Module):
    """Per-element categorical over ``n_bins`` action bins in ``[-1, 1]``, sampled at ``temperature``."""

    cameras: tuple[str, ...] = ()  # states only: ManiSkill builds state observations for it
    env_gripper = "maniskill"  # no LIBERO processor: it learns the simulator's own gripper (keys.policy_gripper)

    def __init__(self, state_dim: int = 4, action_dim: int = 2, chunk: int = 4, *, n_bins: int = 9,
                 temperature: float = 1.0, hidden: int = 64, seed: int = 0) -> None:
        super().__init__()
        self.num_action_chunks, self.action_dim = chunk, action_dim
        self.n_bins, self.temperature = n_bins, temperature
        with _seeded(seed):
            self.logits = _mlp(state_dim, hidden, chunk * action_dim * n_bins)
            self.value_head = ValueHead(state_dim, hidden=(hidden, hidden))
        self.generator = torch.Generator().manual_seed(seed + 1)

    def _logits(self, states: Tensor) -> Tensor:
        return self.logits(states).view(-1, self.num_action_chunks, self.action_dim, self.n_bins)

    def sample(self, obs: Observation, deterministic: bool = False, generator: AnyGenerator = None
               ) -> PolicyOutput:
        states = _states(obs)
        logits = self._logits(states)
        tokens = sample_tokens(logits, self.temperature, deterministic=deterministic,
                               generator=generator if generator is not None else self.generator)
        logp = torch.zeros(tokens.shape) if deterministic else token_logprobs(logits, tokens, self.temperature)[0]
        return PolicyOutput(actions=tokens_to_actions(tokens, self.n_bins), logprobs=logp,
                            values=self.value_head(states), replay={keys.STATES: states, TOKENS: tokens})

    def evaluate(self, replay: Replay) -> EvaluateOutput:
        states = _states(replay)
        logp, entropy = token_logprobs(self._logits(states), replay[TOKENS], self.temperature)
        return EvaluateOutput(logprobs=logp, values=self.value_head(states), entropy=entropy)

    def supervised_loss(self, obs: Observation, actions: Tensor) -> Tensor:
        """Cross-entropy (scalar mean over batch, steps, dims) of the bins containing the demonstration
        actions ``[B, C, A]`` (clipped to ``[-1, 1]``) under the untempered logits."""
        from vlarl_cli.policies.token import actions_to_tokens

        states = _states(obs)
        logits = self._logits(states)
        if actions.shape != logits.shape[:-1]:
            raise ValueError(f"actions must be {list(logits.shape[:-1])}, got {list(actions.shape)}")
        tokens = actions_to_tokens(actions, self.n_bins).to(logits.device)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, self.n_bins).float(), tokens.reshape(-1))


@dataclass
class ModelSettings:
    """``actor.model`` for the toy policies (``model_type: toy_flow | toy_gaussian``) on the toy reach task."""

    model_type: str = "toy_flow"
    num_action_chunks: int = 4
    action_dim: int = 2
    denoising_steps: int = 4
    noise_method: str = "flow_sde"
    noise_level: float = 1.0
    joint_logprob: bool = False
    hidden: int = 64
    obs_dim: int = 4  # the state vector's size: 4 on the toy reach task, the task's on ManiSkill state obs
    model_path: str | None = None  # a folder with model.safetensors (an rl-train or sft checkpoint)
    value_type: str = "chunk_level"  # chunk_level: values [B]; action_level: one per executed action [B, C]


def build_policy(model: ModelSettings, device: torch.device | str = "cpu") -> nn.Module:
    """A toy policy on ``obs_dim``-d states (4: the 2-D reach task); seeded from the global torch RNG, or loaded
    from ``model_path`` (``model.safetensors``, as rl-train and sft write it)."""
    if model.value_type not in ("chunk_level", "action_level"):
        from vlarl_cli.errors import ConfigError

        raise ConfigError(f'Unknown value_type "{model.value_type}" for the toy policies.',
                          "Use chunk_level (one value per chunk) or action_level (one per executed action).")
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    kw = {"state_dim": model.obs_dim, "action_dim": model.action_dim, "chunk": model.num_action_chunks,
          "hidden": model.hidden, "seed": seed}
    action_values = model.value_type == "action_level"
    if model.model_type == "toy_gaussian":
        policy: nn.Module = ToyGaussianPolicy(**kw, action_values=action_values)
    else:
        flow = FlowConfig(num_steps=model.denoising_steps, method=model.noise_method,
                          noise_level=model.noise_level, joint_logprob=model.joint_logprob)
        policy = ToyFlowPolicy(flow=flow, **kw, action_values=action_values)
    if model.model_path is not None:
        from pathlib import Path

        from safetensors.torch import load_file

        from vlarl_cli.errors import CheckpointError

        weights = Path(model.model_path) / "model.safetensors"
        if not weights.is_file():
            raise CheckpointError(f"{weights} does not exist: a toy checkpoint folder holds model.safetensors.",
                                  "Point actor.model.model_path at a checkpoint folder written by rl-train or sft.")
        try:
            policy.load_state_dict(load_file(str(weights)), strict=True)
        except RuntimeError as err:
            raise CheckpointError(f"{weights} does not fit this toy policy: {str(err).splitlines()[0]}",
                                  "Use the model settings the checkpoint was trained with.") from None
    return policy.to(device)
