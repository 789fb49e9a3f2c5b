"""ManiSkill conventions without Vulkan: gripper convention per family, the GPU (batched) bank against the
CPU bank on scripted doubles, the raw (dense) reward mode, the backend choice, the GR00T maniskill_widowx
embodiment, and the eval episode runner's counting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.envs.maniskill.make import sim_backend_for
from vlarl_cli.envs.maniskill.vector import ManiSkillSpec, ManiSkillVectorEnv
from vlarl_cli.errors import EnvError

pytestmark = pytest.mark.usefixtures("one_thread")


class Sim:
    """Single-env double: success from ``script[t]`` (t = steps since reset, clipped), reward
    ``rewards[t]``, observation ``[seed, t, 0]``; records the actions it is given."""

    def __init__(self, script: list[bool], rewards: list[float] | None = None) -> None:
        self.script, self.rewards = script, rewards or [0.0] * len(script)
        self.t, self.seed, self.actions = 0, -1, []

    def _obs(self) -> torch.Tensor:
        return torch.tensor([[float(self.seed), float(self.t), 0.0]])

    def reset(self, seed: int) -> tuple:
        self.seed, self.t = seed, 0
        return self._obs(), {}

    def step(self, action: torch.Tensor) -> tuple:
        self.actions.append(action[0].clone())
        t = min(self.t, len(self.script) - 1)
        self.t += 1
        return (self._obs(), torch.tensor([self.rewards[t]]), None, None,
                {"success": torch.tensor([self.script[t]])})

    def close(self) -> None:
        pass


class BatchedSim:
    """``num_envs`` Sims in one object with ManiSkill's batched API (reset with a seed list and env_idx)."""

    device = "cpu"  # ManiSkill's BaseEnv.device (cuda:0 for physx_cuda)

    def __init__(self, scripts: list[list[bool]]) -> None:
        self.unwrapped = self
        self.sims = [Sim(s) for s in scripts]
        self.resets: list[tuple[list[int], list[int]]] = []

    def reset(self, seed: list[int], options: dict) -> tuple:
        idx = [int(i) for i in options["env_idx"]]
        assert len(seed) == len(self.sims)  # ManiSkill: a seed list holds one seed per env
        self.resets.append((idx, list(seed)))
        for e in idx:
            self.sims[e].reset(seed[e])
        return torch.cat([s._obs() for s in self.sims]), {}

    def step(self, actions: torch.Tensor) -> tuple:
        outs = [s.step(actions[e:e + 1]) for e, s in enumerate(self.sims)]  # every env steps, finished too
        return (torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs]), None, None,
                {"success": torch.cat([o[4]["success"] for o in outs])})

    def close(self) -> None:
        pass


def test_each_policy_declares_its_gripper_convention() -> None:
    """The policy says which gripper its env actions speak (keys.policy_gripper); the env is told, never infers."""
    from vlarl_cli.policies.gr00t import ModelSettings as Gr00tSettings
    from vlarl_cli.policies.gr00t import build_policy as build_gr00t
    from vlarl_cli.policies.toy import ModelSettings as ToySettings
    from vlarl_cli.policies.toy import build_policy as build_toy

    def gr00t(tag: str) -> torch.nn.Module:
        return build_gr00t(Gr00tSettings(model_type="gr00t", preset="tiny", embodiment_tag=tag), "cpu")

    assert keys.policy_gripper(gr00t("libero_franka")) == "libero"  # -sign(2 g - 1) of the model's [0, 1]
    assert keys.policy_gripper(gr00t("maniskill_widowx")) == "maniskill"  # passed unchanged (RLinf)
    assert keys.policy_gripper(build_toy(ToySettings(model_type="toy_gaussian"), "cpu")) == "maniskill"
    assert keys.policy_gripper(torch.nn.Linear(1, 1)) == "libero"  # pi0 / OFT: LIBERO's processors

    class Odd(torch.nn.Module):
        env_gripper = "sideways"

    with pytest.raises(ValueError, match="sideways"):
        keys.policy_gripper(Odd())


def test_libero_gripper_is_negated_into_maniskills_and_matches_rlinf_for_oft() -> None:
    from vlarl_cli.policies.gripper import gripper_to_env

    # OpenVLA-OFT's model gripper g in [0, 1] (1 = open): the policy emits LIBERO's -sign(2g - 1); RLinf's
    # prepare_actions_for_maniskill sends 2 * (g > 0.5) - 1 (ManiSkill: +1 open). The env must send that.
    g = torch.tensor([0.9, 0.1, 0.7, 0.3])
    chunk = torch.zeros(1, 4, 7)
    chunk[0, :, :6] = torch.linspace(-0.5, 0.5, 6)
    chunk[0, :, 6] = gripper_to_env("zero_one_to_sign", g)
    for convention, expected in (("libero", 2.0 * (g > 0.5).float() - 1.0), ("maniskill", gripper_to_env("zero_one_to_sign", g))):
        sim = Sim([False] * 8)
        env = ManiSkillVectorEnv(ManiSkillSpec(num_envs=1, gripper=convention, max_episode_steps=8), sims=[sim])
        env.reset([0])
        env.step_chunk(chunk)
        sent = torch.stack(sim.actions)
        assert torch.equal(sent[:, 6], expected)
        assert torch.equal(sent[:, :6], chunk[0, :, :6])  # pose deltas untouched


