"""docs/reference/ is generated from the models; a stale copy fails here, and the check really finds one."""

from __future__ import annotations

import sys

import pytest

from rlplace_operator.api import docgen


def test_generated_reference_is_current() -> None:
    for name, text in docgen.build_docs().items():
        assert (docgen.OUTPUT_DIR / name).read_text() == text, f"docs/reference/{name} is stale: run `make docs`"


def test_check_mode_finds_a_stale_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docgen, "OUTPUT_DIR", tmp_path)
    monkeypatch.setattr(docgen, "REPO", tmp_path.parent)
    monkeypatch.setattr(sys, "argv", ["docgen"])
    assert docgen.main() == 0
    monkeypatch.setattr(sys, "argv", ["docgen", "--check"])
    assert docgen.main() == 0
    rljob = tmp_path / "rljob.md"
    rljob.write_text(rljob.read_text().replace("## status", "## status (edited by hand)"))
    assert docgen.main() == 1
    rljob.unlink()
    assert docgen.main() == 1


def test_every_field_is_documented() -> None:
    """Each field of both kinds appears with its type and its description, as `kubectl explain` shows it."""
    rljob = docgen.build_docs()["rljob.md"]
    assert "### `spec.componentPlacement[].placement` <string>" in rljob
    assert "### `spec.nodeGroups` <[]string>" in rljob
    assert "- validated: componentPlacement needs at least one entry unless autoPlacement.enabled is true" in rljob
    nodegroup = docgen.build_docs()["nodegroup.md"]
    assert "### `spec` <Object>" in nodegroup and "### `status` <Object>" in nodegroup
    for text in (rljob, nodegroup):
        blocks = text.split("\n### ")[1:]
        assert blocks
        for block in blocks:
            lines = block.splitlines()
            assert len(lines) > 2 and lines[2].strip(), f"{lines[0]} has no description"
