"""A generic pool of simulator worker processes: spawned workers, shared-memory arrays, tagged requests and
the replacement of a worker that dies. What a worker hosts is given by a worker factory (cleanrl's
``make_env`` thunk, lerobot's vector-env class): a module-level callable ``factory(env_ids, arrays, *args)``
returning a host with ``handle(cmd, payload) -> reply`` and ``close()``. The pool knows nothing of any
simulator; LIBERO's rules (reset states, seeds, settle steps, result packing) live in ``envs/libero/vector.py``.

Protocol on the pipe: the parent sends ``(cmd, tag, payload)``, the worker answers ``(tag, reply)``; ``close``
ends the worker, ``ping`` answers its pid, every other command goes to the host. Replies that arrive while
the parent waits for another tag are stashed per worker, so several commands can be in flight (pipelining).
Observations never cross the pipe: the host writes them into the shared arrays ``[N, ...]`` the parent owns.

Another interpreter (``python``: a simulator's own environment, :mod:`vlarl_cli.envs.interpreter`): the
worker is ``python -m vlarl_cli.envs.pool FD`` over a socket pair instead of a multiprocessing child; the
factory travels by name. Such a worker imports this module, the factory's and the simulator's: numpy, the
simulator and shared memory, never torch.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from typing import Any

import numpy as np

__all__ = ["Layout", "SharedArrays", "Worker", "WorkerDied", "WorkerPool", "attach", "worker_main", "workers_for"]

#: shared array name -> (shape, dtype)
Layout = dict[str, tuple[tuple[int, ...], str]]


def workers_for(num_envs: int, requested: int | None) -> int:
    """Env worker processes: as requested, else one per core, always a divisor of ``num_envs``."""
    target = requested or min(num_envs, os.cpu_count() or 1)
    target = max(1, min(target, num_envs))
    while num_envs % target:
        target -= 1
    return target


class SharedArrays:
    """The parent's shared-memory arrays of ``layout`` (created here, unlinked by :meth:`close`)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.blocks = {k: shared_memory.SharedMemory(create=True, size=max(1, int(np.prod(shape)) * np.dtype(dt).itemsize))
                       for k, (shape, dt) in layout.items()}
        self.arrays: dict[str, np.ndarray] = {k: np.ndarray(shape, dtype=dt, buffer=self.blocks[k].buf)
                                              for k, (shape, dt) in layout.items()}

    @property
    def names(self) -> dict[str, str]:
        return {k: b.name for k, b in self.blocks.items()}

    def close(self) -> None:
        for block in self.blocks.values():
            block.close()
            block.unlink()


def attach(names: dict[str, str], layout: Layout, *, untrack: bool = False
           ) -> tuple[dict[str, shared_memory.SharedMemory], dict[str, np.ndarray]]:
    """A worker's view of the parent's arrays. ``untrack``: a worker outside multiprocessing has its own
    resource tracker, which would unlink the parent's blocks when the worker exits (Python < 3.13)."""
    blocks = {k: shared_memory.SharedMemory(name=names[k]) for k in layout}
    if untrack:
        from multiprocessing import resource_tracker

        for block in blocks.values():
            resource_tracker.unregister(block._name, "shared_memory")  # type: ignore[attr-defined]
    arrays: dict[str, np.ndarray] = {k: np.ndarray(layout[k][0], dtype=layout[k][1], buffer=blocks[k].buf) for k in layout}
    return blocks, arrays


def worker_main(conn: Any, factory: Callable[..., Any], env_ids: list[int], args: tuple, shm_names: dict[str, str],
                layout: Layout, untrack: bool = False) -> None:
    """A worker process: build the host with ``factory`` and serve the parent's commands until ``close``."""
    blocks, arrays = attach(shm_names, layout, untrack=untrack)
    host = factory(env_ids, arrays, *args)
    tag = -1
    try:
        while True:
            cmd, tag, payload = conn.recv()
            if cmd == "close":
                break
            if cmd == "ping":
                conn.send((tag, {"pid": os.getpid()}))
            elif cmd == "modules":  # what the worker imported (no torch: tests, doctor)
                conn.send((tag, sorted(sys.modules)))
            else:
                conn.send((tag, host.handle(cmd, payload)))
    except (EOFError, KeyboardInterrupt):
        pass
    except Exception as err:
        traceback.print_exc()
        _say_failed(conn, tag, err)
        raise
    finally:
        host.close()
        for block in blocks.values():
            block.close()


class ProbeHost:
    """A host that simulates nothing: ``fill`` writes a value into its envs' rows of every shared array and
    answers its pid per env (the pool's own tests, ``vlarl doctor``)."""

    def __init__(self, env_ids: list[int], arrays: dict[str, np.ndarray]) -> None:
        self.env_ids, self.arrays = env_ids, arrays

    def handle(self, cmd: str, payload: Any) -> Any:
        if cmd != "fill":
            raise ValueError(f"unknown worker command {cmd!r}")
        for array in self.arrays.values():
            array[self.env_ids] = payload
        return {e: os.getpid() for e in self.env_ids}

    def close(self) -> None:
        return None


def _ref(factory: Callable[..., Any]) -> str:
    return f"{factory.__module__}:{factory.__qualname__}"


