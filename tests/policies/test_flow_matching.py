"""Flow-matching sampler: exact log-prob recomputation, hand-computed Gaussian densities, analytic ODE,
time-convention equivalence, config validation."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.flow_matching import (
    FlowConfig,
    VelocityOutput,
    flow_logprobs,
    sample_flow,
    time_grid,
)
from vlarl_cli.policies.value_head import ValueHead

B, H, D = 5, 3, 2


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class LinearVelocity(torch.nn.Module):
    """v(x, t) = x @ W + t * c (+ a learned noise log-variance), in a chosen time convention."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(0.3 * torch.randn(D, D, generator=g))
        self.c = torch.nn.Parameter(torch.randn(H, D, generator=g))
        self.n = torch.nn.Parameter(torch.randn(D, D, generator=g))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> VelocityOutput:
        v = x @ self.w + t.view(-1, 1, 1) * self.c
        return VelocityOutput(velocity=v, noise_logvar_raw=x @ self.n + t.view(-1, 1, 1))


def _gr00t_wrapper(openpi_fn):
    """The same flow expressed in GR00T's convention: t_g = 1 - tau, dx/dt_g = -dx/dtau."""

    def fn(x, t):
        out = openpi_fn(x, 1.0 - t)
        return VelocityOutput(velocity=-out.velocity, noise_logvar_raw=out.noise_logvar_raw)

    return fn


STOCHASTIC = ["flow_sde", "flow_cps", "flow_noise"]


@pytest.mark.parametrize(("method", "noise_at", "joint"),
                         list(itertools.product(STOCHASTIC, [1.0, 0.0], [False, True])))
def test_recomputed_logprobs_equal_sampled(method, noise_at, joint):
    model = LinearVelocity()
    cfg = FlowConfig(num_steps=4, method=method, noise_level=0.5, noise_at=noise_at, joint_logprob=joint)
    g = torch.Generator().manual_seed(1)
    noise = torch.randn(B, H, D, generator=g)
    with torch.no_grad():
        out = sample_flow(model, noise, cfg, generator=g)
    logp, entropy = flow_logprobs(model, out.chain, out.denoise_index, cfg)
    assert out.chain.shape == (B, 5, H, D)
    assert torch.equal(out.chain[:, 0], noise) and torch.equal(out.actions, out.chain[:, -1])
    assert logp.shape == (B, H, D) and logp.dtype == torch.float32
    torch.testing.assert_close(logp, out.logprobs, atol=1e-5, rtol=0)
    assert (out.logprobs != 0).all(), "every element of a stochastic sample must have a density"
    if joint:
        assert (out.denoise_index == -1).all()
    else:
        assert ((out.denoise_index >= 0) & (out.denoise_index < 4)).all()
    assert (entropy is not None) == (method == "flow_noise")
    # the recomputed log-prob is differentiable w.r.t. the weights (what PPO needs)
    logp.sum().backward()
    assert model.w.grad is not None and model.w.grad.abs().sum() > 0


def _reference_transition(v_fn, x, tau, tau_next, tau_1, method, a, lv_min, lv_max):
    """Independent per-transition mean/std, straight from REFERENCE.md section 3 (openpi time)."""
    out = v_fn(x, torch.full((x.shape[0],), tau))
    v = out.velocity.double()
    x = x.double()
    delta = tau - tau_next
    x0 = x - v * tau
    x1 = x + v * (1 - tau)
    if method == "flow_sde":
        sigma = a * math.sqrt(tau / (1 - (tau_1 if tau == 1.0 else tau)))
        mean = x0 * (1 - (tau - delta)) + x1 * (tau - delta - sigma**2 * delta / (2 * tau))
        std = torch.full_like(mean, math.sqrt(delta) * sigma)
    elif method == "flow_cps":
        mean = x0 * (1 - (tau - delta)) + x1 * (tau - delta) * math.cos(math.pi * a / 2)
        std = torch.full_like(mean, (tau - delta) * math.sin(math.pi * a / 2))
    else:
        mean = x0 * (1 - (tau - delta)) + x1 * (tau - delta)
        logvar = lv_min + (lv_max - lv_min) * (torch.tanh(out.noise_logvar_raw.double()) + 1) / 2
        std = torch.exp(0.5 * logvar)
    return mean, std


