"""`rlplace plan`: the exact per-process placement of a config, as a table, JSON or YAML."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.table import Table

from placement_core.cli.common import fail, load_config, stdout, user_errors
from placement_core.components import component_placement
from placement_core.errors import PlacementError
from placement_core.plan import Plan, build_plan, shared_with

app = typer.Typer()


class OutputFormat(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


class PlacementKindOption(enum.StrEnum):
    hybrid = "hybrid"
    model_parallel = "model-parallel"


@app.command()
def plan(
    config_path: Annotated[
        Path, typer.Argument(metavar="CONFIG.yaml", help="Job config with cluster.component_placement.")
    ],
    output_format: Annotated[OutputFormat, typer.Option("--format", "-o", help="Output format.")] = OutputFormat.table,
    placement: Annotated[
        PlacementKindOption | None,
        typer.Option(
            help="Placement class. Default: model-parallel when runner.task_type is reasoning, else hybrid.",
        ),
    ] = None,
    no_isolate: Annotated[
        bool, typer.Option("--no-isolate", help="Let every process see all GPUs of its node.")
    ] = False,
    env: Annotated[
        tuple[str, int] | None,
        typer.Option(metavar="COMPONENT RANK", help="Print the environment of one process as export lines."),
    ] = None,
) -> None:
    """Print where every process of every component runs and which GPUs it sees."""
    config = load_config(config_path)
    with user_errors():
        placed = component_placement(config, kind=placement.value if placement else None)
        planned = build_plan(placed, isolate_accelerator=not no_isolate)
        if env is not None:
            component, rank = env
            processes = planned.component(component).processes
            if not 0 <= rank < len(processes):
                fail(f"component '{component}' has ranks 0-{len(processes) - 1}, not {rank}")
            for key, value in processes[rank].env.items():
                stdout.print(f"export {key}={_shell_quote(value)}", markup=False)
            return
    if output_format is OutputFormat.json:
        stdout.print(planned.to_json(indent=2), markup=False)
    elif output_format is OutputFormat.yaml:
        stdout.print(yaml.safe_dump(planned.to_dict(), sort_keys=False), markup=False, end="")
    else:
        _print_tables(planned)


@app.command()
def show(
    plan_path: Annotated[
        str, typer.Argument(metavar="PLAN.json", help="A stored plan (e.g. the operator's ConfigMap), or - for stdin.")
    ],
) -> None:
    """Print a stored plan (`plan --format json`, or an RLJob's <job>-placement ConfigMap) as tables."""
    try:
        text = sys.stdin.read() if plan_path == "-" else Path(plan_path).read_text(encoding="utf-8")
    except OSError as err:
        fail(f"cannot read plan '{plan_path}': {err.strerror or err}")
    try:
        planned = Plan.from_json(text)
    except PlacementError as err:
        fail(f"plan '{plan_path}': {err}")
    _print_tables(planned)


def _shell_quote(value: str) -> str:
    safe = value and all(c.isalnum() or c in ",._-/:=" for c in value)
    return value if safe else "'" + value.replace("'", "'\\''") + "'"


def _print_tables(planned: Plan) -> None:
    stdout.print(f"mode: {planned.mode}")
    sharing = shared_with(planned)
    for component in planned.components:
        groups = ",".join(component.node_groups)
        table = Table(
            title=f"{component.name}: {component.world_size} processes, {component.strategy} strategy, "
            f"node group {groups}",
            title_justify="left",
        )
        for column in ("rank", "node", "group", "GPUs", "CUDA_VISIBLE_DEVICES", "shared with"):
            table.add_column(column, justify="right" if column == "rank" else "left")
        for p in component.processes:
            placed = p.placement
            table.add_row(
                str(p.rank),
                f"{p.node_name} (rank {p.node_rank})",
                placed.node_group_label,
                ",".join(map(str, placed.local_hardware_ranks)) or "-",
                ",".join(placed.visible_accelerators) or "-",
                ",".join(sharing[(component.name, p.rank)]) or "-",
            )
        stdout.print(table)