def _load(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


class _Child:
    """A worker in another interpreter, with the ``multiprocessing.Process`` calls the pool makes."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen
        self.pid = popen.pid

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        self.popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()


@dataclass
class Worker:
    index: int
    env_ids: list[int]
    process: Any = None
    conn: Any = None
    stash: dict[int, Any] = field(default_factory=dict)  # replies received while waiting for another tag
    pending: dict[int, tuple[str, Any]] = field(default_factory=dict)  # tag -> (cmd, payload)


def _say_failed(conn: Any, tag: int, err: Exception) -> None:
    """Tell the parent why this worker is about to die, as the reply to the command it failed on (best effort:
    the pipe may be gone too)."""
    try:
        conn.send((tag, (FAILED, f"{type(err).__name__}: {err}")))
    except Exception:
        pass


class WorkerDied(Exception):
    """A worker is gone or silent too long; ``str()`` is its exception when it said one before dying."""


#: first item of the reply a worker sends for the command it failed on, before it exits: (FAILED, "Type: message")
FAILED = "vlarl-worker-failed"


class WorkerPool:
    """``num_workers`` spawned processes hosting ``num_envs`` envs (env ``e`` in worker ``e // (N / W)``).

    Args:
        factory: module-level worker factory (see the module docstring), pickled to each worker.
        args: extra arguments of ``factory`` (plain data: they are pickled).
        num_envs, num_workers: N envs over W workers; W divides N.
        shared: the parent's :class:`SharedArrays`.
        name: process name prefix (``vlarl-libero`` -> ``vlarl-libero-0`` ...).
        reply_timeout_s: a worker silent this long counts as dead.
        python: another interpreter to run the workers in (checked by the caller,
            ``envs.interpreter.check``); None: spawned children of this one.
    """

    def __init__(self, factory: Callable[..., Any], args: tuple, *, num_envs: int, num_workers: int,
                 shared: SharedArrays, name: str, reply_timeout_s: float, python: str | None = None) -> None:
        self._factory, self._args, self._shared, self._name = factory, args, shared, name
        self._python = python
        self._timeout = reply_timeout_s
        self._ctx = mp.get_context("spawn")
        self._tag = 0
        per = num_envs // num_workers
        self.workers = [Worker(w, list(range(w * per, (w + 1) * per))) for w in range(num_workers)]
        self.env_worker = {e: w.index for w in self.workers for e in w.env_ids}
        for worker in self.workers:
            self.start(worker)

    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers]

    def start(self, worker: Worker) -> None:
        if self._python is not None:
            self._start_elsewhere(worker)
            return
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=worker_main,
            args=(child, self._factory, worker.env_ids, self._args, self._shared.names, self._shared.layout),
            name=f"{self._name}-{worker.index}",
            daemon=True,
        )
        proc.start()
        child.close()
        worker.process, worker.conn = proc, parent
        worker.stash, worker.pending = {}, {}

    def _start_elsewhere(self, worker: Worker) -> None:
        """``python -m vlarl_cli.envs.pool FD`` in the other interpreter; the setup is its first message."""
        from multiprocessing.connection import Connection

        from vlarl_cli.envs.interpreter import child_env, resolve

        ours, theirs = socket.socketpair()
        popen = subprocess.Popen([str(resolve(str(self._python))), "-m", "vlarl_cli.envs.pool", str(theirs.fileno())],
                                 pass_fds=(theirs.fileno(),), env=child_env(), stdin=subprocess.DEVNULL)
        theirs.close()
        conn = Connection(ours.detach())
        conn.send((_ref(self._factory), worker.env_ids, self._args, self._shared.names, self._shared.layout))
        worker.process, worker.conn = _Child(popen), conn
        worker.stash, worker.pending = {}, {}

    def replace(self, worker: Worker) -> dict[int, tuple[str, Any]]:
        """Kill ``worker`` and start a fresh process in its place; returns the commands that were in flight."""
        pending = dict(worker.pending)
        try:
            worker.process.kill()
            worker.process.join(timeout=10)
        except Exception:
            pass
        self.start(worker)
        return pending

    def send(self, worker: Worker, cmd: str, payload: Any) -> int:
        self._tag += 1
        tag = self._tag
        worker.pending[tag] = (cmd, payload)
        try:
            worker.conn.send((cmd, tag, payload))
        except (BrokenPipeError, OSError):
            pass  # detected in recv
        return tag

    def recv(self, worker: Worker, tag: int) -> Any:
        """Reply for ``tag``; raises WorkerDied if the process is gone or silent too long."""
        deadline = time.monotonic() + self._timeout
        while tag not in worker.stash:
            try:
                ready = worker.conn.poll(0.5)
            except (EOFError, OSError):
                ready = False
                if not worker.process.is_alive():
                    raise WorkerDied from None
            if ready:
                try:
                    got_tag, reply = worker.conn.recv()
                except (EOFError, OSError):
                    raise WorkerDied from None
                worker.stash[got_tag] = reply
            elif not worker.process.is_alive() or time.monotonic() > deadline:
                raise WorkerDied
        worker.pending.pop(tag, None)
        reply = worker.stash.pop(tag)
        if isinstance(reply, tuple) and len(reply) == 2 and reply[0] == FAILED:
            raise WorkerDied(reply[1])
        return reply

    def close(self) -> None:
        """Stop the workers (asked first, killed after 20 s)."""
        for w in self.workers:
            try:
                w.conn.send(("close", 0, None))
            except Exception:
                pass
        for w in self.workers:
            w.process.join(timeout=20)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout=5)


def _main(fd: int) -> None:
    """A worker in another interpreter: read the setup from the socket ``fd``, then serve."""
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    factory, env_ids, args, shm_names, layout = conn.recv()
    worker_main(conn, _load(factory), env_ids, args, shm_names, layout, untrack=True)


if __name__ == "__main__":
    status = 0
    try:
        _main(int(sys.argv[1]))
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        # End as multiprocessing's own workers do (os._exit: no atexit, no teardown). A normal exit runs MuJoCo's
        # atexit eglTerminate first, then frees robosuite's render contexts in teardown: an EGL_NOT_INITIALIZED
        # traceback per context on the terminal (measured: 2 per LIBERO worker, 0 in-process).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
