"""`rlplace show` reads every plan the project writes, and `rlplace plan -` reads its config from stdin."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from placement_core.cli import app
from placement_core.components import component_placement
from placement_core.contract import PLAN_GZIP_KEY, PLAN_KEY, plan_payload
from placement_core.plan import Plan, build_plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "heterogeneous-a800-4090-robot.yaml"


def run(*args: str, stdin: str | bytes | None = None):
    return CliRunner().invoke(app, list(args), input=stdin)


@pytest.fixture(scope="module")
def plan() -> Plan:
    return build_plan(component_placement(yaml.safe_load(EXAMPLE.read_text())))


@pytest.fixture(scope="module")
def table() -> str:
    result = run("plan", str(EXAMPLE))
    assert result.exit_code == 0, result.stderr
    return result.stdout


def configmap(key: str, content: str | bytes) -> dict:
    """The ConfigMap as `kubectl get configmap NAME -o json` prints it (binaryData is base64)."""
    body = (
        {"data": {key: content}}
        if isinstance(content, str)
        else {"binaryData": {key: base64.b64encode(content).decode()}}
    )
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "job-placement", "namespace": "x"}, **body}


def forms(plan: Plan) -> dict[str, bytes]:
    as_json = run("plan", str(EXAMPLE), "-o", "json").stdout
    as_yaml = run("plan", str(EXAMPLE), "-o", "yaml").stdout
    gz_map = configmap(PLAN_GZIP_KEY, plan.to_gzip())
    text_map = configmap(PLAN_KEY, plan.to_json())
    return {
        "plan.json": plan.to_json().encode(),
        "plan.json.gz": plan.to_gzip(),
        "plan -o json": as_json.encode(),
        "plan -o yaml": as_yaml.encode(),
        "plan -o json, gzipped": gzip.compress(as_json.encode()),
        "ConfigMap -o json (data)": json.dumps(text_map).encode(),
        "ConfigMap -o yaml (data)": yaml.safe_dump(text_map).encode(),
        "ConfigMap -o json (binaryData)": json.dumps(gz_map).encode(),
        "ConfigMap -o yaml (binaryData)": yaml.safe_dump(gz_map).encode(),
    }


FORMS = [
    "plan.json",
    "plan.json.gz",
    "plan -o json",
    "plan -o yaml",
    "plan -o json, gzipped",
    "ConfigMap -o json (data)",
    "ConfigMap -o yaml (data)",
    "ConfigMap -o json (binaryData)",
    "ConfigMap -o yaml (binaryData)",
]


@pytest.mark.parametrize("form", FORMS)
def test_show_reads_every_plan_the_project_writes(tmp_path, plan, table, form):
    content = forms(plan)[form]
    path = tmp_path / "plan"
    path.write_bytes(content)
    from_file = run("show", str(path))
    assert from_file.exit_code == 0, from_file.stderr
    assert from_file.stdout == table
    from_stdin = run("show", "-", stdin=content)
    assert from_stdin.stdout == table
    as_json = run("show", str(path), "-o", "json")
    assert Plan.from_json(as_json.stdout) == plan


def test_the_operator_payload_is_one_of_them(tmp_path, plan, table):
    key, content = plan_payload(plan)
    (tmp_path / "cm.json").write_text(json.dumps(configmap(key, content)))
    assert run("show", str(tmp_path / "cm.json")).stdout == table


def test_plan_reads_stdin(table):
    result = run("plan", "-", stdin=EXAMPLE.read_text())
    assert result.exit_code == 0, result.stderr
    assert result.stdout == table
