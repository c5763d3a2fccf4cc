"""The `rlplace` command line: each command lives in its own module; this one only joins them.

`main` runs the app so that every failure a user can cause ends as one `error: ...` line with exit status 2:
usage errors (an unknown option, a missing argument) as well as bad input the commands report themselves.
The reference documentation is in docs/ (docs/README.md lists it).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Annotated

import typer

# typer ships its own copy of click (typer._click); its usage errors are these, and typer has no public name
# for the base class.
from typer._click.exceptions import ClickException, NoArgsIsHelpError

from placement_core.cli import autotune, plan
from placement_core.cli.common import EXIT_BAD_INPUT, OutputClosed, one_line

app = typer.Typer(
    name="rlplace",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Plain click help: flags read as flags (no `<bool>`), and --help never imports rich.
    rich_markup_mode=None,
)
app.add_typer(plan.app)
app.add_typer(autotune.app)


def package_version() -> str:
    # importlib.metadata costs ~0.05 s to import; only --version needs it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlplace")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"rlplace {package_version()}\n")
        raise typer.Exit(0)


@app.callback()
def options(
    show_version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """Exact GPU placement for RL training jobs: plan a component_placement, or search for the fastest one.

    Reference: docs/ in the rlplace repository (start at docs/README.md).
    """


def main(args: list[str] | None = None) -> None:
    """Run `rlplace`; exits with 0, 2 for bad input or usage, 1 for an interrupt or a broken pipe."""
    try:
        status = typer.main.get_command(app).main(args, prog_name="rlplace", standalone_mode=False)
    except NoArgsIsHelpError as err:
        # `rlplace` alone: the help is what was asked for, not an error.
        sys.stdout.write(err.format_message() + "\n")
        status = 0
    except ClickException as err:
        sys.stderr.write(f"error: {one_line(err.format_message())} (see rlplace --help)\n")
        status = EXIT_BAD_INPUT
    except typer.Abort:
        sys.stderr.write("error: interrupted\n")
        status = 1
    except (BrokenPipeError, OutputClosed):
        # The reader (`| head`) went away: stop quietly, and keep Python from reporting the flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    sys.exit(status if isinstance(status, int) else 0)


def _operator_extra_installed(command: str) -> None:
    """Exit with one line naming the operator extra when `command` needs it and it is not installed."""
    missing = [name for name in ("kopf", "kubernetes") if importlib.util.find_spec(name) is None]
    if missing:
        sys.stderr.write(
            f"error: {command} needs the operator extra ({', '.join(missing)} not installed): "
            "pip install 'rlplace[operator]'\n"
        )
        sys.exit(EXIT_BAD_INPUT)


def operator_main() -> None:
    """`rlplace-operator`: the operator, or one line naming the extra to install when it is missing."""
    _operator_extra_installed("rlplace-operator")
    from rlplace_operator.main import main as run_operator

    run_operator()


def kubectl_main() -> None:
    """`kubectl-rlplace` (`kubectl rlplace`): the plugin, or one line naming the extra to install when it is missing."""
    _operator_extra_installed("kubectl rlplace")
    from rlplace_operator.kubectl import main as run_plugin

    run_plugin()
