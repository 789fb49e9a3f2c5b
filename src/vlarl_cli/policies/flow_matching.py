"""Stochastic flow-matching denoising with exact Gaussian log-probs, for any velocity model.

A flow-matching action head (pi0 / pi0.5 action expert, GR00T DiT) integrates a velocity field from
noise to an action chunk in ``K`` Euler steps. Deterministic (ODE) sampling has no density, so RL
replaces some transitions by Gaussian ones and uses their log-density as the policy log-prob
(pi-RL, arXiv 2510.25889; Flow-GRPO, arXiv 2505.05470; ReinFlow, arXiv 2505.22094). Formulas in
REFERENCE.md section 3.

Time conventions. Internally everything runs in openpi's convention: ``tau = 1`` is pure noise,
``tau = 0`` is data, grid ``tau_i = 1 - i / K`` for ``i = 0..K``, and the velocity is
``dx/dtau`` (openpi trains ``v = noise - data``). The model keeps its OWN convention, set by
``FlowConfig.noise_at``:

* ``noise_at=1.0`` (openpi): the model gets ``t = tau`` and returns ``dx/dt = dx/dtau``.
* ``noise_at=0.0`` (GR00T): the model gets ``t = 1 - tau`` and returns ``dx/dt = data - noise``;
  the sampler negates it to get ``dx/dtau``.

Per transition ``i`` (``t = tau_i``, ``Delta = tau_i - tau_{i+1}``, ``s = t - Delta``):
``x0_hat = x - v t`` (data estimate), ``x1_hat = x + v (1 - t)`` (noise estimate), and

* ``ode``:        mean = x0_hat (1 - s) + x1_hat s                     std = 0   (exact Euler step)
* ``flow_sde``:   sigma = a sqrt(t / (1 - t')) with t' = tau_1 when t = 1, else t;
                  mean = x0_hat (1 - s) + x1_hat (s - sigma^2 Delta / (2 t))   std = sqrt(Delta) sigma
* ``flow_cps``:   mean = x0_hat (1 - s) + x1_hat s cos(pi a / 2)        std = s sin(pi a / 2)
* ``flow_noise``: ODE mean, std = exp(logvar / 2) with
                  logvar = logvar_min + (logvar_max - logvar_min) (tanh(raw) + 1) / 2  (learned).

Non-joint mode draws ONE stochastic transition per sample (``denoise_index``), all others are ODE;
its Gaussian log-density is the policy log-prob. Joint mode makes every transition stochastic and
returns the element-wise MEAN of the N(0, I) log-prob of the initial noise and the ``K`` transition
log-probs (REFERENCE.md section 2). Elements whose std is exactly 0 (the last ``flow_cps`` step)
contribute a log-prob of 0, and in non-joint ``flow_cps`` mode the index is drawn from the first
``K - 1`` steps so that a sample never gets a deterministic "stochastic" step (an RLinf defect).

The replay record is ``FlowSample.chain`` + ``FlowSample.denoise_index``; :func:`flow_logprobs`
recomputes the same log-probs from it under the current weights (one velocity call in non-joint mode,
``K`` in joint mode). Usage::

    cfg = FlowConfig(num_steps=4, method="flow_sde", noise_level=0.5, noise_at=1.0)
    out = sample_flow(velocity_fn, torch.randn(B, H, D, generator=g), cfg, generator=g)
    logp, entropy = flow_logprobs(velocity_fn, out.chain, out.denoise_index, cfg)  # == out.logprobs
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from vlarl_cli.errors import ConfigError, did_you_mean
from vlarl_cli.policies import noise as noise_lib
from vlarl_cli.policies.noise import AnyGenerator

__all__ = [
    "METHODS",
    "FlowConfig",
    "FlowSample",
    "VelocityFn",
    "VelocityOutput",
    "flow_logprobs",
    "gaussian_logprob",
    "sample_flow",
    "squash_logvar",
    "time_grid",
]

METHODS = ("ode", "flow_sde", "flow_cps", "flow_noise")
_LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class FlowConfig:
    """How to denoise. Frozen; validated on construction (raises :class:`ConfigError`)."""

    num_steps: int = 4  # K denoising steps ("denoising_steps" / openpi "num_steps")
    method: str = "flow_sde"  # "ode" | "flow_sde" | "flow_cps" | "flow_noise"
    noise_level: float = 0.5  # a in REFERENCE.md section 3
    noise_at: float = 1.0  # time at which x is pure noise: 1.0 = openpi (1 -> 0), 0.0 = GR00T (0 -> 1)
    joint_logprob: bool = False  # True: mean over initial noise + all K transitions; False: one index
    logvar_min: float = 2 * math.log(0.08)  # flow_noise bounds for the learned log-variance
    logvar_max: float = 2 * math.log(0.16)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(
                f'Unknown flow-matching noise method "{self.method}".{did_you_mean(self.method, METHODS)}',
                f"Use one of {', '.join(METHODS)}.",
            )
        if not isinstance(self.num_steps, int) or self.num_steps < 1:
            raise ConfigError(f"num_steps (denoising steps) must be an integer >= 1, got {self.num_steps!r}.",
                              "Set the number of denoising steps to 1 or more (typically 4 to 10).")
        if self.noise_at not in (0.0, 1.0):
            raise ConfigError(f"noise_at must be 1.0 (openpi: noise at t=1) or 0.0 (GR00T: noise at t=0), "
                              f"got {self.noise_at!r}.", "Set noise_at to 1.0 or 0.0.")
        if self.method == "flow_cps" and self.num_steps < 2:
            raise ConfigError("flow_cps needs num_steps >= 2: its last transition has std 0, so with one "
                              "step no transition is stochastic.",
                              "Use num_steps >= 2 or method flow_sde.")
        if self.method in ("flow_sde", "flow_cps") and not self.noise_level > 0:
            raise ConfigError(f"noise_level must be > 0 for {self.method}, got {self.noise_level!r}.",
                              "Set noise_level to a positive value (e.g. 0.5), or use method ode.")
        if self.method == "flow_noise" and not self.logvar_min <= self.logvar_max:
            raise ConfigError(f"flow_noise needs logvar_min <= logvar_max, got {self.logvar_min} > "
                              f"{self.logvar_max}.", "Swap or fix the two bounds.")


@dataclass
class VelocityOutput:
    """What a velocity model returns for one denoising call."""

    velocity: Tensor  # [B, H, D] dx/dt in the model's own time convention
    noise_logvar_raw: Tensor | None = None  # [B, H, D] unsquashed learned noise (flow_noise only)


#: velocity_fn(x_t [B, H, D], t [B]) -> VelocityOutput, t in the model's OWN time convention, float32
#: (float64 when x is float64), even when x is bf16: casting it is the model's choice.
VelocityFn = Callable[[Tensor, Tensor], VelocityOutput]


@dataclass
class FlowSample:
    """Result of :func:`sample_flow`."""

    actions: Tensor  # [B, H, D] final denoised sample x_data (== chain[:, -1])
    chain: Tensor  # [B, K+1, H, D] x at every grid point, chain[:, 0] = initial noise
    denoise_index: Tensor  # [B] long, stochastic transition per sample (-1 in joint mode / ODE)
    logprobs: Tensor  # [B, H, D] per-element log-prob, >= float32 (zeros for ODE / deterministic)


def time_grid(num_steps: int, device: torch.device | None = None) -> Tensor:
    """Grid ``tau_i = 1 - i / K``, ``i = 0..K``, in the internal (openpi) convention. ``[K+1]`` float64.

    Built from Python floats so that sampling and recomputation see bit-identical times.
    """
    return torch.tensor([1.0 - i / num_steps for i in range(num_steps)] + [0.0], dtype=torch.float64,
                        device=device)


def squash_logvar(raw: Tensor, logvar_min: float, logvar_max: float) -> Tensor:
    """Map an unbounded network output into ``[logvar_min, logvar_max]`` with tanh (ReinFlow, 2505.22094)."""
    return logvar_min + (logvar_max - logvar_min) * (torch.tanh(raw) + 1.0) / 2.0


def gaussian_logprob(x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Element-wise log N(x; mean, std^2) in at least float32; elements with ``std == 0`` give 0."""
    ct = torch.promote_types(torch.promote_types(x.dtype, mean.dtype), torch.float32)
    x, mean, std = x.to(ct), mean.to(ct), std.to(ct)
    std = std.expand_as(mean)
    stochastic = std > 0
    safe_std = torch.where(stochastic, std, torch.ones_like(std))
    logp = -0.5 * ((x - mean) / safe_std) ** 2 - torch.log(safe_std) - 0.5 * _LOG_2PI
    return torch.where(stochastic, logp, torch.zeros_like(logp))


