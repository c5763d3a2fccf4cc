"""The picture of a plan (`rlplace plan --svg`, `rlplace show --svg`; placement_core/picture.py): which rows it
folds, what each GPU shows, that a 36,864-process plan is one screen, and that a real browser (Debian's headless
Chromium, a host package of `make setup`) renders it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from placement_core.cli import app
from placement_core.components import component_placement
from placement_core.configfile import load_yaml
from placement_core.picture import plan_grid, plan_rows, plan_svg
from placement_core.plan import build_plan

ROOT = Path(__file__).resolve().parents[2]
HETERO = ROOT / "examples" / "heterogeneous-a800-4090-robot.yaml"
SVG = "{http://www.w3.org/2000/svg}"


def hetero_plan():
    placed = component_placement(load_yaml(HETERO.read_text(), str(HETERO)))
    return build_plan(placed), {rank: node.num_accelerators for rank, node in enumerate(placed.cluster.nodes)}


def test_rows_show_each_gpus_components_and_what_runs_off_the_gpus() -> None:
    plan, gpus = hetero_plan()
    rows = plan_rows(plan, gpus)
    assert [(row.group, row.label) for row in rows] == [("a800", "node-0"), ("a800", "node-1"), ("4090", "node-2")]
    shared = ("actor", "rollout")
    assert rows[0].gpus == (shared,) * 4 + (("actor",),) * 4
    assert rows[1].gpus == (("actor",),) * 8
    assert rows[2].gpus == (("rollout",),) * 8
    assert rows[2].off_gpu == (("env", 4), ("agent", 8))
    svg = plan_svg(plan, rows)
    # a shared GPU is two stripes of half a square, with a tooltip naming both
    assert svg.count("width='8.00'") == 8 and "node-0, GPU 0: actor, rollout" in svg
    assert "off GPU: env x4, agent x8" in svg


def test_identical_nodes_fold_into_one_row_and_a_36864_process_plan_is_one_screen() -> None:
    config = {
        "cluster": {
            "num_nodes": 1024,
            "accelerators_per_node": 8,
            "component_placement": {
                "actor,rollout": "all",
                "inference": "0-8191:0-16383",
                "reward": "0-8191:0-4095",
            },
        }
    }
    plan = build_plan(component_placement(config, kind="hybrid"))
    started = time.perf_counter()
    rows = plan_rows(plan)
    svg = plan_svg(plan, rows)
    elapsed = time.perf_counter() - started
    assert sum(c.world_size for c in plan.components) == 36_864
    assert [(row.label, row.count) for row in rows] == [("node-0 .. node-1023, x1024", 1024)]
    assert rows[0].gpus == (("actor", "rollout", "inference", "reward"),) * 8
    assert len(svg) < 20_000 and elapsed < 2.0, (len(svg), elapsed)
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and int(root.get("height")) < 400


def test_only_consecutive_look_alike_nodes_fold_and_free_gpus_are_drawn_empty() -> None:
    config = {
        "cluster": {
            "num_nodes": 4,
            "accelerators_per_node": 8,
            # nodes 0 and 1 alike, node 2 half used, node 3 like node 0 again: three rows, not two
            "component_placement": {"actor": "0-15,24-31", "rollout": "16-19"},
        }
    }
    placed = component_placement(config, kind="hybrid")
    plan = build_plan(placed)
    gpus = {rank: node.num_accelerators for rank, node in enumerate(placed.cluster.nodes)}
    rows = plan_rows(plan, gpus)
    assert [row.label for row in rows] == ["node-0 .. node-1, x2", "node-2", "node-3"]
    assert rows[1].gpus == (("rollout",),) * 4 + ((),) * 4
    # a stored plan does not say a node's GPUs: drawn up to the highest held
    assert plan_rows(plan)[1].gpus == (("rollout",),) * 4
    svg = plan_svg(plan, rows)
    assert svg.count("no process") == 4  # the four free GPUs' tooltips
    assert plan_grid(plan, rows).splitlines() == [
        "A actor (24)  R rollout (4)",
        "node group cluster    GPU 0 1 2 3 4 5 6 7",
        "  node-0 .. node-1, x2    A A A A A A A A",
        "  node-2                  R R R R . . . .",
        "  node-3                  A A A A A A A A",
    ]


def test_the_grid_gives_each_shared_combination_a_digit_and_names_it() -> None:
    plan, gpus = hetero_plan()
    grid = plan_grid(plan, plan_rows(plan, gpus)).splitlines()
    assert grid[0] == "A actor (16)  R rollout (16)  E env (4)  G agent (24)"
    assert grid[2] == "  node-0            1 1 1 1 A A A A   off GPU: agent x8"
    assert grid[-1] == "shared GPUs: 1 = actor+rollout"


def test_plan_and_show_write_the_svg_and_say_what_it_shows(tmp_path: Path) -> None:
    out = tmp_path / "plan.svg"
    result = CliRunner().invoke(app, ["plan", str(HETERO), "--svg", str(out)])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == f"wrote {out}: 60 processes on 3 nodes, 3 rows\n"
    ET.fromstring(out.read_text())
    stored = tmp_path / "plan.json"
    stored.write_text(CliRunner().invoke(app, ["plan", str(HETERO), "-o", "json"]).stdout)
    shown = CliRunner().invoke(app, ["show", str(stored), "--svg", "-"])
    assert shown.exit_code == 0, shown.stderr
    assert ET.fromstring(shown.stdout).tag == f"{SVG}svg"
    refused = CliRunner().invoke(app, ["plan", str(HETERO), "--svg", str(tmp_path / "missing" / "plan.svg")])
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: cannot write ") and refused.stderr.count("\n") == 1


def test_the_picture_in_the_docs_is_what_rlplace_draws_now() -> None:
    plan, gpus = hetero_plan()
    drawn = plan_svg(plan, plan_rows(plan, gpus))
    assert (ROOT / "docs" / "images" / "plan-heterogeneous.svg").read_text() == drawn, (
        "docs/images/plan-heterogeneous.svg is stale: rlplace plan examples/heterogeneous-a800-4090-robot.yaml "
        "--svg docs/images/plan-heterogeneous.svg"
    )


def chromium_title(page: Path) -> str:
    """The <title> of `page` once loaded in headless Chromium (its scripts run, its images load)."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: `make setup` installs it (HOST_PACKAGES in e2e/versions.env)"
    flags = ["--headless", "--disable-gpu", "--virtual-time-budget=5000", "--dump-dom"]
    if sys.platform == "linux" and Path("/proc/self").exists() and Path("/proc/self").stat().st_uid == 0:
        flags.append("--no-sandbox")  # as root Chromium refuses its sandbox
    dom = subprocess.run(
        [chromium, *flags, page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    return dom.split("<title>", 1)[1].split("</title>", 1)[0]


@pytest.mark.parametrize("case", ["heterogeneous", "36,864 processes", "broken"])
def test_a_real_browser_renders_the_picture(tmp_path: Path, case: str) -> None:
    """Loaded as an <img>, which a browser only shows for a well-formed SVG (a broken one fires onerror: the
    check can fail): Chromium reports the size it laid out."""
    if case == "heterogeneous":
        plan, gpus = hetero_plan()
        svg = plan_svg(plan, plan_rows(plan, gpus))
    elif case == "broken":
        svg = "<svg xmlns='http://www.w3.org/2000/svg' width='10' height='10'><rect></svg>"
    else:
        config = {"cluster": {"num_nodes": 1024, "accelerators_per_node": 8}}
        config["cluster"]["component_placement"] = {"actor,rollout": "all", "inference": "0-8191:0-16383"}
        plan = build_plan(component_placement(config, kind="hybrid"))
        svg = plan_svg(plan, plan_rows(plan))
    (tmp_path / "plan.svg").write_text(svg)
    page = tmp_path / "page.html"
    script = "document.title = 'loaded ' + this.naturalWidth + 'x' + this.naturalHeight"
    page.write_text(
        "<!doctype html><html><head><title>pending</title></head><body>"
        f"<img src='plan.svg' onload={json.dumps(script)} onerror=\"document.title = 'error'\"></body></html>"
    )
    title = chromium_title(page)
    if case == "broken":
        assert title == "error"
        return
    root = ET.fromstring(svg)
    assert title == f"loaded {root.get('width')}x{root.get('height')}"
