"""docs/ stays true: every config in it plans, its printed outputs are what the CLI prints, its links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from placement_core.cli import app

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
_BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)


def blocks(kind: str) -> list[tuple[str, str]]:
    return [(page.name, body) for page in PAGES for lang, body in _BLOCK.findall(page.read_text()) if lang == kind]


def run(*args: str, stdin: str | None = None):
    return CliRunner().invoke(app, list(args), input=stdin)


CONFIGS = [(page, body) for page, body in blocks("yaml") if "component_placement:" in body]


@pytest.mark.parametrize(("page", "config"), CONFIGS, ids=[f"{p}-{i}" for i, (p, _) in enumerate(CONFIGS)])
def test_every_config_in_the_docs_plans(page, config):
    import textwrap

    result = run("plan", "-", stdin=textwrap.dedent(config))
    assert result.exit_code == 0, f"{page}: {result.stderr}"


def test_printed_tables_are_what_plan_prints():
    page = (DOCS / "placement.md").read_text()
    config = next(body for lang, body in _BLOCK.findall(page) if "rollout: 0-1:0-3,3-5,6-7:7-8" in body)
    shown = next(body for lang, body in _BLOCK.findall(page) if body.startswith("rollout: 9 processes"))
    assert shown in run("plan", "-", stdin=config).stdout


def test_error_lines_are_what_plan_prints():
    page = (DOCS / "placement.md").read_text()
    errors = next(body for lang, body in _BLOCK.findall(page) if body.startswith("error: component"))
    for line in errors.splitlines():
        placement = re.search(r"\(in '(actor: .*)'\)$", line).group(1)
        if "node_group" not in placement and "a80" in line:
            placement = "actor: {node_group: a80, placement: 0-1}"
        config = f"cluster:\n  num_nodes: 2\n  accelerators_per_node: 4\n  component_placement:\n    {placement}\n"
        assert run("plan", "-", stdin=config).stderr == line + "\n"


def test_links_resolve():
    for page in PAGES:
        prose = re.sub(r"`[^`\n]*`", "", page.read_text())  # a pattern in a code span is not a link
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", prose):
            if not target.startswith("http"):
                assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_help_and_readme_point_to_the_docs():
    assert "docs/" in run("--help").stdout
    readme = (DOCS.parent / "README.md").read_text()
    assert "docs/README.md" in readme
