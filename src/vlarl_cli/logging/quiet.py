"""Dependency noise stays off the console unless the user asks for it (`vlarl --verbose`).

One switch, the environment variable ``VLARL_VERBOSE``: ``vlarl --verbose`` sets it, and the launched ranks
and the spawned env workers inherit it. :func:`quiet_dependencies` runs where a process first meets a noisy
dependency: :func:`console_rules` at the CLI root and at every rank's entry point (``rl-train``'s ranks
start in ``cli/rl_train.rank_main``, ``sft``'s in the CLI root), and ``envs/libero/setup.prepare_libero``
(every env worker calls it before it imports robosuite). Each rank's full output is also kept in the run
folder (``<run>/logs``, ``distributed/dist.relaunch``). What is dropped is listed here, nothing else: robosuite 1.4.0's three-line
"No private macro file found!" notice (``robosuite/__init__.py``, logged through its ``robosuite_logs``
logger on every import), LIBERO 0.1.1's ``[info] using task orders ...`` print (its benchmark constructor;
:func:`dependency_prints` around the call), Deprecation/Future warnings raised inside third-party
packages, and torch's FSDP2 advice that a sharded module "returned a view tensor" (advice to whoever edits
those outputs in place, which vlarl does not; the policies' ``sample`` / ``evaluate`` outputs are copied out
of views where FSDP wraps them, ``distributed/fsdp._without_views``, and
``tests/distributed/test_rl_equivalence.py`` checks under ``--verbose`` that no such advice is printed).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Iterator

VERBOSE_ENV = "VLARL_VERBOSE"
ROBOSUITE_LOGGER = "robosuite_logs"
#: third-party modules whose DeprecationWarning / FutureWarning are not the user's concern
NOISY_MODULES = r"(robosuite|libero|bddl|gymnasium|gym|mujoco|transformers|huggingface_hub|torch|timm|" \
                r"numba|matplotlib|hydra|omegaconf|wandb|swanlab|google\.protobuf|pkg_resources)(\.|$)"
#: torch/distributed/fsdp/_fully_shard/_fsdp_state.py's UserWarning about view outputs (see the docstring)
FSDP_VIEW_ADVICE = r"FSDP2-wrapped module .* returned a view tensor"


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def set_verbose(on: bool) -> None:
    """Set the switch for this process and every process it starts."""
    os.environ[VERBOSE_ENV] = "1" if on else "0"


def console_rules(verbose_flag: bool = False) -> None:
    """What every vlarl process with a console does first, the CLI root and each rank alike: ``--verbose``
    passes on to the processes it starts, and dependency noise is filtered unless verbose."""
    if verbose_flag:
        set_verbose(True)
    quiet_dependencies()


class RobosuiteMacroNotice(logging.Filter):
    """Drops robosuite's advice to create a private macro file (vlarl needs none: the defaults are right)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("macro file" in message or "setup_macros.py" in message)


def quiet_dependencies() -> None:
    """Install the filters in this process (idempotent); a no-op under ``--verbose``."""
    if verbose():
        return
    logger = logging.getLogger(ROBOSUITE_LOGGER)
    if not any(isinstance(f, RobosuiteMacroNotice) for f in logger.filters):
        logger.addFilter(RobosuiteMacroNotice())
    for category in (DeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category, module=NOISY_MODULES)
    warnings.filterwarnings("ignore", message=FSDP_VIEW_ADVICE, category=UserWarning, module=r"torch\.")


@contextlib.contextmanager
def dependency_prints() -> Iterator[None]:
    """Swallow what a dependency ``print``s to stdout inside the block (shown under ``--verbose``)."""
    if verbose():
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield
