"""The CPU budget: cores from fake affinity / cgroup files, the split between env workers, inference and the
trainer on CPU and GPU nodes, the config overrides, and the thread switch around inference."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vlarl_cli.distributed.cpu_budget import Cores, cgroup_quota, decide, share, workers_for


def _cgroup(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    proc_file = tmp_path / "proc_self_cgroup"
    proc_file.write_text(proc)
    return root, proc_file


def test_cgroup_v2_quota_of_the_process_group(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path, "0::/job/rank0\n", {"job/rank0/cpu.max": "150000 100000", "cpu.max": "max 100000"})
    assert cgroup_quota(root, proc) == 1.5  # the process's own group wins over the hierarchy's root


def test_cgroup_v2_root_of_a_container_namespace(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path, "0::/\n", {"cpu.max": "400000 100000"})
    assert cgroup_quota(root, proc) == 4.0
    root, proc = _cgroup(tmp_path / "b", "0::/\n", {"cpu.max": "max 100000"})
    assert cgroup_quota(root, proc) is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    files = {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "250000", "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000"}
    root, proc = _cgroup(tmp_path, "3:cpu,cpuacct:/docker/abc\n1:name=systemd:/\n", files)
    assert cgroup_quota(root, proc) == 2.5
    files = {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}
    root, proc = _cgroup(tmp_path / "b", "1:cpu:/\n", files)
    assert cgroup_quota(root, proc) is None  # -1: no quota


def test_no_cgroup_files_means_no_quota(tmp_path: Path) -> None:
    assert cgroup_quota(tmp_path / "absent", tmp_path / "absent_proc") is None


@pytest.mark.parametrize(("affinity", "quota", "ranks", "want"), [
    (8, None, 1, 8), (8, 1.5, 1, 2), (8, 2.0, 1, 2), (64, None, 8, 8), (4, None, 8, 1), (3, 16.0, 1, 3)])
def test_share_of_one_rank(affinity: int, quota: float | None, ranks: int, want: int) -> None:
    assert share(affinity, quota, ranks).count == want


def test_workers_divide_the_envs() -> None:
    assert workers_for(16, None, 2) == 2
    assert workers_for(16, None, 3) == 2  # the largest divisor of 16 under the cap
    assert workers_for(10, 4, 99) == 2  # a requested count is kept as close as a divisor allows
    assert workers_for(2, None, 8) == 2


def test_cpu_node_leaves_the_inference_what_the_workers_leave() -> None:
    two = decide(device_type="cpu", num_envs=16, machine=share(2, None, 1))
    assert (two.env_workers, two.inference_threads, two.trainer_threads) == (2, 1, 2)
    eight = decide(device_type="cpu", num_envs=4, machine=share(8, None, 1))
    assert (eight.env_workers, eight.inference_threads, eight.trainer_threads) == (4, 4, 8)
    no_envs = decide(device_type="cpu", num_envs=0, machine=share(8, None, 2))  # an actor-only rank
    assert (no_envs.env_workers, no_envs.inference_threads, no_envs.trainer_threads) == (0, 4, 4)


def test_gpu_node_keeps_one_core_for_the_driving_process() -> None:
    gpu = decide(device_type="cuda", num_envs=64, machine=share(16, None, 1))
    assert gpu.env_workers == 8  # cap 15 cores, the largest divisor of 64 below it
    assert (gpu.inference_threads, gpu.trainer_threads) == (1, 2)
    offloaded = decide(device_type="cuda", num_envs=64, offload=True, machine=share(16, None, 1))
    assert offloaded.trainer_threads == 16  # the optimizer step runs on the CPU


def test_overrides_win_and_are_named() -> None:
    b = decide(device_type="cpu", num_envs=16, machine=share(2, None, 1), cores=8, inference_threads=3)
    assert (b.cores.count, b.env_workers, b.inference_threads, b.trainer_threads) == (8, 8, 3, 8)
    assert b.overridden == ("cores", "inference_threads")
    assert "set by cluster.cpu_budget: cores, inference_threads" in b.describe()
    capped = decide(device_type="cpu", num_envs=16, machine=share(8, None, 1), env_workers=4)
    assert (capped.env_workers, capped.inference_threads) == (4, 4)
    requested = decide(device_type="cpu", num_envs=16, requested_workers=16, machine=share(2, None, 1))
    assert requested.env_workers == 16  # env.*.num_workers is used as given


def test_inference_threads_are_set_and_restored() -> None:
    before = torch.get_num_threads()
    budget = decide(device_type="cpu", num_envs=0, machine=Cores(1, 1, None, 1), inference_threads=1,
                    trainer_threads=max(2, before))
    try:
        budget.apply_trainer()
        with budget.inference():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == max(2, before)
    finally:
        torch.set_num_threads(before)


def test_config_overrides_reach_the_rank_budget() -> None:
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.envs import rank_budget

    config = load_config("quickstart", ["cluster.cpu_budget.trainer_threads=3"]).config
    b = rank_budget(config, "cpu", 16, machine=share(2, None, 1))
    assert (b.env_workers, b.inference_threads, b.trainer_threads) == (2, 1, 3)  # quickstart asks 2 workers
    with pytest.raises(Exception, match="inference_threads"):
        load_config("quickstart", ["cluster.cpu_budget.inference_threads=0"])


def test_dry_run_plans_rank_0_on_this_machine() -> None:
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.dry_run import cpu_plan

    config = load_config("quickstart", ["cluster.component_placement={env: 0, rollout: 1, actor: 0-1}"],
                         world_size=2).config
    plan = cpu_plan(config, 2)
    assert plan.cores.local_ranks == 2
    assert plan.env_workers == 2  # rank 0 hosts all 10 envs in the quickstart's 2 workers
    assert "rank 0 if run on this machine" in plan.describe("rank 0 if run on this machine")
