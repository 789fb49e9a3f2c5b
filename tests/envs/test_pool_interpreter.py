"""The generic worker pool in another Python interpreter (``env.<split>.python``): its workers import no torch,
write into the parent's shared memory, are replaced when they die; a bad interpreter (missing, lacking the
simulator, another numpy ABI, dying at import) is one paragraph naming it and the fix, never a hang."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vlarl_cli.envs import interpreter
from vlarl_cli.envs.pool import ProbeHost, SharedArrays, WorkerDied, WorkerPool
from vlarl_cli.errors import EnvError

PYTHON = sys.executable  # another process of this environment's interpreter, launched as an outside one


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLARL_CACHE", str(tmp_path / "cache"))


def test_the_worker_side_imports_no_torch() -> None:
    code = ("import sys, vlarl_cli.envs.pool, vlarl_cli.envs.libero.vector, vlarl_cli.envs.interpreter; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True, env=interpreter.child_env())
    assert out.stdout.strip() == "[]"


def test_workers_in_another_interpreter_write_shared_memory_and_are_replaced_when_killed() -> None:
    shared = SharedArrays({"x": ((4, 3), "float32")})
    pool = WorkerPool(ProbeHost, (), num_envs=4, num_workers=2, shared=shared, name="t", reply_timeout_s=60,
                      python=PYTHON)
    try:
        w0, w1 = pool.workers
        pids = {**pool.recv(w0, pool.send(w0, "fill", 7.0)), **pool.recv(w1, pool.send(w1, "fill", 9.0))}
        assert shared.arrays["x"].tolist() == [[7.0] * 3] * 2 + [[9.0] * 3] * 2
        assert pids[0] == pids[1] == w0.process.pid != pids[2] and os.getpid() not in pids.values()
        modules = pool.recv(w0, pool.send(w0, "modules", None))
        assert "vlarl_cli.envs.pool" in modules and "numpy" in modules and "torch" not in modules
        os.kill(w1.process.pid, signal.SIGKILL)
        with pytest.raises(WorkerDied):
            pool.recv(w1, pool.send(w1, "fill", 1.0))
        old = w1.process.pid
        pool.replace(w1)
        assert pool.recv(w1, pool.send(w1, "fill", 5.0)) == {2: w1.process.pid, 3: w1.process.pid} and w1.process.pid != old
        assert shared.arrays["x"][2:].tolist() == [[5.0] * 3] * 2  # the blocks outlived the killed worker
    finally:
        pool.close()
        shared.close()
    assert not any(w.process.is_alive() for w in pool.workers)


@pytest.mark.parametrize("python", [None, PYTHON], ids=["spawned", "other_interpreter"])
def test_a_worker_that_fails_on_a_command_says_why_before_it_dies(python: str | None) -> None:
    """The parent's WorkerDied carries the worker's exception (the error message a user then sees names it,
    not only "died"); the pool replaces the worker as for any other death."""
    shared = SharedArrays({"x": ((2, 1), "float32")})
    pool = WorkerPool(ProbeHost, (), num_envs=2, num_workers=1, shared=shared, name="t", reply_timeout_s=60,
                      python=python)
    try:
        (w,) = pool.workers
        with pytest.raises(WorkerDied, match=r"^ValueError: unknown worker command 'boom'$"):
            pool.recv(w, pool.send(w, "boom", None))
        pool.replace(w)
        assert set(pool.recv(w, pool.send(w, "fill", 1.0))) == {0, 1}
    finally:
        pool.close()
        shared.close()


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _refused(python: str, **kw: tuple[str, ...]) -> EnvError:
    with pytest.raises(EnvError) as err:
        interpreter.check(python, "libero", "env.train.python", **kw)
    assert "vlarl setup-sim libero" in (err.value.fix or "") and "env.train.python" in err.value.problem
    return err.value


def test_an_interpreter_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    assert "does not exist" in _refused(str(tmp_path / "nope" / "bin" / "python")).problem
    named = _refused("libero_env")  # a name: the environment `vlarl setup-sim libero_env` would build
    assert str(Path(os.environ["VLARL_CACHE"]) / "sims" / "libero_env" / "bin" / "python") in named.problem


def test_an_interpreter_without_the_simulator_is_refused_naming_what_it_lacks() -> None:
    err = _refused(PYTHON, packages=("no_such_simulator_pkg",))
    assert "lacks no_such_simulator_pkg" in err.problem


def test_an_interpreter_that_dies_at_import_is_refused_with_its_last_words(tmp_path: Path) -> None:
    dies = _script(tmp_path / "python", 'echo "ImportError: libGL.so.1: cannot open shared object" >&2; exit 3')
    err = _refused(dies)
    assert "exit code 3" in err.problem and "libGL.so.1" in err.problem


def test_an_interpreter_with_another_numpy_abi_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "old_numpy"
    (fake / "numpy").mkdir(parents=True)
    ours = int(np.__version__.split(".")[0])
    (fake / "numpy" / "__init__.py").write_text(f'__version__ = "{ours - 1}.26.4"\n')
    other = _script(tmp_path / "python", f'PYTHONPATH="{fake}:$PYTHONPATH" exec "{PYTHON}" "$@"')
    err = _refused(other)
    assert f"numpy {ours - 1}.26.4" in err.problem and "another numpy ABI" in err.problem


def test_an_interpreter_that_hangs_is_refused_after_the_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpreter, "PROBE_TIMEOUT_S", 1.0)
    err = _refused(_script(tmp_path / "python", "exec sleep 30"))
    assert "did not answer within 1 s" in err.problem


def test_a_python_for_an_in_process_simulator_is_refused_at_load() -> None:
    from vlarl_cli.config.loading import load_config

    with pytest.raises(Exception, match="steps its envs inside the trainer's process"):
        load_config("toy_reach_ppo", [f"env.train.python={PYTHON}"])


def test_doctor_lists_each_simulator_and_where_it_runs(tmp_path: Path) -> None:
    from vlarl_cli import doctor
    from vlarl_cli.envs import registry

    report = doctor.collect(gl=False)
    rows = dict(report.sections["Simulators"])
    assert set(rows) == {f"{name} in this interpreter" for name in registry.names()}
    assert rows["toy_reach in this interpreter"] == "works"
    root = Path(os.environ["VLARL_CACHE"]) / "sims" / "libero"
    (root / "bin").mkdir(parents=True)
    _script(root / "bin" / "python", "exit 1")
    assert any("was not finished" in p and "vlarl setup-sim libero" in p for p in doctor.collect(gl=False).problems)
    (root / interpreter.STAMP).write_text("{}")
    rows = dict(doctor.collect(gl=False).sections["Simulators"])
    assert rows[f"libero in {root / 'bin' / 'python'}"] == "FAILED"
