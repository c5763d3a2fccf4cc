"""`rlplace plan`: the exact per-process placement of a config, as a table, JSON or YAML."""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.table import Table

from placement_core.cli.common import fail, load_config, stdout, user_errors
from placement_core.plan import build_plan, component_placement, master_addr, process_env

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
        if env is not None:
            component, rank = env
            world_size = placed.get_world_size(component)
            processes = placed.get_placement(component, not no_isolate)
            if not 0 <= rank < world_size:
                fail(f"component '{component}' has ranks 0-{world_size - 1}, not {rank}")
            master = master_addr(placed, processes)
            for key, value in process_env(placed, component, processes[rank], master).items():
                stdout.print(f"export {key}={_shell_quote(value)}", markup=False)
            return
        data = build_plan(placed, isolate_accelerator=not no_isolate)
    if output_format is OutputFormat.json:
        stdout.print(json.dumps(data, indent=2), markup=False)
    elif output_format is OutputFormat.yaml:
        stdout.print(yaml.safe_dump(data, sort_keys=False), markup=False, end="")
    else:
        _print_tables(data)


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
        data = json.loads(text)
    except json.JSONDecodeError as err:
        fail(f"plan '{plan_path}' is not valid JSON: {err.msg} at line {err.lineno}")
    if not isinstance(data, dict) or not isinstance(data.get("components"), dict):
        fail(f"plan '{plan_path}' has no 'components' mapping (is it `rlplace plan --format json` output?)")
    _print_tables(data)


def _shell_quote(value: str) -> str:
    safe = value and all(c.isalnum() or c in ",._-/:=" for c in value)
    return value if safe else "'" + value.replace("'", "'\\''") + "'"


def _print_tables(data: dict) -> None:
    stdout.print(f"mode: {data['mode']}")
    for name, component in data["components"].items():
        groups = ",".join(component["node_groups"])
        table = Table(
            title=f"{name}: {component['world_size']} processes, {component['strategy']} strategy, node group {groups}",
            title_justify="left",
        )
        for column in ("rank", "node", "group", "GPUs", "CUDA_VISIBLE_DEVICES", "shared with"):
            table.add_column(column, justify="right" if column == "rank" else "left")
        shared = ",".join(component["shares_with"]) or "-"
        for p in component["processes"]:
            units = ",".join(map(str, p["local_hardware_ranks"])) or "-"
            table.add_row(
                str(p["rank"]),
                f"{p['node_name']} (rank {p['cluster_node_rank']})",
                p["node_group_label"],
                units,
                ",".join(p["visible_accelerators"]) or "-",
                shared,
            )
        stdout.print(table)
