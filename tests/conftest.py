"""Fixtures shared by every test folder, and the CPU kernels every test runs on."""

from __future__ import annotations

import os
import sys

# ---- The x86 kernels: pinned to AVX2 before torch loads, for this process and every process a test starts.
# The committed float fixtures (tests/fixtures/*) were recorded on a CPU where torch ran its AVX2 kernels, and
# several tests compare two runs that must agree to float rounding (one process vs two, one pipeline stage vs
# two). On an AVX-512 CPU torch picks AVX-512 kernels (ATen) and oneDNN its AVX-512 code, which round
# differently: measured on an AMD EPYC (Zen 4) with torch 2.13.0+cpu, RLinf's GR00T head fixture moved by up
# to 7.2e-7 (actions) and 1.9e-6 (gradients) against ATOL 6e-7, and the remote-pipelined LIBERO run's critic
# values by 4.8e-6 of 1.6e-4 (batch 1 and batch 2 round apart, the simulator carries it 10 steps), 300x what
# AVX2 leaves (1.6e-8). Pinned, both measure what they measured when recorded (GR00T within 6e-8, the values
# 1.6e-8) and no tolerance had to grow (tests/test_kernel_pin.py checks the pin holds). The kernels are torch's,
# not vlarl's: what the tests check (vlarl against upstream code, one placement against another) does not
# depend on the instruction set. VLARL_TEST_NATIVE_KERNELS=1 runs the suite on the CPU's own kernels (to
# measure that drift); a variable the user already set wins.
if os.environ.get("VLARL_TEST_NATIVE_KERNELS") != "1":
    if "torch" in sys.modules:
        raise RuntimeError("tests/conftest.py must run before torch is imported to pin its CPU kernels; a "
                           "pytest plugin imported torch first. Run with VLARL_TEST_NATIVE_KERNELS=1 to skip the pin.")
    os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
    os.environ.setdefault("DNNL_MAX_CPU_ISA", "AVX2")

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Run single-threaded, then restore. Tiny models and tensors gain nothing from intra-op threads: on a
    shared 2-core machine spinning worker threads make them up to 100x slower, and one thread keeps float
    sums reproducible for the fixed seeds of the learning tests."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tensor_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the tensors a checkpoint load reads from its safetensors files, in order: every family
    streams through :class:`vlarl_cli.checkpoints.pipeline.TensorReader`, whose ``get`` is wrapped to record."""
    from vlarl_cli.checkpoints import pipeline

    reads: list[str] = []
    real = pipeline.TensorReader.get

    def get(self: pipeline.TensorReader, file: object, name: str) -> torch.Tensor:
        reads.append(name)
        return real(self, file, name)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline.TensorReader, "get", get)
    return reads


# ---- CI's two test phases (.ci/run): the tests that need only .venv, LIBERO's assets and LIBERO's own
# environment run while the reference venvs are still being built ("base"); the rest run after ("references").
# `bash scripts/test.sh` without --needs runs everything, as the README says.
#: tests that read the reference venvs (.reference/*) or whose results depend on one being there
NEEDS_REFERENCES = (
    "tests/conformance/",  # each compares with upstream code run in a reference venv
    "tests/envs/test_libero_pro_data.py",  # reads .reference/libero_pro's installed wheel files
    "tests/benchmarks/test_smoke.py",  # sft_loader's lerobot side runs in .reference/lerobot_v30
)
#: a skip whose reason says this, in the base phase, means a test that belongs to the references phase
_MISPLACED_SKIP = ("reference", "setup-sim libero`")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--needs", choices=("base", "references"), default=None,
                     help="CI's phases: only the tests that need no reference venv (base), or only those that do.")


def _needs_references(item: pytest.Item) -> bool:
    path = item.path.relative_to(item.config.rootpath).as_posix()
    return path.startswith(NEEDS_REFERENCES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    phase = config.getoption("--needs")
    if phase is None:
        return
    keep = [item for item in items if _needs_references(item) == (phase == "references")]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


#: (test, skip reason) of every skipped test, for the base phase's check at the end
_SKIPS: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and isinstance(report.longrepr, tuple):
        _SKIPS.append((report.nodeid, str(report.longrepr[2])))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In the base phase a skip naming a reference venv or LIBERO's own environment fails the run: that test
    reads something the later setup steps build, so CI would skip it silently; list it in NEEDS_REFERENCES."""
    if session.config.getoption("--needs") != "base":
        return
    misplaced = [(node, why) for node, why in _SKIPS if any(s in why for s in _MISPLACED_SKIP)]
    for node, why in misplaced:
        print(f"\n[--needs base] {node} skipped ({why}): list it in tests/conftest.py NEEDS_REFERENCES")
    if misplaced:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
