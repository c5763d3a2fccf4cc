"""`rlplace autotune` and `rlplace cost`: output, formats, exit codes and one-line errors."""

import json
import re
from pathlib import Path

import pytest
import yaml
from test_autoplace_configs import embodied_config, example_one, example_three, example_two
from typer.testing import CliRunner

from placement_core.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def write(tmp_path):
    def write(config, name="job.yaml"):
        path = tmp_path / name
        path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
        return str(path)

    return write


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_autotune_prints_the_block(write):
    result = invoke("autotune", write(example_three()))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (
        "Best placement for this task is:\n\n"
        "cluster:\n"
        "  num_nodes: 16\n"
        "  accelerators_per_node: 8\n"
        "  component_placement:\n"
        "    rollout,reward: 0-79\n"
        "    inference: 80-95\n"
        "    actor: 96-127\n"
        "# predicted iteration time: 289.10 s; collocated: 335.00 s; 1.16x faster\n"
    )
    assert result.stderr == ""


def test_autotune_block_pastes_back(write, tmp_path):
    config = example_two()
    out = invoke("autotune", write(config)).stdout
    block = yaml.safe_load(out.split("\n\n", 1)[1])
    config["cluster"]["component_placement"] = block["cluster"]["component_placement"]
    cost = invoke("cost", write(config, "pasted.yaml"))
    assert cost.exit_code == 0, cost.stderr
    predicted = re.search(r"predicted iteration time: ([\d.]+) s;", out).group(1)
    assert cost.stdout.startswith(f"predicted iteration time: {predicted} s (disaggregated)")


def test_autotune_json(write):
    result = invoke("autotune", write(example_two()), "--format", "json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["mode"] == "disaggregated"
    assert data["component_placement"] == {"rollout,reward": "0-1", "inference": "2-3", "actor": "4-7"}
    assert data["components"]["rollout"]["gpus"] == [0, 1]
    assert data["total_cost"] == pytest.approx(69.256, abs=5e-4)
    assert data["collocated_cost"] == pytest.approx(108)


def test_autotune_explain_and_cost_model(write):
    path = write(example_two())
    result = invoke("autotune", path, "--explain")
    assert result.exit_code == 0
    assert "best schedule per mode (scaling cost model)" in result.stdout
    assert "collocated" in result.stdout and "disaggregated" in result.stdout and "chosen" in result.stdout
    linear = invoke("autotune", path, "--cost-model", "linear", "--format", "json", "--explain")
    assert linear.exit_code == 0
    assert json.loads(linear.stdout)["mode"] == "collocated"
    assert "linear cost model" in linear.stderr
    bad = invoke("autotune", path, "--cost-model", "cubic")
    assert bad.exit_code == 2


def test_autotune_embodied(write):
    result = invoke("autotune", write(embodied_config()))
    assert result.exit_code == 0
    assert "    env: 0-5\n    rollout: 6-7\n    actor: all\n" in result.stdout


def test_missing_profile_is_one_line_exit_2(write):
    config = example_one()
    del config["profile_data"]["rollout_cost"]
    result = invoke("autotune", write(config))
    assert result.exit_code == 2
    assert result.stderr == "error: profile data is not provided: missing rollout_cost (add it under profile_data)\n"
    assert result.stdout == ""
    assert invoke("cost", write(config)).stderr == result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cluster: [", "is not valid YAML"),
        ("- 1\n", "must hold a YAML mapping"),
        ({"profile_data": {}}, "no 'cluster' section"),
    ],
)
def test_bad_config_files(write, text, message):
    for command in ("autotune", "cost"):
        result = invoke(command, write(text))
        assert result.exit_code == 2
        assert result.stderr.startswith("error: ") and message in result.stderr
        assert result.stderr.count("\n") == 1
    missing = invoke("autotune", "/nonexistent/job.yaml")
    assert missing.exit_code == 2 and "does not exist" in missing.stderr


def test_no_valid_placement_exit_2(write):
    result = invoke("autotune", write(embodied_config(env_num=7)))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no valid placement for env -> rollout -> actor on 8 GPUs")


def test_cost_of_the_configs_placement(write):
    config = example_two()
    config["cluster"]["component_placement"] = {"actor,rollout,reward": "all"}
    result = invoke("cost", write(config))
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == "predicted iteration time: 108.00 s (collocated)"
    data = json.loads(invoke("cost", write(config), "--format", "json").stdout)
    assert data["mode"] == "collocated"
    assert data["total_cost"] == pytest.approx(108)
    assert set(data["components"]) == {"rollout", "inference", "actor"}


