"""`rlplace` on users' own configs, as a new user runs it: the class picked from the task, `--placement`,
`--no-compose`, `--env` output that a shell can evaluate safely, `--write` through links keeping the file's
bytes, a reader that stops early, deep nesting and thousands of components (docs/cli.md, docs/config.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from placement_core.cli import app
from placement_core.cli.plan import TABLE_SHARED_WITH
from placement_core.plan import MAX_SHARING_LISTED

ROOT = Path(__file__).resolve().parents[2]
RLPLACE = [sys.executable, "-c", "from placement_core.cli import main; main()"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


EVAL = """\
runner:
  task_type: reasoning_eval
cluster:
  num_nodes: 1
  component_placement:
    rollout,reward: all
rollout:
  tensor_parallel_size: 4
"""


def test_the_class_comes_from_the_task_and_placement_overrides_it(tmp_path):
    path = str(write(tmp_path, "eval.yaml", EVAL))
    picked = json.loads(invoke("plan", path, "-o", "json").stdout)
    assert picked["components"]["rollout"]["world_size"] == 2  # packed by tensor parallel size 4
    forced = json.loads(invoke("plan", path, "-o", "json", "--placement", "hybrid").stdout)
    assert forced["components"]["rollout"]["world_size"] == 8


def test_no_compose_on_the_command_line(tmp_path):
    write(tmp_path, "base.yaml", "rollout:\n  tensor_parallel_size: 8\n")
    path = str(write(tmp_path, "job.yaml", "defaults:\n  - _self_\n  - base\n" + EVAL))
    composed = json.loads(invoke("plan", path, "-o", "json").stdout)
    assert composed["components"]["rollout"]["world_size"] == 1  # base's tp 8 comes after the file's 4
    alone = json.loads(invoke("plan", path, "--no-compose", "-o", "json").stdout)
    assert alone["components"]["rollout"]["world_size"] == 2
    missing = invoke("plan", str(write(tmp_path, "lost.yaml", "defaults:\n  - nowhere\n" + EVAL)))
    assert missing.exit_code == 2 and "a defaults file cannot be found" in missing.stderr
    alone = invoke("plan", str(tmp_path / "lost.yaml"), "--no-compose", "-o", "json")
    assert alone.exit_code == 0, alone.stderr


ENV_CONFIG = """\
cluster:
  num_nodes: 1
  node_groups:
    - label: gpus
      node_ranks: 0
      env_configs:
        - env_vars:
            - {KEY: VALUE}
  component_placement:
    actor:
      node_group: gpus
      placement: 0-1
