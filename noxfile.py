"""Developer sessions. They run in the project's own ./.venv (created by scripts/install.sh), because a
fresh nox virtualenv would re-download torch and LIBERO's 622 MB of assets for every session.

    nox -s tests      # the README's test command
    nox -s lint       # ruff + mypy
    nox -s demo       # the CPU quickstart on a real LIBERO task
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests"]
VENV_BIN = ".venv/bin"


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    session.run("bash", "scripts/test.sh", *session.posargs, external=True)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    session.run("bash", "scripts/install.sh", external=True)
    session.run(f"{VENV_BIN}/ruff", "check", "src", "tests", "benchmarks", external=True)
    session.run(f"{VENV_BIN}/mypy", external=True)


@nox.session(venv_backend="none")
def demo(session: nox.Session) -> None:
    session.run("bash", "scripts/install.sh", external=True)
    session.run(f"{VENV_BIN}/vlarl", "rl-train", "--config", "quickstart", *session.posargs, external=True)