def test_cost_needs_a_placement(write):
    result = invoke("cost", write(example_two()))
    assert result.exit_code == 2
    assert "component_placement" in result.stderr


@pytest.mark.parametrize("name", ["autotune-reasoning.yaml", "autotune-embodied.yaml"])
def test_examples(name):
    result = invoke("autotune", EXAMPLES / name)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("Best placement for this task is:\n\ncluster:\n")
    assert invoke("cost", EXAMPLES / name).exit_code == 0


def test_progress_bar_only_on_a_terminal_after_a_while(monkeypatch):
    import io

    from rich.console import Console

    from placement_core.cli import autotune as command

    with command._progress_bar() as progress:  # CliRunner's stderr is no terminal
        assert progress is None
    sink = io.StringIO()
    monkeypatch.setattr(command, "console", lambda stderr: Console(file=sink, force_terminal=True, width=80))
    monkeypatch.setattr(command, "PROGRESS_AFTER_S", 0.0)
    with command._progress_bar() as progress:
        for done in range(1, 11):
            progress(done, 10)
    assert "searching placements" in sink.getvalue()
    monkeypatch.setattr(command, "PROGRESS_AFTER_S", 60.0)
    sink.truncate(0)
    with command._progress_bar() as progress:
        progress(1, 10)
    assert sink.getvalue() == ""


# -- item 1: the answer goes back into the config without changing the cluster ----------------------------

FOUR_GPU_NODES = (
    (EXAMPLES / "autotune-reasoning.yaml")
    .read_text()
    .replace(
        "  num_nodes: 16\n  accelerators_per_node: 8\n",
        "  num_nodes: 32\n  accelerators_per_node: 4   # four-GPU nodes: the block must keep this\n"
        "  node_groups:\n    - {label: big, node_ranks: 0-31}\n",
    )
)


def _plan(path):
    result = invoke("plan", path, "-o", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_printed_block_pastes_back_over_the_cluster_section(write):
    """The printed block replaces the config's whole cluster: section; the cluster stays 32 x 4 GPUs."""
    path = write(FOUR_GPU_NODES)
    out = invoke("autotune", path).stdout
    block = yaml.safe_load(out.split("\n\n", 1)[1])
    assert block["cluster"]["accelerators_per_node"] == 4
    assert block["cluster"]["node_groups"] == [{"label": "big", "node_ranks": "0-31"}]
    config = yaml.safe_load(FOUR_GPU_NODES)
    config["cluster"] = block["cluster"]
    pasted = write(config, "pasted.yaml")
    planned = _plan(pasted)
    for component in planned["components"].values():
        for process in component["processes"]:
            assert all(0 <= gpu < 4 for gpu in process["local_hardware_ranks"])
    assert {p["node_name"] for c in planned["components"].values() for p in c["processes"]} <= {
        f"node-{n}" for n in range(32)
    }
    predicted = re.search(r"predicted iteration time: ([\d.]+) s;", out).group(1)
    cost = invoke("cost", pasted)
    assert cost.stdout.startswith(f"predicted iteration time: {predicted} s"), cost.stdout


def test_write_updates_the_placement_and_keeps_comments_and_layout(write):
    path = write(FOUR_GPU_NODES)
    printed = invoke("autotune", path).stdout
    result = invoke("autotune", path, "--write")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == printed
    assert "wrote cluster.component_placement" in result.stderr
    after = Path(path).read_text()
    block = yaml.safe_load(printed.split("\n\n", 1)[1])["cluster"]["component_placement"]
    assert yaml.safe_load(after)["cluster"] == {
        **yaml.safe_load(FOUR_GPU_NODES)["cluster"],
        "component_placement": block,
    }

    # Every line outside component_placement is kept byte for byte, comments included.
    def outside(text):
        lines = text.splitlines()
        start = lines.index("  component_placement:")
        end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
        return lines[:start] + lines[end:]

    assert outside(after) == outside(FOUR_GPU_NODES)
    assert "# four-GPU nodes: the block must keep this" in after
    predicted = re.search(r"predicted iteration time: ([\d.]+) s;", printed).group(1)
    assert invoke("cost", path).stdout.startswith(f"predicted iteration time: {predicted} s")
