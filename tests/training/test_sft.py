"""`vlarl sft`: every family's supervised loss (hand cases, exact action-space inversions, it learns), and the
behaviour-cloning run (toy: success goes up; LIBERO: demos -> tiny pi0 -> a checkpoint that loads)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from vlarl_cli import keys
from vlarl_cli.config.loading import load_config
from vlarl_cli.config.schema import ModelConfig
from vlarl_cli.errors import ConfigError, VlarlError
from vlarl_cli.policies.registry import build_policy
from vlarl_cli.policies.toy import ToyFlowPolicy, ToyGaussianPolicy, ToyTokenPolicy

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _toy_obs(b: int = 6, seed: int = 0) -> dict[str, Any]:
    return {keys.STATES: torch.randn(b, 4, generator=torch.Generator().manual_seed(seed))}


def _libero_obs(b: int = 4, size: int = 40, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    return {
        keys.MAIN_IMAGES: torch.randint(0, 256, (b, size, size, 3), generator=g, dtype=torch.uint8),
        keys.WRIST_IMAGES: torch.randint(0, 256, (b, size, size, 3), generator=g, dtype=torch.uint8),
        keys.STATES: torch.rand(b, 8, generator=g) * 2 - 1,
        keys.TASK_DESCRIPTIONS: ["pick up the black bowl", "open the top drawer"] * (b // 2),
    }


def _libero_actions(b: int, c: int, seed: int = 1) -> torch.Tensor:
    """Env-space actions: 6 continuous dims in (-0.9, 0.9) and a +-1 gripper (LIBERO convention)."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.rand(b, c, 7, generator=g) * 2 - 1) * 0.9
    a[..., -1] = torch.where(a[..., -1] > 0, 1.0, -1.0)
    return a


# --------------------------------------------------------------------------------------------------
# hand-checkable losses


class _Fixed(nn.Module):
    """A stand-in velocity MLP returning a fixed ``[B, C*A]`` output (and recording its inputs)."""

    def __init__(self, out: torch.Tensor) -> None:
        super().__init__()
        self.out = out
        self.inputs: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inputs.append(x)
        return self.out


def test_toy_flow_loss_is_zero_for_the_true_velocity_and_the_target_energy_for_zero():
    policy = ToyFlowPolicy(chunk=3, seed=0)
    obs = _toy_obs(5)
    g = torch.Generator().manual_seed(2)
    actions, noise = torch.randn(5, 3, 2, generator=g), torch.randn(5, 3, 2, generator=g)
    time = torch.tensor([0.001, 0.2, 0.5, 0.8, 1.0])
    # openpi's target u = noise - actions: a model returning exactly u has zero loss ...
    policy.velocity = _Fixed((noise - actions).reshape(5, -1))
    assert policy.supervised_loss(obs, actions, noise=noise, time=time).item() == 0.0
    # ... and one returning 0 pays the mean of u^2, whatever the times
    policy.velocity = _Fixed(torch.zeros(5, 6))
    loss = policy.supervised_loss(obs, actions, noise=noise, time=time)
    torch.testing.assert_close(loss, ((noise - actions) ** 2).mean())
    # the model input is x_t = t noise + (1 - t) actions (then t, then the state)
    x_in = policy.velocity.inputs[-1]
    tt = time.view(5, 1, 1)
    torch.testing.assert_close(x_in[:, :6], (tt * noise + (1 - tt) * actions).reshape(5, -1))
    torch.testing.assert_close(x_in[:, 6], time)


def test_toy_flow_times_follow_openpi_beta():
    """t = Beta(1.5, 1) * 0.999 + 0.001: support [0.001, 1], mean 0.6 * 0.999 + 0.001, CDF ((t - 0.001) / 0.999)^1.5."""
    n = 20000
    policy = ToyFlowPolicy(chunk=1, seed=0)
    policy.velocity = _Fixed(torch.zeros(n, 2))
    policy.supervised_loss(_toy_obs(n), torch.zeros(n, 1, 2), generator=torch.Generator().manual_seed(0))
    t = policy.velocity.inputs[-1][:, 2]
    assert t.min() >= 0.001 and t.max() <= 1.0
    assert abs(t.mean().item() - (0.6 * 0.999 + 0.001)) < 0.01  # std of the mean ~ 0.0017
    assert abs((t < 0.5).float().mean().item() - ((0.5 - 0.001) / 0.999) ** 1.5) < 0.015


