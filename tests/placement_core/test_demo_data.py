"""The reference driver's `--show-data PATH --show-env NAME`: every process (driver and workers) prints what it
reads from a volume, a variable and the size of /dev/shm (what tests/e2e/test_data.py reads in a real job)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from placement_core.components import component_placement
from placement_core.launcher.demo import data_seen
from placement_core.plan import build_plan

REPO = Path(__file__).resolve().parents[2]


def test_data_seen_reads_the_file_the_variables_and_shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "model.txt"
    model.write_text("weights v3\nmore\n")
    monkeypatch.setenv("MODEL_TOKEN", "s3cr3t")
    monkeypatch.setenv("RLPLACE_KUBE_NODE", "real-a800-0")
    line = data_seen(None, str(model), ["MODEL_TOKEN", "NOT_SET_ANYWHERE"])
    assert line.startswith("node=real-a800-0 ")
    assert f"{model}='weights v3'" in line and "MODEL_TOKEN='s3cr3t'" in line and "NOT_SET_ANYWHERE=<unset>" in line
    assert "/dev/shm=" in line and "MiB" in line
    assert f"{tmp_path / 'missing'}=<unreadable: No such file or directory>" in data_seen(
        None, str(tmp_path / "missing")
    )


@pytest.mark.ray
def test_every_process_prints_what_it_sees(tmp_path: Path) -> None:
    config = {"cluster": {"num_nodes": 1, "accelerators_per_node": 2, "component_placement": {"actor": "0-1"}}}
    (tmp_path / "plan.json").write_text(build_plan(component_placement(config)).to_json())
    (tmp_path / "model.txt").write_text("tiny-model\n")
    driver = [sys.executable, "-m", "placement_core.launcher.demo", "--plan", str(tmp_path / "plan.json")]
    result = subprocess.run(
        [*driver, "--simulate", "--show-data", str(tmp_path / "model.txt"), "--show-env", "MODEL_TOKEN"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "MODEL_TOKEN": "from-secret"},
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("data ")]
    assert [line.split(":")[0] for line in lines] == ["data driver", "data actor[0]", "data actor[1]"], lines
    for line in lines:
        assert "model.txt='tiny-model'" in line and "MODEL_TOKEN='from-secret'" in line and "/dev/shm=" in line