def test_batched_gpu_bank_gives_the_cpu_banks_episodes() -> None:
    scripts = [[False, False, True] + [True] * 9, [False] * 12, [False, True] + [True] * 10, [False] * 12]
    spec = ManiSkillSpec(num_envs=4, max_episode_steps=5, auto_reset=True, reward_coef=2.0, seed=3)
    cpu = ManiSkillVectorEnv(spec, sims=[Sim(s) for s in scripts])
    batched = BatchedSim(scripts)
    gpu = ManiSkillVectorEnv(spec, batched_sim=batched)
    obs_c, obs_g = cpu.reset(), gpu.reset()
    assert torch.equal(obs_c[keys.STATES], obs_g[keys.STATES])
    for _ in range(4):
        chunk = torch.rand(4, 3, 7) * 2 - 1
        a, b = cpu.step_chunk(chunk), gpu.step_chunk(chunk)
        assert torch.equal(a[0][keys.STATES], b[0][keys.STATES])
        assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])
        for k in (keys.SUCCESS, keys.TRUNCATED, "episode_done", keys.SUCCESS_ONCE, keys.RETURN, keys.EPISODE_LEN):
            assert torch.equal(a[3][k], b[3][k]), k
    # env 0 succeeds at its 3rd step of the first chunk and is reset alone, with every env's seed passed
    idx, seeds = batched.resets[1]
    assert idx == [0, 2] and seeds == cpu.reset_state_ids.tolist()


def test_raw_reward_mode_scales_the_task_reward_and_differences_it() -> None:
    dense = [0.1, 0.3, 0.2, 1.0]
    for rel, expected in ((False, [0.05, 0.15, 0.1, 0.5]), (True, [0.05, 0.1, -0.05, 0.4])):
        sim = Sim([False, False, False, True], dense)
        env = ManiSkillVectorEnv(ManiSkillSpec(num_envs=1, reward_mode="raw", reward_coef=0.5, use_rel_reward=rel,
                                               max_episode_steps=4), sims=[sim])
        env.reset([0])
        _, rewards, dones, info = env.step_chunk(torch.zeros(1, 4, 7))
        np.testing.assert_allclose(rewards[0].numpy(), expected, atol=1e-7)
        assert dones[0].tolist() == [False, False, False, True] and info[keys.SUCCESS_ONCE][0]


def test_the_gpu_backend_is_chosen_in_one_place_and_refused_without_cuda() -> None:
    assert sim_backend_for("cpu") == "cpu"
    assert sim_backend_for("gpu", cuda_available=True) == "physx_cuda"
    with pytest.raises(EnvError, match="no CUDA device") as err:
        sim_backend_for("gpu", cuda_available=False)
    assert "sim_backend=cpu" in str(err.value)
    with pytest.raises(EnvError, match="not a ManiSkill backend"):
        sim_backend_for("physx_gpu")
    with pytest.raises(EnvError, match="GRPO groups"):  # equal seeds do not give equal scenes on ManiSkill's GPU
        ManiSkillSpec(num_envs=4, group_size=2, sim_backend="physx_cuda").validate()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_a_gpu_config_is_refused_on_this_machine_before_any_scene_is_built() -> None:
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.envs import make_env

    config = load_config("maniskill_pushcube_ppo_mlp", ["env.train.init_params.sim_backend=gpu"]).config
    with pytest.raises(EnvError, match="physx_cuda"):
        make_env(config, config.env.train, num_envs=2, rank=0, group_size=1, cameras=(), gripper="maniskill",
                 record_video=False, stages=1)


def test_gr00t_maniskill_embodiment_reads_one_camera_and_a_zero_state() -> None:
    from vlarl_cli.policies.gr00t import ModelSettings, build_policy

    torch.manual_seed(0)
    policy = build_policy(ModelSettings(model_type="gr00t", preset="tiny", embodiment_tag="maniskill_widowx",
                                        num_action_chunks=5), "cpu")
    m = policy.modality
    assert m.video_keys == ("ego_view",) and m.state_keys == (("left_arm", 7),) and m.gripper_convention == "none"
    images = torch.randint(0, 255, (2, 32, 32, 3), dtype=torch.uint8)
    outs = []
    for states in (torch.zeros(2, 8), torch.randn(2, 8) * 5):
        obs = {keys.MAIN_IMAGES: images, keys.STATES: states, keys.TASK_DESCRIPTIONS: ["pick the cube"] * 2}
        outs.append(policy.sample(obs, deterministic=True, generator=torch.Generator().manual_seed(1)).actions)
    assert outs[0].shape == (2, 5, 7) and torch.equal(outs[0], outs[1])  # RLinf feeds this embodiment zeros


def test_eval_runner_counts_episodes_in_seed_order() -> None:
    from vlarl_cli.policies.toy import ToyGaussianPolicy
    from vlarl_cli.training.evaluation.maniskill import run_maniskill_episodes

    class SeedSim(Sim):  # even seeds succeed at their 2nd step, odd ones never
        def step(self, action: torch.Tensor) -> tuple:
            self.script = [False] + [self.seed % 2 == 0] * 7
            self.rewards = [0.0] * 8
            return super().step(action)

    env = ManiSkillVectorEnv(ManiSkillSpec(num_envs=2, max_episode_steps=4, auto_reset=False, record_video=False),
                             sims=[SeedSim([False]), SeedSim([False])])
    policy = ToyGaussianPolicy(state_dim=3, action_dim=7, chunk=3)
    records = run_maniskill_episodes(policy, env, [4, 5, 6, 7, 8], temperature=None, policy_seed=0)
    assert [r["seed"] for r in records] == [4, 5, 6, 7, 8]
    assert [r["success"] for r in records] == [True, False, True, False, True]
    assert [r["episode_len"] for r in records] == [2, 4, 2, 4, 2]
    assert [r["return"] for r in records] == [1.0, 0.0, 1.0, 0.0, 1.0]