def test_toy_gaussian_nll_and_token_cross_entropy_by_hand():
    obs = _toy_obs(3)
    actions = torch.tensor([[[0.3, -0.2], [0.9, -0.95]]]).expand(3, 2, 2).clone()
    gauss = ToyGaussianPolicy(chunk=2, init_std=0.5, seed=0)
    mean = gauss.mean(obs[keys.STATES]).view(3, 2, 2)
    nll = 0.5 * ((actions - mean) / 0.5) ** 2 + math.log(0.5) + 0.5 * math.log(2 * math.pi)
    torch.testing.assert_close(gauss.supervised_loss(obs, actions), nll.mean())
    token = ToyTokenPolicy(chunk=2, n_bins=4, seed=0)
    logp = torch.log_softmax(token.logits(obs[keys.STATES]).view(3, 2, 2, 4), dim=-1)
    bins = torch.tensor([[2, 1], [3, 0]])  # bins of width 0.5 over [-1, 1]: 0.3 -> 2, -0.2 -> 1, 0.9 -> 3, -0.95 -> 0
    expected = -logp.gather(-1, bins.expand(3, 2, 2)[..., None]).mean()
    torch.testing.assert_close(token.supervised_loss(obs, actions), expected)


# --------------------------------------------------------------------------------------------------
# the env -> model action mapping is the exact inverse of what sample() does


