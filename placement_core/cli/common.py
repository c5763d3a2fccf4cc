"""What every `rlplace` command shares: loading a config file and turning bad input into one error line."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import typer
import yaml
from rich.console import Console

from placement_core.errors import PlacementError

#: Exit status for bad input (a missing file, bad YAML, an impossible placement).
EXIT_BAD_INPUT = 2

# Piped output (files, CI logs) gets a wide fixed width so table columns are never cut.
stdout = Console(soft_wrap=True, highlight=False, width=None if sys.stdout.isatty() else 200)
stderr = Console(stderr=True, soft_wrap=True, highlight=False)


def fail(message: str) -> NoReturn:
    """Print `error: <message>` on stderr and exit with status 2."""
    stderr.print(f"error: {message}", markup=False)
    raise typer.Exit(EXIT_BAD_INPUT)


@contextmanager
def user_errors() -> Iterator[None]:
    """Report a PlacementError as one line instead of a traceback."""
    try:
        yield
    except PlacementError as err:
        fail(str(err))


def load_config(path: Path) -> dict[str, object]:
    """The YAML mapping in `path`; a missing file, bad YAML or a non-mapping is a one-line error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"config file '{path}' does not exist")
    except IsADirectoryError:
        fail(f"config file '{path}' is a directory")
    except (OSError, UnicodeDecodeError) as err:
        fail(f"cannot read config file '{path}': {err}")
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        fail(f"config file '{path}' is not valid YAML{where}: {problem}")
    if not isinstance(config, dict):
        fail(f"config file '{path}' must hold a YAML mapping, got {type(config).__name__}")
    if str(config.get("apiVersion", "")).startswith("rlplace.io/"):
        fail(
            f"'{path}' is a Kubernetes {config.get('kind', 'object')} manifest (apply it with kubectl); "
            "rlplace takes a job config with a cluster: section"
        )
    return config
