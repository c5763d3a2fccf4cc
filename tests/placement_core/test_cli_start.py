"""Starting `rlplace`: light imports, --version, flags that read as flags, usage errors as one line, and
`rlplace-operator` without the operator extra."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from placement_core.cli import app, operator_main

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "scipy", "omegaconf", "ruamel")


def modules_after(*args: str) -> set[str]:
    """The top-level modules loaded by one `rlplace ARGS` run, in a fresh interpreter."""
    code = (
        "import sys\nfrom placement_core.cli import main\n"
        f"try:\n    main({list(args)!r})\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'operator'}"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, check=True)
    return set(done.stderr.split())


@pytest.mark.parametrize("args", [["--help"], ["plan", "examples/collocated-single-node.yaml"], ["plan", "--help"]])
def test_help_and_plan_do_not_import_numpy_or_scipy(args):
    loaded = modules_after(*args)
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_autotune_does_import_them():
    """The check above can fail: autotune needs numpy."""
    assert "numpy" in modules_after("autotune", "examples/autotune-reasoning.yaml")


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("rlplace ") and len(result.stdout.splitlines()) == 1


def test_boolean_flags_read_as_flags_in_help():
    help_text = CliRunner().invoke(app, ["plan", "--help"]).stdout
    line = next(line for line in help_text.splitlines() if "--no-isolate" in line)
    assert "bool" not in line.lower() and "<" not in line
    assert "docs/" in help_text


def test_operator_entry_names_the_extra(monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "kopf" else real_find_spec(name))
    with pytest.raises(SystemExit) as exit_info:
        operator_main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        err
        == "error: rlplace-operator needs the operator extra (kopf not installed): pip install 'rlplace[operator]'\n"
    )
