"""LIBERO's workers in the environment `vlarl setup-sim libero` builds (its own interpreter, its own pins, no
torch) give bit-identical observations, rewards and episode metrics to the in-process workers, and a worker
killed there is replaced as in-process. The environment takes minutes to build: .ci/run builds it once; here
the test skips, naming the command, when it is absent."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.envs import interpreter
from vlarl_cli.envs.vector import EPISODE_DONE, ERRORS, LiberoVectorEnv, VectorEnvSpec

pytestmark = pytest.mark.libero

MAX_STEPS = 8


@pytest.fixture(scope="module")
def other_python(libero_ready) -> str:
    python = interpreter.resolve("libero")
    if not interpreter.finished("libero"):
        pytest.skip(f"no LIBERO environment of its own at {python}: build it with `vlarl setup-sim libero`")
    return "libero"


def test_tasks_and_init_states_read_without_torch_equal_liberos_own(libero_ready) -> None:
    """The worker reads LIBERO's task list and init states without libero.libero.benchmark (which imports torch):
    all 130 tasks and their init states equal what LIBERO's Benchmark gives."""
    from libero.libero import benchmark

    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.libero.setup import prepare_libero

    paths = prepare_libero(check_assets=False)
    count = 0
    for suite in ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"):
        bench = benchmark.get_benchmark_dict()[suite](task_order_index=0)
        ours = suites.suite_tasks(suite)
        assert len(ours) == bench.get_num_tasks()
        for i, task in enumerate(ours):
            theirs = bench.get_task(i)
            assert (task.name, task.language, task.bddl_file, task.init_states_file) == (
                theirs.name, theirs.language, paths.bddl_dir / theirs.problem_folder / theirs.bddl_file,
                paths.init_states_dir / theirs.problem_folder / theirs.init_states_file)
            states, want = suites.init_states(suite, i), np.asarray(bench.get_task_init_states(i))
            assert states.dtype == want.dtype and np.array_equal(states, want)
            count += 1
    assert count == 130


def _spec(python: str | None) -> VectorEnvSpec:
    return VectorEnvSpec(suite="libero_spatial", task_ids=(0,), num_envs=2, num_workers=1, max_episode_steps=MAX_STEPS,
                         init_state_order="ordered", python=python)


def _episode(vec: LiberoVectorEnv) -> list:
    """Reset, then chunks of fixed actions through an auto-reset: every tensor the env returns."""
    rng = np.random.default_rng(0)
    out: list = [vec.reset()]
    for _ in range(3):
        actions = rng.uniform(-0.5, 0.5, (2, 4, 7))
        out.append(vec.step_chunk(actions))
    return out


def _flat(value: object) -> list:
    if isinstance(value, dict):
        return [(k, _flat(v)) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))]
    if isinstance(value, (list, tuple)):
        return [_flat(v) for v in value]
    if isinstance(value, torch.Tensor):
        return [str(value.dtype), list(value.shape), value.numpy().tobytes()]
    return [repr(value)]


def test_workers_in_their_own_environment_match_in_process_bit_for_bit_and_are_replaced(other_python: str) -> None:
    """One env of each kind (each build costs LIBERO's scene compile): the episodes compared bit for bit, then
    the other environment's worker killed and replaced as in-process."""
    with LiberoVectorEnv(_spec(None)) as here:
        ours = _episode(here)
    with LiberoVectorEnv(_spec(other_python)) as there:
        theirs = _episode(there)
        worker = there._workers[0]
        modules = there._pool.recv(worker, there._pool.send(worker, "modules", None))
        _killed_worker_is_replaced(there)
    assert "torch" not in modules and "robosuite" in modules and "vlarl_cli.envs.libero.env" in modules
    # the episodes ended (time limit, then auto-reset), so their metrics are compared too
    assert [bool(step[3][EPISODE_DONE].all()) for step in ours[1:]] == [False, True, False]
    assert _flat(theirs) == _flat(ours)


def _killed_worker_is_replaced(vec: LiberoVectorEnv) -> None:
    vec.reset()
    old = vec.worker_pids()
    os.kill(old[0], signal.SIGKILL)
    _obs, _rewards, dones, infos = vec.step_chunk(np.zeros((2, 2, 7)))
    assert vec.worker_pids() != old and "died" in infos[ERRORS][0] and dones.all()
    obs, _rewards, dones, infos = vec.step_chunk(np.zeros((2, 2, 7)))  # the new worker steps on
    assert not dones.any() and infos[ERRORS] == {} and obs[keys.STATES].shape == (2, 8)
