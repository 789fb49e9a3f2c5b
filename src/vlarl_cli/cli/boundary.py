"""The one error boundary of the command line: every exception becomes an exit code and one paragraph.

``vlarl`` (``cli/main.py``) and the per-rank entry of a distributed job (``cli/rl_train.py: rank_main``) both run
their work through :func:`guarded`, so the rules live in one place:

============================================  ====  ========================================================
what escaped                                   exit  what the user sees
============================================  ====  ========================================================
click usage errors (missing / unknown option,  2     ``error:`` the usage problem, ``fix:`` the ``--help`` to
unknown subcommand, bad int, out of range)           read
:class:`~vlarl_cli.errors.VlarlError`          2     its problem and fix
``OSError`` with a cause the user controls     2     the file, what the system said (no space, read-only,
(ENOSPC, EFBIG, EACCES, EROFS, EISDIR, ...)          permission, a file where a folder is wanted) and a fix
a corrupt file (JSON, UTF-8, safetensors,      2     that a file is corrupt, and ``--debug`` to name it
zip, pickle) that no caller named
a write that failed part-way (torch's          2     that the disk is full or a file-size limit was reached
"unexpected pos", safetensors' I/O errors)
out of memory (host or device)                 2     which memory, and what to make smaller
``KeyboardInterrupt`` (Ctrl-C)                 130   what was kept and how to resume
SIGTERM (``kill``, a scheduler's pre-emption)  143   the same: what was kept and how to resume
anything else (a bug in vlarl)                 1     the traceback, and where to report it
============================================  ====  ========================================================

``--debug`` (or ``VLARL_DEBUG=1``) adds the traceback to every user error. User text is printed as
plain text, never as rich markup, so a path like ``runs/[v2]`` is shown as it is.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, cast

from vlarl_cli.errors import VlarlError

USAGE_EXIT = 2
BUG_EXIT = 1
INTERRUPT_EXIT = 130
TERMINATED_EXIT = 128 + signal.SIGTERM  # 143, what a shell reports for a process SIGTERM ended
DEBUG_ENV = "VLARL_DEBUG"
REPORT_TO = ("please report it to the vlarl maintainers (the project's issue tracker) with the command you ran, "
             "the output of `vlarl --version` and the traceback above")

# What an interrupted command leaves behind and how to pick up again, per subcommand.
RESUME_HINTS: dict[str, str] = {
    "download": "Files that finished downloading are kept, and so is the partial file; run the same command "
                "again to resume where it stopped.",
    "convert": "Nothing was written under the destination name (it appears only when complete) and the source "
               "is untouched; run the same command again.",
    "rl-train": "Checkpoints already written are kept in the run folder; resume with the same command plus "
                "--resume auto.",
    "sft": "Recorded demos and checkpoints already written are kept; run the same command again (pass "
           "--demos <run>/demos to reuse the demos).",
    "eval": "Finished episodes are kept in the results folder; run the same command again and they are skipped.",
    "video": "Videos already written are kept; run the same command again for the rest.",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so it unwinds like Ctrl-C (files closed, locks released)."""