@dataclass
class _Transition:
    ode_mean: Tensor  # [B, H, D]
    mean: Tensor  # [B, H, D] mean of the stochastic transition (== ode_mean for ode / flow_noise)
    std: Tensor  # [B, H, D] (zeros for ode)
    logvar: Tensor | None  # [B, H, D] flow_noise only


def _transition(velocity_fn: VelocityFn, x: Tensor, index: Tensor, grid: Tensor, cfg: FlowConfig
                ) -> _Transition:
    """Mean and std of transition ``index`` ([B] long, one per sample) from ``x`` ([B, H, D])."""
    # at least float32 (bf16 models), float64 kept for float64 inputs
    ct = torch.promote_types(x.dtype, torch.float32)
    t = grid[index].to(ct)  # [B] internal time, 1 = noise
    t_next = grid[index + 1].to(ct)
    model_t = t if cfg.noise_at == 1.0 else 1.0 - t
    out = velocity_fn(x, model_t)
    v = out.velocity if cfg.noise_at == 1.0 else -out.velocity
    if v.shape != x.shape:
        raise ValueError(f"velocity_fn returned velocity of shape {tuple(v.shape)} for x of shape "
                         f"{tuple(x.shape)}; they must match ([B, H, D]).")
    v = v.to(ct)
    xf = x.to(ct)
    tb = t.view(-1, 1, 1).to(ct)
    s = t_next.view(-1, 1, 1).to(ct)  # = t - Delta
    delta = tb - s
    x0_hat = xf - v * tb
    x1_hat = xf + v * (1.0 - tb)
    ode_mean = x0_hat * (1.0 - s) + x1_hat * s
    logvar = None
    a = cfg.noise_level
    if cfg.method == "flow_sde":
        # sigma_t = a * sqrt(t / (1 - t)), with t = 1 replaced by tau_1 in the denominator (pi-RL / RLinf).
        t_den = torch.where(index.view(-1, 1, 1) == 0, grid[1].to(ct), tb)
        sigma = a * torch.sqrt(tb / (1.0 - t_den))
        mean = x0_hat * (1.0 - s) + x1_hat * (s - sigma**2 * delta / (2.0 * tb))
        std = (torch.sqrt(delta) * sigma).expand_as(mean)
    elif cfg.method == "flow_cps":
        mean = x0_hat * (1.0 - s) + x1_hat * s * math.cos(math.pi * a / 2.0)
        std = (s * math.sin(math.pi * a / 2.0)).expand_as(mean)
    elif cfg.method == "flow_noise":
        if out.noise_logvar_raw is None:
            raise ConfigError("method flow_noise needs a learned noise network, but the model's velocity "
                              "function returned no noise_logvar_raw.",
                              "Enable the model's noise head, or use method flow_sde / flow_cps.")
        logvar = squash_logvar(out.noise_logvar_raw.to(ct), cfg.logvar_min, cfg.logvar_max)
        mean = ode_mean
        std = torch.exp(0.5 * logvar)
    else:  # ode
        mean = ode_mean
        std = torch.zeros_like(ode_mean)
    return _Transition(ode_mean=ode_mean, mean=mean, std=std, logvar=logvar)