"""


@pytest.mark.parametrize("key", ["A;touch PWNED;B", "MY VAR", "1ABC", "A$(id)"])
def test_env_keys_must_be_variable_names(tmp_path, key):
    path = write(tmp_path, "job.yaml", ENV_CONFIG.replace("KEY", json.dumps(key)))
    result = invoke("plan", str(path), "--env", "actor", "0")
    assert result.exit_code == 2
    assert "is not an environment variable name" in result.stderr
    assert not (tmp_path / "PWNED").exists()


def test_env_values_are_quoted_for_the_shell(tmp_path):
    value = "it's $(touch PWNED); `touch PWNED` a b"
    path = write(tmp_path, "job.yaml", ENV_CONFIG.replace("KEY", "MY_VAR").replace("VALUE", json.dumps(value)))
    result = invoke("plan", str(path), "--env", "actor", "0")
    assert result.exit_code == 0, result.stderr
    shown = subprocess.run(
        ["bash", "-c", 'eval "$1"; printf %s "$MY_VAR"', "bash", result.stdout],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == value
    assert not (tmp_path / "PWNED").exists()


def test_write_goes_through_a_link_and_keeps_crlf_and_bom(tmp_path):
    text = (ROOT / "examples" / "autotune-reasoning.yaml").read_text()
    real = tmp_path / "real" / "job.yaml"
    real.parent.mkdir()
    original = b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode()
    real.write_bytes(original)
    link = tmp_path / "job.yaml"
    link.symlink_to(real)
    result = invoke("autotune", str(link), "--write")
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink() and link.resolve() == real
    updated = real.read_bytes()
    assert updated != original
    assert updated.startswith(b"\xef\xbb\xbf")
    body = updated[3:]
    assert body.count(b"\n") == body.count(b"\r\n") > 10
    plan = invoke("plan", str(link), "-o", "json")  # what was written still reads
    assert plan.exit_code == 0, plan.stderr


@pytest.mark.parametrize("fmt", ["table", "yaml", "json"])
def test_a_reader_that_stops_early_is_exit_status_1_without_a_traceback(tmp_path, fmt):
    path = write(tmp_path, "job.yaml", EVAL)
    process = subprocess.Popen(
        [*RLPLACE, "plan", str(path), "-o", fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    process.stdout.close()  # like `| head` that has already gone
    stderr = process.stderr.read().decode()
    assert process.wait() == 1
    assert "Traceback" not in stderr


@pytest.mark.parametrize("command", ["plan", "show"])
def test_deep_flow_nesting_is_one_line_not_a_crash(tmp_path, command):
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 30_000 + "]" * 30_000 + "\n")
    result = subprocess.run([*RLPLACE, command, str(path)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2, result.stderr[-500:]
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "nests more than 64 levels deep at line 1" in result.stderr


def test_many_components_on_the_same_gpus_list_a_bounded_sharing(tmp_path):
    count = 300
    placement = "".join(f"    c{i}: 0-7\n" for i in range(count))
    path = write(tmp_path, "job.yaml", "cluster:\n  num_nodes: 1\n  component_placement:\n" + placement)
    table = invoke("plan", str(path))
    assert table.exit_code == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith("│    0 "))
    assert row.split("│")[-2].strip() == ",".join(f"c{i}" for i in range(1, TABLE_SHARED_WITH + 1)) + ",..."
    data = json.loads(invoke("plan", str(path), "-o", "json").stdout)
    shares = data["components"]["c0"]["shares_with"]
    assert shares == [f"c{i}" for i in range(1, MAX_SHARING_LISTED + 1)]
    assert data["components"]["c5"]["shares_with"][:6] == ["c0", "c1", "c2", "c3", "c4", "c6"]


def test_reference_style_config_plans_with_its_variables_unset(tmp_path):
    """A config like the reference's embodied ones: a defaults list from the file's directory, a search path
    through an unset variable, and `${oc.env:...}` values rlplace does not read."""
    config_dir = tmp_path / "examples" / "config"
    (config_dir / "model").mkdir(parents=True)
    (config_dir / "model" / "policy.yaml").write_text("precision: bf16\nsize: 7\n")
    job = write(
        config_dir,
        "job.yaml",
        """\
        defaults:
          - model/policy@actor.model
          - _self_
        hydra:
          searchpath:
            - file://${oc.env:RLPLACE_TEST_EMBODIED_PATH}/config/
        runner:
          task_type: embodied
        data:
          path: ${oc.env:RLPLACE_TEST_EMBODIED_PATH}/data
        rollout:
          model:
            precision: ${actor.model.precision}
          steps: ${subtract:10,1}
          flag: ${not:true}
        cluster:
          num_nodes: 1
          component_placement:
            actor,env,rollout: all
        """,
    )
    environment = {k: v for k, v in os.environ.items() if k != "RLPLACE_TEST_EMBODIED_PATH"}
    result = subprocess.run(
        [*RLPLACE, "plan", str(job), "-o", "json"], capture_output=True, text=True, env=environment, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["components"]["env"]["world_size"] == 8


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_help_lists_the_classes():
    result = invoke("plan", "--help")
    for kind in ("model-parallel-eval", "multi-agent", "multi-agent-eval", "--no-compose"):
        assert kind in result.stdout
