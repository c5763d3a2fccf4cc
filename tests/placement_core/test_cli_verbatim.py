"""Output is the user's text: any printable name, label or value comes back verbatim in every output format.

Markup (`[/x]`, `[bold]`), emoji codes (`:x:`, `:100:`), wide and combining characters, quotes and
backslashes: the table shows them as written, JSON and YAML parse back to them, `--env` lines split back to
them in a shell, and `rlplace show` of the JSON prints the same tables as `rlplace plan`. (`${` is left out:
in a config it starts an OmegaConf interpolation, which is resolved by design.)
"""

from __future__ import annotations

import json
import shlex

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from placement_core.cli import app

printable = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Co", "Cn", "Zl", "Zp")), min_size=1, max_size=24
).filter(lambda text: text.isprintable() and "${" not in text)
# A name in a component key is split at commas and stripped; a label may not be a reserved one.
names = printable.map(lambda text: text.replace(",", "_").strip()).filter(bool)
labels = names.filter(lambda text: text not in ("cluster", "node"))


def config_text(name: str, label: str, value: str) -> str:
    config = {
        "cluster": {
            "num_nodes": 2,
            "accelerators_per_node": 4,
            "node_groups": [
                {
                    "label": label,
                    "node_ranks": "0-1",
                    "env_configs": [{"node_ranks": "0-1", "env_vars": [{"V": value}]}],
                }
            ],
            "component_placement": {name: {"node_group": label, "placement": "0-7"}},
        }
    }
    return yaml.safe_dump(config, allow_unicode=True, sort_keys=False)


def run(*args: str, stdin: str | None = None) -> str:
    result = CliRunner().invoke(app, list(args), input=stdin)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=names, label=labels, value=printable)
@example(name="[/x]", label="[bold]b", value="/opt/x:x:/lib:critic:100:")
@example(name="critic:100:", label=":x:", value="[red]not red[/red] 'quoted' \"double\" \\back")
@example(name="ｗｉｄｅ名前", label="e\u0301tiquette", value="😀 :smile: \u200b")
def test_any_printable_text_comes_back_verbatim(tmp_path, name, label, value):
    path = tmp_path / "job.yaml"
    path.write_text(config_text(name, label, value), encoding="utf-8")

    table = run("plan", str(path))
    assert f"\n{name}: 8 processes, flexible strategy, node group {label}\n" in table
    assert f" {label} " in table

    data = json.loads(run("plan", str(path), "-o", "json"))
    assert list(data["components"]) == [name]
    process = data["components"][name]["processes"][0]
    assert (process["node_group_label"], process["env"]["V"]) == (label, value)

    assert yaml.safe_load(run("plan", str(path), "-o", "yaml")) == data

    exports = run("plan", str(path), "--env", name, "0").splitlines()
    assert f"V={value}" in [shlex.split(line)[1] for line in exports]

    assert run("show", "-", stdin=json.dumps(data, ensure_ascii=False)) == table