def _std_normal_logprob(x: Tensor) -> Tensor:
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    return -0.5 * x**2 - 0.5 * _LOG_2PI


def flow_training_draws(shape: tuple[int, int, int], generator: torch.Generator | None, noise: Tensor | None,
                        u: Tensor | None) -> tuple[Tensor, Tensor]:
    """Supervised flow-matching draws: ``noise`` of ``shape`` [B, H, D] and ``u ~ Beta(1.5, 1)`` [B]
    (sampled by inverting its CDF ``u^1.5``, so both follow ``generator``); given values are checked and
    kept. openpi maps ``t = u * 0.999 + 0.001``, GR00T ``t = (0.999 - u) / 0.999``."""
    if noise is None:
        noise = torch.randn(shape, generator=generator)
    elif tuple(noise.shape) != tuple(shape):
        raise ValueError(f"noise must be {list(shape)}, got {list(noise.shape)}")
    if u is None:
        u = torch.rand(shape[0], generator=generator) ** (1.0 / 1.5)
    return noise, u


def pad_chunk(x: Tensor, horizon: int, dim: int) -> Tensor:
    """Action chunk ``[B, C, A]`` -> ``[B, horizon, dim]``: zero-padded dims, the last step repeated along
    the horizon (supervised targets for models whose horizon / width exceed what the env executes)."""
    b, c, a = x.shape
    x = torch.nn.functional.pad(x, (0, dim - a))
    return torch.cat([x, x[:, -1:].expand(b, horizon - c, dim)], dim=1)


