"""The `vlarl` command line: assembles one Typer app from one module per subcommand.

Each subcommand module defines ``command(...)`` (Typer parameters) that parses arguments, loads and
validates the config, and calls ONE library function. Heavy imports (torch models, robosuite) happen
inside those functions so that ``vlarl --help`` is instant.
"""

from __future__ import annotations

import os
import sys

import typer

from vlarl_cli import __version__

app = typer.Typer(
    name="vlarl",
    help="Online RL post-training for Vision-Language-Action robot policies in LIBERO.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vlarl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the dependency warnings vlarl hides."),
    debug: bool = typer.Option(False, "--debug", help="Show the Python traceback behind an error message "
                               "(accepted anywhere on the command line; or set VLARL_DEBUG=1)."),
) -> None:
    """Online RL post-training for Vision-Language-Action robot policies in LIBERO."""
    from vlarl_cli.logging.quiet import console_rules

    console_rules(verbose)  # --verbose is inherited by launched ranks and env workers (VLARL_VERBOSE)


def _register() -> None:
    # Subcommand modules import only typer/pathlib at module level; see module docstring.
    from vlarl_cli.cli import convert, doctor, download, eval, rl_train, setup_libero, setup_sim, sft, video

    context = {"allow_extra_args": True, "ignore_unknown_options": True}
    app.command("download", help=download.__doc__)(download.command)
    app.command("sft", help=sft.__doc__, context_settings=context)(sft.command)
    app.command("convert", help=convert.__doc__)(convert.command)
    app.command("rl-train", help=rl_train.__doc__, context_settings=context)(rl_train.command)
    app.command("eval", help=eval.__doc__)(eval.command)
    app.command("video", help=video.__doc__)(video.command)
    app.command("setup-libero", help=setup_libero.__doc__)(setup_libero.command)
    app.command("setup-sim", help=setup_sim.__doc__)(setup_sim.command)
    app.command("doctor", help=doctor.__doc__)(doctor.command)


_register()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point; exits with the code of :func:`run`."""
    _open_closed_streams()
    if argv is None and os.environ.get("_VLARL_COMPLETE"):
        # a shell asking for completions: click's own main answers it (run() bypasses that main)
        app(prog_name="vlarl")
    sys.exit(run(sys.argv[1:] if argv is None else argv))


def _open_closed_streams() -> None:
    """``vlarl ... >&-`` (or <&-, 2>&-) starts Python with that stream None: every print would be an
    AttributeError traceback. What the user closed is discarded (os.devnull), as a shell does with output to a
    closed descriptor."""
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode, encoding="utf-8"))  # lives as long as the process


def run(argv: list[str]) -> int:
    """Run ``vlarl ARGV`` behind the error boundary (cli/boundary.py) and return the exit code.

    ``--debug`` is a global option but is accepted anywhere on the line (users add it at the end).
    """
    from vlarl_cli.cli.boundary import debug_requested, guarded

    debug = debug_requested(argv)
    args = _without_debug(argv)
    command = next((a for a in args if not a.startswith("-")), None)
    return guarded(lambda: _invoke(args), command=command, debug=debug)


def _without_debug(argv: list[str]) -> list[str]:
    if "--" in argv:
        cut = argv.index("--")
        return [a for a in argv[:cut] if a != "--debug"] + argv[cut:]
    return [a for a in argv if a != "--debug"]


def _invoke(args: list[str]) -> None:
    # Typer's own main() turns Ctrl-C into a silent exit code and prints usage errors itself; the
    # boundary needs the exceptions as they are, so the click command runs here without that wrapper.
    command = typer.main.get_command(app)
    with command.make_context("vlarl", list(args)) as ctx:
        command.invoke(ctx)


if __name__ == "__main__":
    main()