def _sigterm_as_interrupt() -> Callable[[], None]:
    """Make SIGTERM raise :class:`Terminated` in this process (not in its forked workers, which keep the default
    and die); returns what restores the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    owner = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a forked simulator / data worker: die as it would have
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def debug_requested(argv: list[str]) -> bool:
    """``--debug`` anywhere before a ``--`` separator, or ``VLARL_DEBUG`` set to a true value."""
    head = argv[: argv.index("--")] if "--" in argv else argv
    return "--debug" in head or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes")


def print_error(problem: str, fix: str | None = None, *, heading: str = "error") -> None:
    """Print ``problem`` (and ``fix``) as one paragraph on stderr; never interprets markup in them."""
    from rich.console import Console
    from rich.text import Text

    text = Text.assemble((f"{heading}: ", "bold red"), problem)
    if fix:
        text.append("\n")
        text.append_text(Text.assemble(("fix: ", "bold"), fix))
    Console(stderr=True, highlight=False, soft_wrap=True).print(text)


def guarded(work: Callable[[], Any], *, command: str | None, debug: bool) -> int:
    """Run ``work()`` and turn whatever it raises into an exit code (see the module table)."""
    restore = _sigterm_as_interrupt()
    try:
        work()
    except SystemExit as ex:
        return _system_exit_code(ex)
    except KeyboardInterrupt as ex:
        if debug:
            traceback.print_exc()
        hint = RESUME_HINTS.get(command or "", "Run the same command again to continue.")
        terminated = isinstance(ex, Terminated)
        print_error(f"{'Terminated (SIGTERM)' if terminated else 'Interrupted (Ctrl-C)'}. {hint}", heading="stopped")
        return TERMINATED_EXIT if terminated else INTERRUPT_EXIT
    except BaseException as ex:  # the boundary: everything else is classified here
        return _report(ex, debug=debug)
    finally:
        restore()
    return 0


def _system_exit_code(ex: SystemExit) -> int:
    code = ex.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _report(ex: BaseException, *, debug: bool) -> int:
    described = describe(ex)
    if described is None:  # a bug: keep the traceback, say where to report it
        traceback.print_exception(ex)
        print_error(f"vlarl stopped on an unexpected {type(ex).__name__}; this is a bug in vlarl, not in your "
                    f"input.", REPORT_TO, heading="bug")
        return BUG_EXIT
    if debug:
        traceback.print_exception(ex)
    problem, fix, code = described
    if problem:
        print_error(problem, fix)
    return code


def describe(ex: BaseException) -> tuple[str, str | None, int] | None:
    """(problem, fix, exit code) of a user-caused exception, or None for a bug."""
    from typer import Abort, Exit

    if isinstance(ex, VlarlError):
        return ex.problem, ex.fix, ex.exit_code
    if isinstance(ex, Exit):
        return "", None, ex.exit_code
    if isinstance(ex, Abort):
        return "Aborted.", None, INTERRUPT_EXIT
    if _is_a(ex, "UsageError"):
        return _usage(ex)
    if _is_a(ex, "ClickException"):  # by name: see _is_a
        return str(cast(Any, ex).format_message()), None, USAGE_EXIT
    if isinstance(ex, OSError):
        return describe_os_error(ex)
    if isinstance(ex, MemoryError) or type(ex).__name__ == "OutOfMemoryError":
        return (f"Out of memory ({type(ex).__name__}: {_first_line(ex)}).",
                "Use fewer environments (env.train.total_num_envs), a smaller micro_batch_size, offloading "
                "(actor.enable_offload) or a bigger machine; `vlarl rl-train --dry-run` estimates the memory.",
                USAGE_EXIT)
    cause = _os_error_in_chain(ex)
    if cause is not None:
        return describe_os_error(cause)
    if _failed_write(ex):
        return (f"Writing a file failed part-way ({type(ex).__name__}: {_first_line(ex)}): the disk is full, or the "
                "file reached the file system's or the process's size limit (ulimit -f).",
                "Free some space or write to another disk (or raise the limit); what was finished is kept and "
                "running the same command again resumes.", USAGE_EXIT)
    corrupt = _corrupt_file(ex)
    if corrupt is not None:
        return corrupt, "Run again with --debug to see which file, then re-create or re-download it.", USAGE_EXIT
    return None


#: what torch's and safetensors' writers say when the disk filled up or ``ulimit -f`` stopped a write
_WRITE_FAILURES = ("unexpected pos", "PytorchStreamWriter failed", "file write failed", "No space left on device",
                   "File too large", "Disk quota exceeded")


def _failed_write(ex: BaseException) -> bool:
    text = str(ex)
    return (isinstance(ex, RuntimeError) or type(ex).__name__ == "SafetensorError") and any(
        w in text for w in _WRITE_FAILURES)


def _os_error_in_chain(ex: BaseException) -> OSError | None:
    """A full disk or a size limit that a library wrapped (``raise RuntimeError(...) from err``); only explicit
    causes count (an error raised while handling another may be a bug of its own)."""
    seen: set[int] = set()
    link = ex.__cause__
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return link
        link = link.__cause__
    return None


def _is_a(ex: BaseException, class_name: str) -> bool:
    # typer >= 0.16 vendors click as typer._click, older typer uses click itself: match by class name
    return any(cls.__name__ == class_name for cls in type(ex).__mro__)


def _usage(ex: Any) -> tuple[str, str | None, int]:
    ctx = getattr(ex, "ctx", None)
    path = ctx.command_path if ctx is not None else "vlarl"
    message = ex.format_message()
    if ctx is not None and ctx.command is not None and path != "vlarl":
        usage = ctx.get_usage().strip()
        message = f"{message} ({usage})"
    return message, f"See `{path} --help` for the options and their allowed values.", USAGE_EXIT


_OS_FIXES: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space is left on the device", "Free some space or choose a folder on another disk; "
                   "what was finished is kept and running the same command again resumes."),
    errno.EDQUOT: ("the disk quota is exhausted", "Free some space or choose a folder on another disk; "
                   "what was finished is kept and running the same command again resumes."),
    errno.EFBIG: ("the file is larger than this file system (or the process's file size limit, ulimit -f) "
                  "allows", "Write to a file system that holds large files (not FAT32), or raise the limit."),
    errno.EACCES: ("permission denied", "Choose a folder you can write to (and read from), or fix its "
                   "permissions."),
    errno.EPERM: ("the operation is not permitted", "Choose a folder you own, or fix its permissions."),
    errno.EROFS: ("the file system is read-only", "Choose an output folder on a writable file system."),
    errno.EISDIR: ("it is a folder where a file is expected", "Point at a file, or remove the folder."),
    errno.ENOTDIR: ("a part of the path is a file where a folder is expected",
                    "Choose another path, or move that file away."),
    errno.ENOENT: ("no such file or folder", "Check the path."),
    errno.EEXIST: ("it already exists", "Choose a new name, or move the existing one away."),
    errno.ENAMETOOLONG: ("the name is too long", "Choose a shorter path."),
    errno.ELOOP: ("too many symbolic links", "Fix the symbolic link loop in the path."),
    errno.EMFILE: ("too many open files", "Raise the open-file limit (ulimit -n) or use fewer environments."),
    errno.ENOTEMPTY: ("the folder is not empty", "Choose an empty or new folder."),
    errno.EXDEV: ("it is on another file system", "Keep the output and its temporary files on one file system."),
}


def describe_os_error(ex: OSError) -> tuple[str, str | None, int] | None:
    """An ``OSError`` as (problem, fix, exit code); a broken pipe (``vlarl ... | head``) exits quietly."""
    if ex.errno == errno.EPIPE or isinstance(ex, BrokenPipeError):
        return "", None, 1
    where = " and ".join(str(f) for f in (ex.filename, ex.filename2) if f is not None)
    known = _OS_FIXES.get(ex.errno or -1)
    if ex.errno in (errno.EEXIST, errno.ENOTDIR) and ex.filename is not None and _is_file_in_the_way(ex.filename):
        known = ("a file is in the way where a folder is wanted", "Choose a folder path, or move the file away.")
    if known is not None:
        what, fix = known
        subject = f"Cannot use {where}" if where else "A file operation failed"
        return f"{subject}: {what} ({ex.strerror or ex}).", fix, USAGE_EXIT
    if isinstance(ex, (ConnectionError, TimeoutError)):
        return (f"A network operation failed: {_first_line(ex)}.",
                "Check the network connection (and HF_ENDPOINT) and run the same command again.", USAGE_EXIT)
    if ex.errno is not None:
        name = errno.errorcode.get(ex.errno, str(ex.errno))
        subject = f"on {where}" if where else "while reading or writing files"
        return (f"The operating system refused an operation {subject}: {ex.strerror or ex} ({name}).",
                "Check the path, its permissions and the free space.", USAGE_EXIT)
    return None


def _is_file_in_the_way(name: Any) -> bool:
    from pathlib import Path

    path = Path(os.fsdecode(name))
    return any(p.exists() and not p.is_dir() for p in (path, *path.parents))


def _corrupt_file(ex: BaseException) -> str | None:
    """A message for a parse error of a file that no caller turned into a VlarlError."""
    import json
    import pickle
    import zipfile

    if isinstance(ex, json.JSONDecodeError):
        return f"A JSON file vlarl read is corrupt ({ex.msg} at line {ex.lineno} column {ex.colno})."
    if isinstance(ex, UnicodeDecodeError):
        return f"A file vlarl read as text is binary or not UTF-8 ({ex.reason} at byte {ex.start})."
    if isinstance(ex, (zipfile.BadZipFile, pickle.UnpicklingError, EOFError)):
        return f"A file vlarl read is truncated or corrupt ({type(ex).__name__}: {_first_line(ex)})."
    if type(ex).__name__ == "SafetensorError":
        return f"A .safetensors file vlarl read is corrupt ({_first_line(ex)})."
    return None


def _first_line(ex: BaseException) -> str:
    text = str(ex).strip()
    return text.splitlines()[0] if text else type(ex).__name__