def sample_flow(velocity_fn: VelocityFn, noise: Tensor, cfg: FlowConfig, *, deterministic: bool = False,
                generator: AnyGenerator = None) -> FlowSample:
    """Denoise ``noise`` [B, H, D] in ``cfg.num_steps`` steps, recording the chain and log-probs.

    ``deterministic=True`` (evaluation) or ``cfg.method == "ode"`` runs pure Euler steps with zero
    log-probs and ``denoise_index = -1``. Otherwise, in non-joint mode each sample gets its own
    uniformly drawn stochastic transition (drawn per sample, which REFERENCE.md notes is equally valid
    and lowers variance vs. RLinf's one index per call), and in joint mode all transitions are
    stochastic. ``generator`` (on ``noise.device``, or a per-row
    :class:`~vlarl_cli.policies.noise.RowGenerator`) drives the index and the transition noise.
    """
    if noise.dim() != 3:
        raise ValueError(f"noise must be [B, H, D], got shape {tuple(noise.shape)}")
    b, k = noise.shape[0], cfg.num_steps
    device = noise.device
    grid = time_grid(k, device)
    stochastic = not deterministic and cfg.method != "ode"
    if stochastic and not cfg.joint_logprob:
        # flow_cps's last step has std 0; never pick it (it would give a zero log-prob "sample").
        num_choices = k - 1 if cfg.method == "flow_cps" else k
        denoise_index = noise_lib.randint(num_choices, (b,), generator, device=device)
    else:
        denoise_index = torch.full((b,), -1, dtype=torch.long, device=device)

    x = noise
    chain = [noise]
    lp_dtype = torch.promote_types(noise.dtype, torch.float32)
    logprob_sum = torch.zeros(noise.shape, dtype=lp_dtype, device=device)
    if stochastic and cfg.joint_logprob:
        logprob_sum = logprob_sum + _std_normal_logprob(noise)
    for i in range(k):
        index = torch.full((b,), i, dtype=torch.long, device=device)
        tr = _transition(velocity_fn, x, index, grid, cfg)
        if not stochastic:
            x_next = tr.ode_mean.to(noise.dtype)
        else:
            active = torch.ones(b, dtype=torch.bool, device=device) if cfg.joint_logprob else denoise_index == i
            eps = noise_lib.randn(noise.shape, generator, device=device, dtype=lp_dtype)
            noisy = tr.mean + tr.std * eps
            x_next = torch.where(active.view(-1, 1, 1), noisy, tr.ode_mean).to(noise.dtype)
            # log-prob of the value actually stored in the chain, exactly as flow_logprobs sees it
            step_lp = gaussian_logprob(x_next, tr.mean, tr.std)
            logprob_sum = logprob_sum + torch.where(active.view(-1, 1, 1), step_lp, torch.zeros_like(step_lp))
        chain.append(x_next)
        x = x_next
    if stochastic and cfg.joint_logprob:
        logprobs = logprob_sum / (k + 1)
    else:
        logprobs = logprob_sum
    return FlowSample(actions=x, chain=torch.stack(chain, dim=1), denoise_index=denoise_index,
                      logprobs=logprobs)


