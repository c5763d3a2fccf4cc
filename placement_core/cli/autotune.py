"""`rlplace autotune` (search for the fastest placement) and `rlplace cost` (price the config's own placement).

Both read the same profile and cost model, so a user can paste the suggested block into the config (or let
`--write` put it there) and check it, or price a placement of their own against the suggestion. Auto placement
needs numpy and scipy; they are imported inside the commands, so `rlplace plan` and `--help` never load them.
"""

from __future__ import annotations

import codecs
import enum
import io
import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from placement_core.cli.common import STDIN, NoComposeOpt, console, fail, load_config, user_errors, write_out
from placement_core.configfile import quote

if TYPE_CHECKING:
    from placement_core.autoplace import Progress

app = typer.Typer()

#: A search that has run this long gets a progress bar (on a terminal); quicker ones print nothing extra.
PROGRESS_AFTER_S = 0.5


class OutputFormat(enum.StrEnum):
    text = "text"
    json = "json"


class CostModelOption(enum.StrEnum):
    # The values of placement_core.autoplace.cost.CostModel, repeated so that --help needs no numpy.
    scaling = "scaling"
    linear = "linear"


ConfigArg = Annotated[str, typer.Argument(metavar="CONFIG.yaml", help="Job config with profile_data, or - for stdin.")]
CostModelOpt = Annotated[
    CostModelOption,
    typer.Option(
        "--cost-model", help="How a component's cost scales with its GPUs (reasoning tasks; docs/autoplace.md)."
    ),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-o", help="Output format.")]


@app.command()
def autotune(
    config_path: ConfigArg,
    cost_model: CostModelOpt = CostModelOption.scaling,
    output_format: FormatOpt = OutputFormat.text,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Also show the best schedule of each mode; over node groups of different GPUs, each component's "
            "time and memory check per group and the weight sync cost.",
        ),
    ] = False,
    write: Annotated[
        bool,
        typer.Option(
            "--write",
            help="Replace cluster.component_placement in CONFIG.yaml with the result, keeping its comments and layout.",
        ),
    ] = False,
    no_compose: NoComposeOpt = False,
) -> None:
    """Find the component placement with the shortest predicted iteration time.

    Prints the config's whole cluster: section with the component_placement found, to paste over the
    config's own cluster: section; or use --write.
    """
    from placement_core import autoplace
    from placement_core.autoplace.report import estimates_table, explain_table, render_text
    from placement_core.jobconfig import read_job

    if write and config_path == STDIN:
        fail("--write needs a config file, not stdin")
    config = load_config(config_path, compose=not no_compose)
    with user_errors(), _progress_bar() as progress:
        result = autoplace.autotune(read_job(config), cost_model.value, progress=progress)
    if output_format is OutputFormat.json:
        write_out(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        cluster = config.get("cluster")
        write_out(render_text(result, cluster if isinstance(cluster, Mapping) else None))
    if explain:
        # With JSON on stdout the table goes to stderr, so stdout stays parseable.
        out = console(stderr=output_format is OutputFormat.json)
        out.print(explain_table(result))
        per_group = estimates_table(result)
        if per_group is not None:
            out.print(per_group)
    if write:
        write_placement(Path(config_path), result.component_placement)
        console(stderr=True).print(f"wrote cluster.component_placement to {quote(config_path)}")


@app.command()
def cost(
    config_path: ConfigArg,
    cost_model: CostModelOpt = CostModelOption.scaling,
    output_format: FormatOpt = OutputFormat.text,
    no_compose: NoComposeOpt = False,
) -> None:
    """Print the predicted iteration time of the placement already in the config."""
    from placement_core import autoplace
    from placement_core.jobconfig import read_job

    config = load_config(config_path, compose=not no_compose)
    with user_errors():
        schedule = autoplace.predict(read_job(config), cost_model.value)
    if output_format is OutputFormat.json:
        data = {
            "mode": schedule.mode,
            "total_cost": schedule.total,
            "components": {
                name: {"gpus": list(rng), "per_batch": per_batch}
                for name, rng, per_batch in zip(schedule.names, schedule.ranges, schedule.per_batch, strict=True)
            },
        }
        write_out(json.dumps(data, indent=2, ensure_ascii=False))
        return
    lines = [f"predicted iteration time: {schedule.total:.2f} s ({schedule.mode})"]
    for name, (start, end), per_batch in zip(schedule.names, schedule.ranges, schedule.per_batch, strict=True):
        lines.append(f"  {name}: GPUs {start}-{end}, {per_batch:.4g} s per batch")
    write_out("\n".join(lines))


def write_placement(path: Path, placement: Mapping[str, str]) -> None:
    """Set `cluster.component_placement` in the YAML file at `path` to `placement`, keeping everything else
    (comments, key order, quoting, indentation) as it was: ruamel.yaml's round-trip mode, then an atomic
    replace so an interrupted write never leaves half a config. A symlink is written through (the file it
    points to is updated, the link stays), and the file's line endings (CRLF or LF) and UTF-8 BOM are kept."""
    from ruamel.yaml import YAML, CommentedMap
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.util import load_yaml_guess_indent

    path = Path(os.path.realpath(path))
    try:
        data = path.read_bytes()
        bom = data.startswith(codecs.BOM_UTF8)
        crlf = b"\r\n" in data
        text = data.decode("utf-8-sig").replace("\r\n", "\n")
        # ruamel does not keep the file's indentation by itself: it guesses the sequences' (and their dashes'
        # offset); a mapping's is the smallest indentation of a key line.
        document, sequence_indent, dash_offset = load_yaml_guess_indent(text)
    except (OSError, YAMLError, UnicodeDecodeError) as err:
        fail(f"cannot update {quote(str(path))}: {err}")
    key_indents = [
        len(line) - len(line.lstrip(" "))
        for line in text.splitlines()
        if line.startswith(" ") and line.strip() and not line.lstrip().startswith(("#", "-"))
    ]
    mapping_indent = min(key_indents, default=2)
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 2**31 - 1
    yaml.indent(mapping=mapping_indent, sequence=sequence_indent or mapping_indent, offset=dash_offset or 0)
    cluster = document.get("cluster") if isinstance(document, CommentedMap) else None
    if not isinstance(cluster, CommentedMap):
        fail(f"cannot update {quote(str(path))}: it has no cluster: mapping")
    old = cluster.get("component_placement")
    if isinstance(old, CommentedMap) and old:
        # Reuse the mapping so the comments before it stay in place; what follows its last entry (comments,
        # blank lines) is stored on that entry, so it moves to the new last entry.
        trailing = old.ca.items.pop(list(old)[-1], None)
        for key in list(old):
            del old[key]
        old.update(placement)
        if trailing is not None:
            _drop_line_comment(trailing)
            old.ca.items[list(old)[-1]] = trailing
    else:
        cluster["component_placement"] = CommentedMap(placement)
    out = io.StringIO()
    yaml.dump(document, out)
    updated = out.getvalue().replace("\n", "\r\n") if crlf else out.getvalue()
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write((codecs.BOM_UTF8 if bom else b"") + updated.encode("utf-8"))
    os.chmod(tmp.name, path.stat().st_mode & 0o7777)
    os.replace(tmp.name, path)


def _drop_line_comment(comments: list[object]) -> None:
    """Keep what followed a replaced entry (blank lines, comment lines) but not the comment on its own line,
    which described that entry."""
    token = comments[2] if len(comments) > 2 else None
    value = getattr(token, "value", None)
    if isinstance(value, str) and value.startswith("#"):
        token.value = "\n" + value.split("\n", 1)[1] if "\n" in value else "\n"


@contextmanager
def _progress_bar() -> Iterator[Progress | None]:
    """A progress callback that draws a bar on stderr once a search has run for a while, on a terminal only."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as ProgressBar

    err = console(stderr=True)
    if not err.is_terminal:
        yield None
        return
    started = time.monotonic()
    bar: ProgressBar | None = None
    task_id = None

    def report(done: int, total: int) -> None:
        nonlocal bar, task_id
        if bar is None:
            if time.monotonic() - started < PROGRESS_AFTER_S:
                return
            bar = ProgressBar(
                TextColumn("searching placements"), BarColumn(), TimeElapsedColumn(), console=err, transient=True
            )
            bar.start()
            task_id = bar.add_task("search", total=total)
        bar.update(task_id, completed=done, total=total)

    try:
        yield report
    finally:
        if bar is not None:
            bar.stop()
