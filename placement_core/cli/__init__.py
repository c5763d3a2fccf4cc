"""The `rlplace` command line: each command lives in its own module; this one only joins them."""

from __future__ import annotations

import typer

from placement_core.cli import autotune, plan

app = typer.Typer(
    name="rlplace",
    help="Exact GPU placement for RL training jobs: plan a component_placement, or search for the fastest one.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(plan.app)
app.add_typer(autotune.app)


def main() -> None:
    app()
