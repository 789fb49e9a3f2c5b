"""The `vlarl` command line: assembles one Typer app from one module per subcommand.

Each subcommand module defines ``command(...)`` (Typer parameters) that parses arguments, loads and
validates the config, and calls ONE library function. Heavy imports (torch models, robosuite) happen
inside those functions so that ``vlarl --help`` is instant.
"""

from __future__ import annotations

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
) -> None:
    """Online RL post-training for Vision-Language-Action robot policies in LIBERO."""
    from vlarl_cli.logging.quiet import quiet_dependencies, set_verbose

    if verbose:
        set_verbose(True)  # inherited by launched ranks and env workers
    quiet_dependencies()


def _register() -> None:
    # Subcommand modules import only typer/pathlib at module level; see module docstring.
    from vlarl_cli.cli import convert, doctor, download, eval, rl_train, setup_libero, sft, video

    context = {"allow_extra_args": True, "ignore_unknown_options": True}
    app.command("download", help=download.__doc__)(download.command)
    app.command("sft", help=sft.__doc__, context_settings=context)(sft.command)
    app.command("convert", help=convert.__doc__)(convert.command)
    app.command("rl-train", help=rl_train.__doc__, context_settings=context)(rl_train.command)
    app.command("eval", help=eval.__doc__)(eval.command)
    app.command("video", help=video.__doc__)(video.command)
    app.command("setup-libero", help=setup_libero.__doc__)(setup_libero.command)
    app.command("doctor", help=doctor.__doc__)(doctor.command)


_register()


def main() -> None:
    """Console-script entry point: user errors become one paragraph and exit code 2."""
    from vlarl_cli.errors import VlarlError

    try:
        app(standalone_mode=False)
    except VlarlError as err:
        _print_error(err)
        sys.exit(err.exit_code)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except typer.Abort:
        typer.echo("Aborted.", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        typer.echo("Interrupted.", err=True)
        sys.exit(130)
    except Exception as ex:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(ex, click.exceptions.ClickException):
            ex.show()
            sys.exit(2)
        raise


def _print_error(err: Exception) -> None:
    from rich.console import Console

    problem = getattr(err, "problem", str(err))
    fix = getattr(err, "fix", None)
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print(f"[bold red]error:[/] {problem}" + (f"\n[bold]fix:[/] {fix}" if fix else ""),
                  markup=True)


if __name__ == "__main__":
    main()
