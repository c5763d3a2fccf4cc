"""Placeholder until the auto placement commands land."""

import typer

app = typer.Typer()
