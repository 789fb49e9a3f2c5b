"""Stand-in for ``rlinf.utils.logging`` in the RLinf reference environment (imported before RLinf's env).

RLinf 0.3.0's ``get_logger`` returns ``rlinf.scheduler.worker.Worker.logger``, and importing the scheduler
imports ray (not installed: the env only needs a logger). Only logging is replaced; the env, its vector
env and LIBERO run as published.
"""

import logging
import sys
import types

import rlinf.utils  # noqa: F401  (the real package; only its logging module is replaced)

_shim = types.ModuleType("rlinf.utils.logging")
_shim.get_logger = lambda: logging.getLogger("rlinf")  # type: ignore[attr-defined]
sys.modules["rlinf.utils.logging"] = _shim