def test_pi0_targets_invert_the_output_processing():
    """With gripper from_01, the delta transform and mean/std statistics, the model-space target that the
    loss regresses maps back to the demonstration's env actions through ``actions_to_env``."""
    from vlarl_cli.policies.normalization import NormStats
    from vlarl_cli.policies.pi0.config import preset
    from vlarl_cli.policies.pi0.policy import Pi0Policy

    torch.manual_seed(0)
    stats = {"state": NormStats(mean=torch.full((8,), 0.1), std=torch.full((8,), 2.0)),
             "actions": NormStats(mean=torch.linspace(-0.2, 0.2, 7), std=torch.linspace(0.5, 1.5, 7))}
    policy = Pi0Policy(preset("tiny", "pi0", gripper="from_01", extra_delta_transform=True,
                              num_action_chunks=3), norm_stats=stats).eval()
    obs, actions = _libero_obs(4), _libero_actions(4, 3)
    seen: list[torch.Tensor] = []

    def expert_forward(cache: Any, state: Any, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        seen.append(x_t)
        return x_t

    policy.expert_forward = expert_forward  # type: ignore[method-assign]
    policy.velocity_from_features = lambda x_t: -x_t  # type: ignore[method-assign]
    shape = (4, policy.cfg.action_horizon, policy.cfg.max_action_dim)
    # t = 0 and zero noise: x_t is the target and u = -target, so the "model" -x_t is exact
    loss = policy.supervised_loss(obs, actions, noise=torch.zeros(shape), time=torch.zeros(4))
    assert loss.item() == 0.0
    target = seen[0]
    raw_state = policy.processor.prepare(obs)["raw_state"]
    torch.testing.assert_close(policy.processor.actions_to_env(target, raw_state), actions, atol=1e-5, rtol=0)
    # horizon padding repeats the last executed step, action padding is zero
    torch.testing.assert_close(target[:, 3:], target[:, 2:3].expand_as(target[:, 3:]))
    assert target[..., 7:].abs().max() == 0


def _hook_velocity(policy: Any, fn: Any) -> None:
    """Replace a GR00T policy's network by ``fn(x_t, t) -> velocity`` (the loss around it stays the family's)."""
    from vlarl_cli.policies.flow_matching import VelocityOutput

    policy._velocity_fn = lambda enc, embodiment_id: lambda x_t, t: VelocityOutput(velocity=fn(x_t, t))


def _tiny_gr00t(version: str, chunks: int = 3) -> Any:
    from vlarl_cli.policies.gr00t.config import ModelSettings, preset
    from vlarl_cli.policies.gr00t.modality import default_modality
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy

    torch.manual_seed(0)
    s = ModelSettings(model_type="gr00t" if version == "n1.5" else "gr00t_n1d6", preset="tiny",
                      num_action_chunks=chunks)
    cfg = preset("tiny", version)
    return Gr00tPolicy(cfg, s, default_modality(s.effective_embodiment_tag, cfg)).eval()


def test_gr00t_targets_invert_the_output_processing():
    from vlarl_cli.policies.gr00t.config import ModelSettings, preset
    from vlarl_cli.policies.gr00t.modality import default_modality
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy

    torch.manual_seed(0)
    s = ModelSettings(model_type="gr00t", preset="tiny", num_action_chunks=3)
    cfg = preset("tiny", "n1.5")
    modality = default_modality(s.effective_embodiment_tag, cfg)
    lo, _ = modality._bounds("action")
    modality.statistics["action"] = {name: {**v, "min": [x * 2 - 0.1 for x in v["min"]],
                                            "max": [x * 1.5 + 0.2 for x in v["max"]]}
                                     for name, v in modality.statistics["action"].items()}
    policy = Gr00tPolicy(cfg, s, modality).eval()
    assert not torch.equal(modality._bounds("action")[0], lo)
    obs, actions = _libero_obs(4), _libero_actions(4, 3)
    seen: list[torch.Tensor] = []
    _hook_velocity(policy, lambda x_t, t: seen.append(x_t) or x_t)
    shape = (4, cfg.action_horizon, cfg.action_dim)
    # GR00T time: t = 1 is data, so x_t = target and the velocity target is target - 0
    loss = policy.supervised_loss(obs, actions, noise=torch.zeros(shape), time=torch.ones(4))
    assert loss.item() == 0.0
    target = seen[0].float()
    back = modality.to_env_action(modality.unnormalize_action(target[:, :3]))
    torch.testing.assert_close(back, actions, atol=1e-5, rtol=0)


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_gr00t_supervised_time_follows_each_release(version):
    """Isaac-GR00T's sample_time: N1.5 ``t = (s - u) / s``, N1.6 ``t = (1 - u) * s`` (s = 0.999, u ~ Beta(1.5, 1)),
    drawn after the noise from the same generator."""
    policy = _tiny_gr00t(version)
    cfg = policy.config
    seen: list[torch.Tensor] = []
    _hook_velocity(policy, lambda x_t, t: seen.append(t) or x_t)
    policy.supervised_loss(_libero_obs(4), _libero_actions(4, 3), generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    torch.randn((4, cfg.action_horizon, cfg.action_dim), generator=g)
    u = torch.rand(4, generator=g) ** (1.0 / 1.5)
    expected = (1 - u) * 0.999 if version == "n1.6" else (0.999 - u) / 0.999
    torch.testing.assert_close(seen[0].float(), expected, rtol=0, atol=1e-7)


def test_gr00t_supervised_loss_covers_the_whole_horizon():
    """As Isaac-GR00T, the loss averages over every given horizon step (sft gives the whole horizon), not only
    the C steps an env executes: an error at the last horizon step counts with a full-horizon chunk only."""
    policy = _tiny_gr00t("n1.6")
    cfg, h = policy.config, policy.config.action_horizon
    assert policy.supervised_chunk == h > 3

    def wrong_at_the_last_step(x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        out = x_t.clone()
        out[:, -1] += 1.0
        return out

    _hook_velocity(policy, wrong_at_the_last_step)
    zeros, ones = torch.zeros(2, h, cfg.action_dim), torch.ones(2)
    obs = _libero_obs(2)
    executed = policy.supervised_loss(obs, _libero_actions(2, 3), noise=zeros, time=ones)
    whole = policy.supervised_loss(obs, _libero_actions(2, h), noise=zeros, time=ones)
    assert executed.item() == 0.0
    torch.testing.assert_close(whole, torch.tensor(1.0 / h))
    with pytest.raises(ValueError, match="T <= "):
        policy.supervised_loss(obs, _libero_actions(2, h + 1), noise=zeros, time=ones)


def test_oft_token_targets_decode_to_the_demonstrated_actions(monkeypatch):
    from vlarl_cli.policies.openvla_oft.config import preset
    from vlarl_cli.policies.openvla_oft.policy import OftPolicy

    stats = {"libero_10_no_noops": {"action": {"q01": [-0.5, -0.4, -0.9, -0.1, -0.2, -0.3, 0.0],
                                               "q99": [0.5, 0.8, 0.9, 0.1, 0.2, 0.3, 1.0],
                                               "mask": [True] * 6 + [False]}}}
    torch.manual_seed(0)
    policy = OftPolicy(preset("tiny", unnorm_key="libero_10", num_action_chunks=2), dataset_statistics=stats).eval()
    obs = _libero_obs(4)
    actions = _libero_actions(4, 2)
    q01, q99 = torch.tensor(stats["libero_10_no_noops"]["action"]["q01"]), torch.tensor(
        stats["libero_10_no_noops"]["action"]["q99"])
    actions[..., :6] = q01[:6] + (actions[..., :6] + 0.9) / 1.8 * (q99[:6] - q01[:6])  # inside [q01, q99]
    captured: list[torch.Tensor] = []
    real = torch.nn.functional.cross_entropy
    monkeypatch.setattr(torch.nn.functional, "cross_entropy",
                        lambda logits, target: (captured.append(target), real(logits, target))[1])
    loss = policy.supervised_loss(obs, actions)
    assert torch.isfinite(loss)
    k = captured[0].view(4, 2, 7)
    decoded = policy.processor.actions_to_env(k)
    width = 2.0 / (policy.cfg.n_action_bins - 1) * (q99 - q01) / 2  # one bin, in env units
    assert ((decoded - actions).abs()[..., :6] <= width[:6]).all()
    torch.testing.assert_close(decoded[..., 6], actions[..., 6])  # the gripper sign survives exactly


# --------------------------------------------------------------------------------------------------
# every family learns a fixed batch

FAMILIES = {
    "toy_flow": (lambda: ToyFlowPolicy(state_dim=4, action_dim=2, chunk=4, seed=0), 1e-2, 40, 0.5),
    "toy_gaussian": (lambda: ToyGaussianPolicy(state_dim=4, action_dim=2, chunk=4, seed=0), 1e-2, 40, 0.5),
    "toy_token": (lambda: ToyTokenPolicy(state_dim=4, action_dim=2, chunk=4, seed=0), 1e-2, 40, 0.5),
    "pi0": (lambda: build_policy(ModelConfig(model_type="pi0", preset="tiny", num_action_chunks=4,
                                             train_expert_only=False)), 2e-3, 25, 0.5),
    "pi05": (lambda: build_policy(ModelConfig(model_type="pi05", preset="tiny", num_action_chunks=4,
                                              train_expert_only=False)), 2e-3, 25, 0.5),
    "gr00t": (lambda: build_policy(ModelConfig(model_type="gr00t", preset="tiny", num_action_chunks=4)), 1e-3, 60,
              0.6),
    "gr00t_n1d6": (lambda: build_policy(ModelConfig(model_type="gr00t_n1d6", preset="tiny",
                                                    num_action_chunks=4)), 1e-3, 60, 0.6),
    "openvla_oft": (lambda: build_policy(ModelConfig(model_type="openvla_oft", preset="tiny", num_action_chunks=4)),
                    3e-3, 40, 0.75),  # 112 tokens of 256 bins from ln(256) = 5.5: slower
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_supervised_loss_has_gradients_and_fits_a_fixed_batch(family):
    make, lr, steps, ratio = FAMILIES[family]
    torch.manual_seed(0)
    policy = make()
    toy = family.startswith("toy")
    obs = _toy_obs(8) if toy else _libero_obs(4)
    actions = torch.rand(8, 4, 2, generator=torch.Generator().manual_seed(1)) * 2 - 1 if toy else _libero_actions(4, 4)

    def loss_fn() -> torch.Tensor:
        if hasattr(policy, "flow") or family in ("pi0", "pi05", "gr00t", "gr00t_n1d6"):
            # the same noise and times at every step: a fixed regression problem
            return policy.supervised_loss(obs, actions, generator=torch.Generator().manual_seed(5))
        return policy.supervised_loss(obs, actions)

    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr)
    first = loss_fn()
    assert first.dim() == 0 and torch.isfinite(first)
    first.backward()
    assert sum(float(p.grad.abs().sum()) for p in params if p.grad is not None) > 0
    optimizer.step()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        last = loss_fn().item()
    assert last < ratio * first.item(), (family, first.item(), last)


def test_actions_of_the_wrong_shape_are_refused():
    with pytest.raises(ValueError, match="actions must be"):
        ToyFlowPolicy(chunk=4).supervised_loss(_toy_obs(2), torch.zeros(2, 3, 2))


# --------------------------------------------------------------------------------------------------
# the SFT run


def _toy_success(policy: Any, n: int = 256) -> float:
    from vlarl_cli.envs.toy import ReachEnv
    from vlarl_cli.training.toy import collect_toy, episode_success

    env = ReachEnv(n, chunk=4, max_steps=16)
    out = collect_toy(env, policy, deterministic=True, generator=torch.Generator().manual_seed(123))
    return episode_success(out).float().mean().item()


def test_toy_sft_lifts_deterministic_success(tmp_path):
    from vlarl_cli.training.evaluation import load_policy
    from vlarl_cli.training.sft import train_sft

    run = tmp_path / "run"
    loaded = load_config("sft_toy_reach", [f"runner.logger.log_path={run}"])
    torch.manual_seed(loaded.config.actor.seed)  # the init train_sft starts from
    initial = build_policy(loaded.config.actor.model)
    before = _toy_success(initial)
    result = train_sft(loaded, record=100, steps=200, quiet=True)
    ckpt = run / "checkpoints" / "global_step_200"
    assert result.checkpoint == ckpt and (run / "checkpoints" / "latest").read_text().strip() == "global_step_200"
    # rl-train's resumable checkpoint: weights + optimizer + RNG + trainer state, and the SFT record
    assert sorted(p.name for p in ckpt.iterdir()) == ["checksums.json", "config.yaml", "model.safetensors", "optimizer.pt",
                                                      "rng.pt", "sft_state.json", "trainer_state.json"]
    policy, _, _ = load_policy(ckpt, None)  # what `vlarl eval --checkpoint` does
    after = _toy_success(policy)
    # the loss never touches the critic: the value head leaves SFT exactly as it was initialised
    for name, tensor in initial.value_head.state_dict().items():
        assert torch.equal(policy.value_head.state_dict()[name], tensor), name
    assert not torch.equal(policy.velocity[0].weight, initial.velocity[0].weight)
    assert before < 0.2 and after > 0.8, (before, after)
    rows = [json.loads(line) for line in (run / "sft_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(2, 201, 2))
    assert {"train/sft/loss", "train/sft/grad_norm", "train/sft/lr"} <= set(rows[0])
    assert np.mean([r["train/sft/loss"] for r in rows[-10:]]) < 0.4 * np.mean([r["train/sft/loss"] for r in rows[:3]])
    state = json.loads((ckpt / "sft_state.json").read_text())
    assert state["steps"] == 200 and state["episodes"] == 100 and state["last_loss"] == result.last_loss


def test_toy_sft_is_repeatable(tmp_path):
    from safetensors.torch import load_file

    from vlarl_cli.training.demos import record_toy_demos
    from vlarl_cli.training.sft import train_sft

    record_toy_demos(tmp_path / "demos", 20, seed=0)
    out = []
    for name in ("a", "b"):
        loaded = load_config("sft_toy_reach", [f"runner.logger.log_path={tmp_path / name}"])
        out.append(train_sft(loaded, demos=tmp_path / "demos", steps=4, output=tmp_path / name / "ckpt", quiet=True))
    assert out[0].losses == out[1].losses
    wa, wb = (load_file(str(r.checkpoint / "model.safetensors")) for r in out)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not (tmp_path / "a" / "checkpoints").exists()  # -o: only the given folder


def test_interrupted_sft_resumes_into_the_uninterrupted_run(tmp_path, monkeypatch):
    """Killed after step 4 of 6 (checkpoints every 2 steps), ``--resume auto`` repeats the uninterrupted run:
    same losses, same final weights (sample order, flow noise, optimizer and schedule all restored)."""
    from safetensors.torch import load_file

    from vlarl_cli.training import sft as sft_mod
    from vlarl_cli.training.demos import record_toy_demos

    record_toy_demos(tmp_path / "demos", 10, seed=0)
    over = ["sft.save_interval=2", "actor.model.model_type=toy_flow"]

    def run(name: str, resume: str | None = None) -> sft_mod.SftResult:
        loaded = load_config("sft_toy_reach", [f"runner.logger.log_path={tmp_path / name}", *over])
        return sft_mod.train_sft(loaded, demos=tmp_path / "demos", steps=6, quiet=True, resume=resume)

    full = run("full")
    real_step = sft_mod._Learner.step

    def dying_step(self, step, batches):
        if step == 5:
            raise KeyboardInterrupt  # killed during step 5: the step-4 checkpoint is the last one
        return real_step(self, step, batches)

    monkeypatch.setattr(sft_mod._Learner, "step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        run("cut")
    monkeypatch.setattr(sft_mod._Learner, "step", real_step)
    with pytest.raises(ConfigError, match="already holds an SFT run") as err:
        run("cut")  # a new run never overwrites the interrupted one
    assert "--resume auto" in err.value.fix
    resumed = run("cut", resume="auto")
    assert resumed.losses == full.losses[4:]
    wa, wb = (load_file(str(r.checkpoint / "model.safetensors")) for r in (full, resumed))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    rows = [json.loads(line) for line in (tmp_path / "cut" / "sft_metrics.jsonl").read_text().splitlines()]
    full_rows = [json.loads(line) for line in (tmp_path / "full" / "sft_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["train/sft/loss"] for r in rows] == [r["train/sft/loss"] for r in full_rows]


def test_sft_output_folder_is_never_replaced(tmp_path):
    from vlarl_cli.training.demos import record_toy_demos
    from vlarl_cli.training.sft import train_sft

    record_toy_demos(tmp_path / "demos", 5, seed=0)
    mine = tmp_path / "my_folder"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    loaded = load_config("sft_toy_reach", [f"runner.logger.log_path={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match="already exists") as err:
        train_sft(loaded, demos=tmp_path / "demos", steps=1, output=mine, quiet=True)
    assert "does not exist yet" in err.value.fix
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"] and (mine / "thesis.tex").read_text() == "precious"
    (tmp_path / "cfgdir").mkdir()
    (tmp_path / "cfgdir" / "config.yaml").write_text("my: own\n")
    foreign = load_config("sft_toy_reach", [f"runner.logger.log_path={tmp_path / 'cfgdir'}"])
    with pytest.raises(ConfigError, match="not a vlarl run config"):
        train_sft(foreign, demos=tmp_path / "demos", steps=1, quiet=True)
    assert (tmp_path / "cfgdir" / "config.yaml").read_text() == "my: own\n"


def test_sft_errors_name_the_problem_and_the_fix(tmp_path):
    from vlarl_cli.training.demos import Episode, save_episode
    from vlarl_cli.training.sft import run_sft, train_sft

    (tmp_path / "empty").mkdir()
    base = [f"runner.logger.log_path={tmp_path / 'run'}"]
    with pytest.raises(VlarlError, match="nor a folder of episode_") as err:
        run_sft(config="sft_toy_reach", demos=tmp_path / "empty", overrides=base, steps=2, output=None)
    assert "--record" in err.value.fix
    save_episode(tmp_path / "d7" / "episode_00000.npz",
                 Episode(states=np.zeros((3, 4), np.float32), actions=np.zeros((3, 7), np.float32)))
    with pytest.raises(ConfigError, match="7-d actions but the policy") as err:
        train_sft(load_config("sft_toy_reach", base), demos=tmp_path / "d7", steps=2, quiet=True)
    assert "action_dim" in err.value.fix
    with pytest.raises(ConfigError, match="No number of SFT steps"):
        train_sft(load_config("sft_toy_reach", [f"runner.logger.log_path={tmp_path / 'run3'}", "runner.max_steps=-1"]),
                  demos=tmp_path / "d7", quiet=True)


# --------------------------------------------------------------------------------------------------
# LIBERO


@pytest.fixture(scope="module")
def libero_demos(tmp_path_factory):
    try:
        from vlarl_cli.envs.libero.setup import prepare_libero

        prepare_libero()
    except Exception as err:  # libero / robosuite / assets / GL missing: skip with the reason
        pytest.skip(f"LIBERO not usable: {err}")
    from vlarl_cli.training.demos import record_expert_demos

    folder = tmp_path_factory.mktemp("libero_demos")
    # one camera keeps the recording at ~40 s (every step is rendered); pi0 masks the missing wrist view
    record_expert_demos(folder, 1, suite="libero_spatial", task_ids=[0], cameras=("main",), settle_steps=5,
                        max_episode_steps=220)
    return folder


@pytest.mark.libero
def test_libero_expert_demos_train_a_tiny_pi0_whose_checkpoint_loads(libero_demos, tmp_path):
    from vlarl_cli.training.demos import load_episodes
    from vlarl_cli.training.sft import train_sft

    (ep,) = load_episodes(libero_demos)
    assert ep.success and ep.meta["suite"] == "libero_spatial" and ep.meta["task_id"] == 0
    assert ep.images[keys.MAIN_IMAGES].shape == (len(ep), 128, 128, 3) and ep.actions.shape == (len(ep), 7)
    assert ep.task_description and 20 < len(ep) <= 220

    run = tmp_path / "run"
    loaded = load_config("sft_quickstart", [f"runner.logger.log_path={run}", "actor.micro_batch_size=8",
                                            "actor.global_batch_size=8"])
    result = train_sft(loaded, demos=libero_demos, steps=120, quiet=True)
    losses = result.losses
    # targets normalised with the data's own statistics (unit variance): the flow loss starts near
    # E|noise - target|^2 = 2 and cannot reach 0 (flow matching's irreducible part), so the bar is a 20% drop
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10]), losses

    from safetensors.torch import load_file

    ckpt = result.checkpoint
    assert (ckpt / "vlarl_config.json").is_file() and (ckpt / "config.yaml").is_file()
    # what `vlarl rl-train actor.model.model_path=<ckpt>` builds
    model = loaded.config.actor.model.model_copy(update={"model_path": str(ckpt)})
    policy = build_policy(model)
    saved = load_file(str(next(ckpt.glob("*.safetensors"))))
    state = policy.state_dict()
    assert len(saved) > 0
    for name, tensor in state.items():
        assert torch.equal(tensor, saved[name]), name
    # and `vlarl eval --checkpoint` resolves it through the run folder's `latest`, taking the weight EMA that
    # pi0's SFT keeps beside the raw weights (openpi serves its EMA; training/ema.py)
    from vlarl_cli.training.evaluation import load_policy

    assert (ckpt / "ema" / "config.yaml").is_file()
    ema_policy = build_policy(model.model_copy(update={"model_path": str(ckpt / "ema")}))
    evaluated, _, cfg = load_policy(run, None)
    assert all(torch.equal(v, evaluated.state_dict()[k]) for k, v in ema_policy.state_dict().items())
    assert not all(torch.equal(v, evaluated.state_dict()[k]) for k, v in state.items())  # the EMA, not the raw
    assert cfg.actor.model.model_type == "openpi"


@pytest.mark.parametrize("sharding", ["full_shard", "no_shard"])
def test_two_processes_train_like_one(tmp_path, sharding):
    """Data parallel (torchrun, 2 processes, half of every global batch each; FSDP2 shards or gradients
    averaged) follows the 1-process run: the toy Gaussian loss has no sampled noise, so only float summation
    order differs."""
    import os
    import socket
    import subprocess
    import sys

    from safetensors.torch import load_file

    from vlarl_cli.training.demos import record_toy_demos

    record_toy_demos(tmp_path / "demos", 20, seed=0)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def sft(name: str, launcher: list[str], extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        args = ["sft", "--config", "sft_toy_reach", "--demos", str(tmp_path / "demos"), "--steps", "5",
                "-o", str(tmp_path / name / "ckpt"), "actor.model.model_type=toy_gaussian",
                f"actor.fsdp_config.sharding_strategy={sharding}",
                f"runner.logger.log_path={tmp_path / name}", *extra]
        return subprocess.run([sys.executable, *launcher, "-m", "vlarl_cli.cli.main", *args], capture_output=True,
                              text=True, timeout=300, env=env)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    one = sft("one", [])
    if sharding == "full_shard":  # torchrun started by hand
        two = sft("two", ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port)])
    else:  # vlarl relaunches itself through torchrun, keeping each rank's output in <run>/logs
        two = sft("two", [], ("--nproc-per-node", "2", "--master-port", str(port)))
    assert one.returncode == 0, one.stderr[-2000:]
    assert two.returncode == 0, two.stderr[-2000:]
    assert "(2 process(es))" in two.stdout
    if sharding == "no_shard":
        attempts = list((tmp_path / "two" / "logs" / "node0").glob("*/attempt_0"))
        assert len(attempts) == 1 and "(2 process(es))" in (attempts[0] / "0" / "stdout.log").read_text()
        assert (attempts[0] / "1" / "stderr.log").is_file()
    losses = [[json.loads(line)["train/sft/loss"] for line in (tmp_path / n / "sft_metrics.jsonl").read_text().splitlines()]
              for n in ("one", "two")]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    wa, wb = (load_file(str(tmp_path / n / "ckpt" / "model.safetensors")) for n in ("one", "two"))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-5, atol=1e-6)
    assert not torch.equal(wa["log_std"], torch.zeros_like(wa["log_std"]))  # it trained


@pytest.mark.parametrize("argv", [[], ["--short"], ["--rl-envs", "12", "--group-size", "3"]])
def test_learning_run_stage_configs_validate(argv, tmp_path, monkeypatch):
    """benchmarks/learning_run.py: its RL stage overrides and SFT preset load as valid configs (batch sizes
    divide the samples of an iteration, GRPO groups fit the envs) for the full and the short run."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "learning_run.py"
    monkeypatch.syspath_prepend(str(path.parent))  # as when it runs as a script: its folder's _bench helper
    spec = importlib.util.spec_from_file_location("learning_run", path)
    lr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lr)
    args = lr.parse(["--out", str(tmp_path), *argv])
    cfg = load_config("libero_tiny_ppo", lr.rl_overrides(tmp_path, args, tmp_path / "ckpt")).config
    assert cfg.algorithm.adv_type == "grpo" and cfg.train_num_envs == args.rl_envs
    assert cfg.samples_per_iteration() % cfg.actor.global_batch_size == 0
    assert cfg.actor.model.openpi.train_expert_only is False
    sft = load_config("sft_learning_run", [f"actor.model.model_path={tmp_path}"]).config
    assert sft.sft.norm_stats == "data" and sft.actor.model.num_action_chunks == cfg.actor.model.num_action_chunks
