"""`rlplace autotune` (search for the fastest placement) and `rlplace cost` (price the config's own placement).

Both read the same profile and cost model, so a user can paste the suggested block into the config and check
it, or price a placement of their own against the suggestion.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from placement_core import autoplace
from placement_core.autoplace.cost import CostModel
from placement_core.autoplace.report import explain_table, render_text
from placement_core.cli.common import load_config, stderr, stdout, user_errors
from placement_core.jobconfig import read_job

app = typer.Typer()

#: A search that has run this long gets a progress bar (on a terminal); quicker ones print nothing extra.
PROGRESS_AFTER_S = 0.5


class OutputFormat(enum.StrEnum):
    text = "text"
    json = "json"


ConfigArg = Annotated[Path, typer.Argument(metavar="CONFIG.yaml", help="Job config with profile_data.")]
CostModelOpt = Annotated[
    CostModel, typer.Option("--cost-model", help="How a component's cost scales with its GPUs (reasoning tasks).")
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-o", help="Output format.")]


@app.command()
def autotune(
    config_path: ConfigArg,
    cost_model: CostModelOpt = CostModel.scaling,
    output_format: FormatOpt = OutputFormat.text,
    explain: Annotated[bool, typer.Option("--explain", help="Also show the best schedule of each mode.")] = False,
) -> None:
    """Find the component placement with the shortest predicted iteration time and print it as a block."""
    config = load_config(config_path)
    with user_errors(), _progress_bar() as progress:
        result = autoplace.autotune(read_job(config), cost_model, progress=progress)
    if output_format is OutputFormat.json:
        stdout.print(json.dumps(result.to_json(), indent=2), markup=False)
    else:
        stdout.print(render_text(result), markup=False)
    if explain:
        # With JSON on stdout the table goes to stderr, so stdout stays parseable.
        (stderr if output_format is OutputFormat.json else stdout).print(explain_table(result))


@app.command()
def cost(
    config_path: ConfigArg,
    cost_model: CostModelOpt = CostModel.scaling,
    output_format: FormatOpt = OutputFormat.text,
) -> None:
    """Print the predicted iteration time of the placement already in the config."""
    config = load_config(config_path)
    with user_errors():
        schedule = autoplace.predict(read_job(config), cost_model)
    if output_format is OutputFormat.json:
        data = {
            "mode": schedule.mode,
            "total_cost": schedule.total,
            "components": {
                name: {"gpus": list(rng), "per_batch": per_batch}
                for name, rng, per_batch in zip(schedule.names, schedule.ranges, schedule.per_batch, strict=True)
            },
        }
        stdout.print(json.dumps(data, indent=2), markup=False)
        return
    stdout.print(f"predicted iteration time: {schedule.total:.2f} s ({schedule.mode})", markup=False)
    for name, (start, end), per_batch in zip(schedule.names, schedule.ranges, schedule.per_batch, strict=True):
        stdout.print(f"  {name}: GPUs {start}-{end}, {per_batch:.4g} s per batch", markup=False)


@contextmanager
def _progress_bar() -> Iterator[autoplace.Progress | None]:
    """A progress callback that draws a bar on stderr once a search has run for a while, on a terminal only."""
    if not stderr.is_terminal:
        yield None
        return
    started = time.monotonic()
    bar: Progress | None = None
    task_id = None

    def report(done: int, total: int) -> None:
        nonlocal bar, task_id
        if bar is None:
            if time.monotonic() - started < PROGRESS_AFTER_S:
                return
            bar = Progress(
                TextColumn("searching placements"), BarColumn(), TimeElapsedColumn(), console=stderr, transient=True
            )
            bar.start()
            task_id = bar.add_task("search", total=total)
        bar.update(task_id, completed=done, total=total)

    try:
        yield report
    finally:
        if bar is not None:
            bar.stop()
