"""`rlplace plan` (the exact per-process placement of a config) and `rlplace show` (a stored plan), as tables,
JSON or YAML."""

from __future__ import annotations

import base64
import binascii
import enum
import json
import shlex
import sys
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from placement_core.cli.common import (
    MAX_INPUT_BYTES,
    NoComposeOpt,
    describe,
    fail,
    load_config,
    read_input,
    user_errors,
    write_out,
)
from placement_core.configfile import load_yaml
from placement_core.errors import PlacementError

if TYPE_CHECKING:
    from placement_core.plan import Plan

app = typer.Typer()

#: A gzipped plan may unpack to at most this much text (a plan of 100,000 processes is about 60 MB); a small
#: gzip "bomb" costs no more memory than this.
MAX_PLAN_TEXT_BYTES = 128 * 1024 * 1024
#: YAML nodes a stored plan may hold (about 20 per process).
MAX_PLAN_NODES = 5_000_000
_GZIP_MAGIC = b"\x1f\x8b"


class OutputFormat(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


class PlacementKindOption(enum.StrEnum):
    hybrid = "hybrid"
    model_parallel = "model-parallel"
    model_parallel_eval = "model-parallel-eval"
    multi_agent = "multi-agent"
    multi_agent_eval = "multi-agent-eval"


FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-o", help="Output format.")]
SvgOpt = Annotated[
    str | None,
    typer.Option(
        "--svg",
        metavar="FILE",
        help="Write a picture of the plan to FILE (- for stdout) instead of printing it: nodes x GPUs coloured by "
        "component, identical nodes folded into one row.",
    ),
]


@app.command()
def plan(
    config_path: Annotated[
        str, typer.Argument(metavar="CONFIG.yaml", help="Job config with cluster.component_placement, or - for stdin.")
    ],
    output_format: FormatOpt = OutputFormat.table,
    placement: Annotated[
        PlacementKindOption | None,
        typer.Option(
            help="Placement class. Default: the one the reference's entry script for runner.task_type uses "
            "(reasoning: model-parallel, reasoning_eval: model-parallel-eval, each multi-agent when the config has "
            "agentloop.workflow; any other task: hybrid)."
        ),
    ] = None,
    no_isolate: Annotated[
        bool, typer.Option("--no-isolate", help="Let every process see all GPUs of its node.")
    ] = False,
    env: Annotated[
        tuple[str, int] | None,
        typer.Option(metavar="COMPONENT RANK", help="Print the environment of one process as export lines."),
    ] = None,
    no_compose: NoComposeOpt = False,
    svg: SvgOpt = None,
) -> None:
    """Print where every process of every component runs and which GPUs it sees (docs/placement.md)."""
    from placement_core.components import component_placement
    from placement_core.plan import build_plan

    config = load_config(config_path, compose=not no_compose)
    with user_errors():
        placed = component_placement(config, kind=placement.value if placement else None)
        planned = build_plan(placed, isolate_accelerator=not no_isolate)
        if env is not None:
            component, rank = env
            processes = planned.component(component).processes
            if not 0 <= rank < len(processes):
                fail(f"component '{component}' has ranks 0-{len(processes) - 1}, not {rank}")
            write_out("".join(f"export {key}={shlex.quote(value)}\n" for key, value in processes[rank].env.items()))
            return
    if svg is not None:
        gpus = {rank: node.num_accelerators for rank, node in enumerate(placed.cluster.nodes)}
        write_svg(planned, svg, gpus)
        return
    print_plan(planned, output_format)


@app.command()
def show(
    plan_path: Annotated[
        str,
        typer.Argument(
            metavar="PLAN",
            help="plan.json, plan.json.gz, `rlplace plan -o json|yaml` output, or the job's ConfigMap as "
            "`kubectl get configmap NAME -o json|yaml` prints it; - for stdin.",
        ),
    ],
    output_format: FormatOpt = OutputFormat.table,
    svg: SvgOpt = None,
) -> None:
    """Print a stored plan (such as an RLJob's <job>-placement ConfigMap)."""
    data = read_input(plan_path, "plan", MAX_INPUT_BYTES)
    with user_errors(f"{describe(plan_path, 'plan')}: "):
        planned = read_plan(data)
    if svg is not None:
        write_svg(planned, svg)
        return
    print_plan(planned, output_format)


def write_svg(planned: Plan, path: str, gpus_per_node: Mapping[int, int] | None = None) -> None:
    """The plan's picture to `path` (- for stdout), and on stderr one line saying what it shows."""
    from placement_core.picture import plan_rows, plan_svg

    rows = plan_rows(planned, gpus_per_node)
    text = plan_svg(planned, rows)
    if path == "-":
        write_out(text)
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        fail(f"cannot write {path}: {err.strerror or err}")
    processes = sum(component.world_size for component in planned.components)
    nodes = sum(row.count for row in rows)
    folded = f"{len(rows):,} row" + ("" if len(rows) == 1 else "s")
    sys.stderr.write(f"wrote {path}: {processes:,} processes on {nodes:,} nodes, {folded}\n")


def read_plan(data: bytes) -> Plan:
    """A plan from any form the project writes: JSON or YAML text, gzipped or not, or a ConfigMap holding it."""
    from placement_core.plan import Plan

    text = _text(_gunzip(data) if data.startswith(_GZIP_MAGIC) else data)
    document = _parse(text)
    if isinstance(document, Mapping) and document.get("kind") == "ConfigMap":
        return _plan_from_configmap(document)
    return Plan.from_dict(document)


def _text(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PlacementError(f"not UTF-8 text (byte {err.start} is {data[err.start]:#04x}); is it a plan?") from None
    if not text.strip():
        raise PlacementError("it is empty")
    if "\x00" in text:
        raise PlacementError("it is a binary file (it holds NUL bytes), not a plan")
    return text


def _gunzip(data: bytes) -> bytes:
    """Decompressed gzip data, never more than MAX_PLAN_TEXT_BYTES of it (a small file may unpack to GBs)."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        text = inflater.decompress(data, MAX_PLAN_TEXT_BYTES + 1)
    except zlib.error as err:
        raise PlacementError(f"it is not valid gzip: {err}") from None
    if len(text) > MAX_PLAN_TEXT_BYTES:
        raise PlacementError(
            f"it unpacks to more than {MAX_PLAN_TEXT_BYTES // (1024 * 1024)} MiB; no plan is that large"
        )
    if not inflater.eof:
        raise PlacementError("the gzip data is cut short")
    return text


def _parse(text: str) -> object:
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise PlacementError(f"not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
        except RecursionError:
            raise PlacementError("its JSON nests too deeply to be a plan") from None
    return load_yaml(text, "it", max_nodes=MAX_PLAN_NODES)


def _plan_from_configmap(configmap: Mapping[str, object]) -> Plan:
    """The plan in a ConfigMap as `kubectl get -o json|yaml` prints it; gzip is unpacked with the size bound."""
    from placement_core.contract import PLAN_GZIP_KEY, plan_from_configmap
    from placement_core.plan import Plan

    binary = configmap.get("binaryData")
    packed = binary.get(PLAN_GZIP_KEY) if isinstance(binary, Mapping) else None
    data = configmap.get("data")
    if isinstance(packed, str) and not (isinstance(data, Mapping) and data):
        try:
            compressed = base64.b64decode(packed, validate=True)
        except binascii.Error as err:
            raise PlacementError(f"binaryData.{PLAN_GZIP_KEY} is not base64: {err}") from None
        return Plan.from_json(_gunzip(compressed).decode("utf-8", errors="replace"))
    return plan_from_configmap(configmap)


def print_plan(planned: Plan, output_format: OutputFormat) -> None:
    if output_format is OutputFormat.json:
        from placement_core.cli.render import indented_json

        # Indented down to the process list; each process is one line (see render.py for why).
        write_out(indented_json(_with_sharing(planned), levels=4))
    elif output_format is OutputFormat.yaml:
        write_out(dump_yaml(_with_sharing(planned)))
    else:
        _print_tables(planned)


def _with_sharing(planned: Plan) -> dict[str, object]:
    """The plan's data with each component's `shares_with` (the other components on any of its GPUs or
    robots, docs/cli.md) after its node groups: what a person reading the output wants, not stored in plans."""
    from placement_core.plan import shares_with

    data = planned.to_dict()
    sharing = shares_with(planned)
    for name, component in data["components"].items():
        processes = component.pop("processes")
        component["shares_with"] = list(sharing[name])
        component["processes"] = processes
    return data


def dump_yaml(data: object) -> str:
    """YAML that keeps every string whole: unicode as it is, no line folding, key order kept."""
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True, width=2**31 - 1)


def _print_tables(planned: Plan) -> None:
    from placement_core.cli.render import table
    from placement_core.plan import shared_with

    sharing = shared_with(planned, limit=TABLE_SHARED_WITH + 1)
    out = [f"mode: {planned.mode}\n"]
    for component in planned.components:
        groups = ",".join(component.node_groups)
        out.append(
            f"{component.name}: {component.world_size} processes, {component.strategy} strategy, node group {groups}\n"
        )
        rows = [
            (
                str(p.rank),
                f"{p.node_name} (rank {p.node_rank})",
                p.placement.node_group_label,
                ",".join(map(str, p.placement.local_hardware_ranks)) or "-",
                ",".join(p.placement.visible_accelerators) or "-",
                _shared_cell(sharing[(component.name, p.rank)]),
            )
            for p in component.processes
        ]
        out.append(table(_COLUMNS, rows, right=(0,)))
    write_out("".join(out))


#: Components a table's "shared with" cell names; more are shown as "...", `-o json` lists them.
TABLE_SHARED_WITH = 8


def _shared_cell(others: tuple[str, ...]) -> str:
    if len(others) > TABLE_SHARED_WITH:
        return ",".join(others[:TABLE_SHARED_WITH]) + ",..."
    return ",".join(others) or "-"


_COLUMNS = ("rank", "node", "group", "GPUs", "CUDA_VISIBLE_DEVICES", "shared with")