def flow_logprobs(velocity_fn: VelocityFn, chain: Tensor, denoise_index: Tensor, cfg: FlowConfig
                  ) -> tuple[Tensor, Tensor | None]:
    """Recompute per-element log-probs [B, H, D] of a stored chain under the current ``velocity_fn``.

    Args:
        chain: [B, K+1, H, D] from :attr:`FlowSample.chain`.
        denoise_index: [B] long from :attr:`FlowSample.denoise_index`; rows with ``-1`` (deterministic
            samples) get zero log-probs in non-joint mode.
    Returns:
        ``(logprobs, entropy)``; logprobs [B, H, D] (float32, float64 for a float64 chain); entropy
        [B, H, D] for ``flow_noise``
        (``0.5 log(2 pi e sigma^2)`` of the same terms, averaged the same way as the log-prob), else None.
    """
    if chain.dim() != 4 or chain.shape[1] != cfg.num_steps + 1:
        raise ValueError(f"chain must be [B, K+1={cfg.num_steps + 1}, H, D], got {tuple(chain.shape)}")
    b, k = chain.shape[0], cfg.num_steps
    if denoise_index.shape != (b,):
        raise ValueError(f"denoise_index must be [B={b}], got {tuple(denoise_index.shape)}")
    out_shape = (b, *chain.shape[2:])
    if cfg.method == "ode":
        lp_dtype = torch.promote_types(chain.dtype, torch.float32)
        return torch.zeros(out_shape, dtype=lp_dtype, device=chain.device), None
    grid = time_grid(k, chain.device)
    half_log_2pie = 0.5 * (_LOG_2PI + 1.0)

    if not cfg.joint_logprob:
        valid = denoise_index >= 0
        index = denoise_index.clamp(min=0).long()
        rows = torch.arange(b, device=chain.device)
        x, x_next = chain[rows, index], chain[rows, index + 1]
        tr = _transition(velocity_fn, x, index, grid, cfg)
        mask = valid.view(-1, 1, 1)
        logp = torch.where(mask, gaussian_logprob(x_next, tr.mean, tr.std), 0.0)
        entropy = None
        if tr.logvar is not None:
            entropy = torch.where(mask, half_log_2pie + 0.5 * tr.logvar, 0.0)
        return logp, entropy

    logp = _std_normal_logprob(chain[:, 0])
    entropy_sum = torch.full(out_shape, half_log_2pie, dtype=logp.dtype, device=chain.device)
    has_entropy = False
    for i in range(k):
        index = torch.full((b,), i, dtype=torch.long, device=chain.device)
        tr = _transition(velocity_fn, chain[:, i], index, grid, cfg)
        logp = logp + gaussian_logprob(chain[:, i + 1], tr.mean, tr.std)
        if tr.logvar is not None:
            has_entropy = True
            entropy_sum = entropy_sum + half_log_2pie + 0.5 * tr.logvar
    return logp / (k + 1), (entropy_sum / (k + 1) if has_entropy else None)