@pytest.mark.parametrize(("method", "joint"), list(itertools.product(STOCHASTIC, [False, True])))
def test_logprobs_match_hand_computed_gaussian(method, joint):
    model = LinearVelocity(seed=3)
    k, a = 3, 0.7
    cfg = FlowConfig(num_steps=k, method=method, noise_level=a, joint_logprob=joint)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        out = sample_flow(model, torch.randn(B, H, D, generator=g), cfg, generator=g)
        taus = [1 - i / k for i in range(k)] + [0.0]
        expected = torch.zeros(B, H, D, dtype=torch.float64)
        for b in range(B):
            terms = []
            if joint:
                terms.append(torch.distributions.Normal(0.0, 1.0).log_prob(out.chain[b, 0].double()))
            steps = range(k) if joint else [int(out.denoise_index[b])]
            for i in steps:
                x = out.chain[b : b + 1, i]
                mean, std = _reference_transition(model, x, taus[i], taus[i + 1], taus[1], method, a,
                                                  cfg.logvar_min, cfg.logvar_max)
                if std.min() == 0:  # last flow_cps step: deterministic, contributes 0
                    assert torch.allclose(out.chain[b, i + 1].double(), mean[0], atol=1e-6)
                    terms.append(torch.zeros(H, D, dtype=torch.float64))
                    continue
                terms.append(torch.distributions.Normal(mean[0], std[0]).log_prob(out.chain[b, i + 1].double()))
            expected[b] = torch.stack(terms).mean(0) if joint else terms[0]
    torch.testing.assert_close(out.logprobs.double(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("method", STOCHASTIC)
@pytest.mark.parametrize("joint", [False, True])
def test_time_conventions_are_equivalent(method, joint):
    """The same flow written in openpi and in GR00T convention gives the same chain and log-probs."""
    model = LinearVelocity(seed=5)
    outs = []
    for noise_at, fn in [(1.0, model), (0.0, _gr00t_wrapper(model))]:
        cfg = FlowConfig(num_steps=4, method=method, noise_at=noise_at, joint_logprob=joint)
        g = torch.Generator().manual_seed(11)
        with torch.no_grad():
            outs.append(sample_flow(fn, torch.randn(B, H, D, generator=g), cfg, generator=g))
    torch.testing.assert_close(outs[0].chain, outs[1].chain, atol=1e-6, rtol=0)
    torch.testing.assert_close(outs[0].logprobs, outs[1].logprobs, atol=1e-5, rtol=0)
    assert torch.equal(outs[0].denoise_index, outs[1].denoise_index)


@pytest.mark.parametrize("noise_at", [1.0, 0.0])
@pytest.mark.parametrize("k", [1, 3, 10])
def test_ode_reproduces_straight_line_flow(noise_at, k):
    """Conditional flow to one data point: x_tau = tau * eps + (1 - tau) * x_data. Euler is exact on it."""
    x_data = torch.randn(1, H, D, generator=torch.Generator().manual_seed(0))

    def openpi_v(x, t):  # dx/dtau = (x - x_data) / tau
        return VelocityOutput((x - x_data) / t.view(-1, 1, 1))

    def gr00t_v(x, t):  # dx/dt_g = (x_data - x) / (1 - t_g)
        return VelocityOutput((x_data - x) / (1 - t.view(-1, 1, 1)))

    eps = torch.randn(B, H, D, generator=torch.Generator().manual_seed(1))
    fn = openpi_v if noise_at == 1.0 else gr00t_v
    out = sample_flow(fn, eps, FlowConfig(num_steps=k, method="ode", noise_at=noise_at))
    for i, tau in enumerate(time_grid(k).tolist()):
        torch.testing.assert_close(out.chain[:, i], tau * eps + (1 - tau) * x_data, atol=1e-5, rtol=0)
    assert torch.equal(out.logprobs, torch.zeros(B, H, D)) and (out.denoise_index == -1).all()


def test_ode_converges_to_exponential_flow():
    """dx/dtau = x from tau=1 to 0 gives x(0) = x(1) / e; Euler's (1 - 1/K)^K error is known exactly."""
    eps = torch.randn(B, H, D, dtype=torch.float64)
    k = 200
    out = sample_flow(lambda x, t: VelocityOutput(x), eps, FlowConfig(num_steps=k, method="ode"))
    torch.testing.assert_close(out.actions, eps * (1 - 1 / k) ** k, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(out.actions, eps / math.e, atol=5e-3, rtol=0)


@pytest.mark.parametrize("method", ["ode", *STOCHASTIC])
def test_deterministic_mode_is_the_ode(method):
    model = LinearVelocity()
    noise = torch.randn(B, H, D)
    cfg = FlowConfig(method=method)
    with torch.no_grad():
        det = sample_flow(model, noise, cfg, deterministic=True)
        ode = sample_flow(model, noise, FlowConfig(method="ode"))
    assert torch.equal(det.chain, ode.chain)
    assert torch.equal(det.logprobs, torch.zeros(B, H, D))
    logp, _ = flow_logprobs(model, det.chain, det.denoise_index, cfg)  # -1 rows recompute to 0
    assert torch.equal(logp, torch.zeros(B, H, D))


def test_non_joint_only_the_chosen_step_is_stochastic_and_cps_never_picks_last():
    model = LinearVelocity()
    noise = torch.randn(400, H, D)
    for method in ["flow_sde", "flow_cps"]:
        cfg = FlowConfig(num_steps=3, method=method)
        with torch.no_grad():
            out = sample_flow(model, noise, cfg, generator=torch.Generator().manual_seed(0))
            ode = sample_flow(model, noise, FlowConfig(num_steps=3, method="ode"))
        counts = torch.bincount(out.denoise_index, minlength=3)
        if method == "flow_cps":
            assert counts[2] == 0 and counts[0] > 100 and counts[1] > 100
        else:
            assert (counts > 80).all()
        first = out.denoise_index == 0
        # before the chosen step the chain is the ODE chain; after it, they differ
        torch.testing.assert_close(out.chain[first, 1:2].abs().sum() > 0, torch.tensor(True))
        assert not torch.allclose(out.chain[first, 1], ode.chain[first, 1])
        torch.testing.assert_close(out.chain[~first, 1], ode.chain[~first, 1])


def test_sde_transition_has_the_stated_distribution():
    """Standardised residuals of the stochastic step are N(0, 1) (statistical check, 20k samples)."""
    n, k = 20000, 2
    x_data = torch.tensor([0.5, -1.0])

    def fn(x, t):
        return VelocityOutput((x - x_data) / t.view(-1, 1, 1))

    cfg = FlowConfig(num_steps=k, method="flow_sde", noise_level=0.8, joint_logprob=True)
    out = sample_flow(fn, torch.randn(n, 1, 2, generator=torch.Generator().manual_seed(0)), cfg,
                      generator=torch.Generator().manual_seed(1))
    mean, std = _reference_transition(fn, out.chain[:, 0], 1.0, 0.5, 0.5, "flow_sde", 0.8, 0, 0)
    z = (out.chain[:, 1].double() - mean) / std
    assert abs(z.mean().item()) < 0.03 and abs(z.std().item() - 1) < 0.03


def test_flow_noise_entropy_and_bounds():
    model = LinearVelocity()
    cfg = FlowConfig(num_steps=2, method="flow_noise")
    with torch.no_grad():
        out = sample_flow(model, torch.randn(B, H, D), cfg, generator=torch.Generator().manual_seed(0))
    _, entropy = flow_logprobs(model, out.chain, out.denoise_index, cfg)
    assert entropy is not None
    lo = 0.5 * math.log(2 * math.pi * math.e) + 0.5 * cfg.logvar_min
    hi = 0.5 * math.log(2 * math.pi * math.e) + 0.5 * cfg.logvar_max
    assert (entropy >= lo - 1e-6).all() and (entropy <= hi + 1e-6).all()


def test_flow_noise_without_noise_head_is_a_clear_error():
    with pytest.raises(ConfigError, match="noise_logvar_raw"):
        sample_flow(lambda x, t: VelocityOutput(x), torch.randn(B, H, D), FlowConfig(method="flow_noise"))


def test_config_validation():
    with pytest.raises(ConfigError, match='Did you mean "flow_sde"'):
        FlowConfig(method="flow_sdee")
    with pytest.raises(ConfigError, match="noise_at"):
        FlowConfig(noise_at=0.5)
    with pytest.raises(ConfigError, match="num_steps >= 2"):
        FlowConfig(method="flow_cps", num_steps=1)
    with pytest.raises(ConfigError, match="num_steps"):
        FlowConfig(num_steps=0)


def test_value_head_starts_at_zero_and_learns():
    torch.manual_seed(0)
    head = ValueHead(8, hidden=(16, 4))
    feats = torch.randn(6, 8)
    v = head(feats)
    assert v.shape == (6,) and torch.equal(v, torch.zeros(6))
    target = torch.arange(6.0)
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(200):
        opt.zero_grad()
        ((head(feats) - target) ** 2).mean().backward()
        opt.step()
    assert ((head(feats) - target) ** 2).mean() < 0.05
    with pytest.raises(ValueError, match="features"):
        head(torch.randn(6, 7))


@pytest.mark.parametrize("method", STOCHASTIC)
def test_bf16_chain_recomputes_exactly(method):
    """A bf16 model stores a bf16 chain; log-probs are taken of the STORED values, so they still match."""
    w = torch.randn(D, D, generator=torch.Generator().manual_seed(0)).bfloat16()

    def fn(x, t):
        v = x @ w + t.view(-1, 1, 1).bfloat16()
        return VelocityOutput(v, noise_logvar_raw=v)

    cfg = FlowConfig(num_steps=3, method=method, joint_logprob=True)
    g = torch.Generator().manual_seed(2)
    out = sample_flow(fn, torch.randn(B, H, D, generator=g).bfloat16(), cfg, generator=g)
    assert out.chain.dtype == torch.bfloat16 and out.logprobs.dtype == torch.float32
    logp, _ = flow_logprobs(fn, out.chain, out.denoise_index, cfg)
    torch.testing.assert_close(logp, out.logprobs, atol=1e-5, rtol=0)
