"""What every `rlplace` command shares: reading input files, writing output, and one error line for bad input.

Output is the user's text: data (JSON, YAML, export lines, the autotune block) is written to stdout as it is,
never through rich; tables go through a console that interprets no markup, emoji or highlighting, with every
cell a `Text`. Errors are one `error: ...` line on stderr with exit status 2.
"""

from __future__ import annotations

import re
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from placement_core.configfile import quote, read_config_bytes
from placement_core.errors import PlacementError

if TYPE_CHECKING:
    from rich.console import Console

#: Exit status for bad input (a missing file, bad YAML, an impossible placement, a usage error).
EXIT_BAD_INPUT = 2
#: Piped output (files, CI logs) is never wrapped: table columns are as wide as their widest cell.
PIPED_WIDTH = 1_000_000
#: An error line quotes at most this much of any value, and is cut at MAX_ERROR_CHARS overall.
MAX_QUOTED_SPAN = 200
MAX_ERROR_CHARS = 1000
#: Text read from stdin or a plan file: far above any real plan (about 600 bytes per process).
MAX_INPUT_BYTES = 256 * 1024 * 1024

_LONG_QUOTED = re.compile(rf"'([^'\n]{{{MAX_QUOTED_SPAN + 1},}})'")
STDIN = "-"


def one_line(message: str) -> str:
    """`message` as one bounded line: long quoted values cut, control characters written as escapes."""
    message = _LONG_QUOTED.sub(lambda m: quote(m.group(1), MAX_QUOTED_SPAN), message)
    message = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)
    if len(message) > MAX_ERROR_CHARS:
        message = f"{message[:MAX_ERROR_CHARS]}... ({len(message)} characters)"
    return message


#: `--no-compose`: every command that reads a job config takes it.
NoComposeOpt = Annotated[
    bool,
    typer.Option(
        "--no-compose", help="Read the config file alone: do not compose its Hydra defaults: list (docs/config.md)."
    ),
]


def fail(message: str) -> NoReturn:
    """Print `error: <message>` on stderr (one line) and exit with status 2."""
    sys.stderr.write(f"error: {one_line(message)}\n")
    sys.stderr.flush()
    raise typer.Exit(EXIT_BAD_INPUT)


@contextmanager
def user_errors(where: str = "") -> Iterator[None]:
    """Report a PlacementError as one line instead of a traceback."""
    try:
        yield
    except PlacementError as err:
        fail(f"{where}{err}")


class OutputClosed(Exception):
    """The reader of stdout went away (`rlplace plan ... | head`). Not an OSError: click would take a broken
    pipe for a normal end and exit 0, and a script could not tell that the output was cut."""


def write_out(text: str) -> None:
    """Data output: `text` on stdout exactly as given (flushed, so a closed pipe is reported here)."""
    try:
        sys.stdout.write(text)
        if not text.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise OutputClosed from None


def console(stderr: bool = False) -> Console:
    """A rich console for tables and progress bars that prints the user's text as it is."""
    from rich.console import Console  # rich's import costs ~0.1 s; data output never needs it

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else PIPED_WIDTH
    return Console(
        file=stream, width=width, markup=False, emoji=False, highlight=False, soft_wrap=False, no_color=not width
    )


def read_input(path: str, what: str, limit: int) -> bytes:
    """The bytes of `path` (or stdin for `-`), at most `limit` of them; anything unreadable is one error line."""
    if path == STDIN:
        data = sys.stdin.buffer.read(limit + 1)
        where = f"{what} on stdin"
        if not data:
            fail(f"{where} is empty")
    else:
        where = f"{what} {quote(path)}"
        file = Path(path)
        try:
            mode = file.stat().st_mode
        except FileNotFoundError:
            fail(f"{where} does not exist")
        except OSError as err:
            fail(f"cannot read {where}: {err.strerror}")
        if stat.S_ISDIR(mode):
            fail(f"{where} is a directory")
        try:
            with file.open("rb") as stream:
                data = stream.read(limit + 1)
        except OSError as err:
            fail(f"cannot read {where}: {err.strerror}")
    if len(data) > limit:
        fail(f"{where} is larger than {limit // (1024 * 1024)} MiB")
    return data


def describe(path: str, what: str) -> str:
    return f"{what} on stdin" if path == STDIN else f"{what} {quote(path)}"


def load_config(path: str, compose: bool = True) -> dict[str, Any]:
    """The job config in `path` (`-` for stdin): strict YAML, bounded, composed from its Hydra `defaults:` list
    unless `compose` is false, each interpolation resolved when it can be (docs/config.md)."""
    from placement_core.configfile import MAX_CONFIG_BYTES

    where = describe(path, "config file")
    data = read_input(path, "config file", MAX_CONFIG_BYTES)
    with user_errors():
        config = read_config_bytes(data, where, None if path == STDIN else Path(path), compose)
    if str(config.get("apiVersion", "")).startswith("rlplace.io/"):
        fail(
            f"{where} is a Kubernetes {quote(config.get('kind', 'object'))} manifest (apply it with kubectl); "
            "rlplace takes a job config with a cluster: section"
        )
    return config
