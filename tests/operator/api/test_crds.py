"""The CRDs in crds/ and the chart are generated from the models; a stale copy fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlplace_operator.api import crdgen
from rlplace_operator.api.crdgen import OUTPUT_DIRS, build_crds, render


def test_generated_crds_are_current() -> None:
    for name, crd in build_crds().items():
        for directory in OUTPUT_DIRS:
            assert (directory / name).read_text() == render(crd), f"{directory / name} is stale: run `make crds`"


def test_check_mode_reports_stale_and_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fresh, stale = tmp_path / "fresh", tmp_path / "stale"
    assert crdgen.main([], output_dirs=(fresh, stale)) == 0
    assert crdgen.main(["--check"], output_dirs=(fresh, stale)) == 0
    edited = stale / "rlplace.io_rljobs.yaml"
    edited.write_text(edited.read_text().replace("maxLength: 1024", "maxLength: 2048", 1))
    (stale / "rlplace.io_nodegroups.yaml").unlink()
    capsys.readouterr()
    assert crdgen.main(["--check"], output_dirs=(fresh, stale)) == 1
    reported = capsys.readouterr().err
    assert str(edited) in reported and str(stale / "rlplace.io_nodegroups.yaml") in reported
    assert str(fresh) not in reported


def test_cel_rules_sit_beside_their_fields() -> None:
    """Each rule comes from the field or model it guards (json_schema_extra) and replaces the field's regex."""
    spec = build_crds()["rlplace.io_rljobs.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    entry = spec["spec"]["properties"]["componentPlacement"]["items"]["properties"]
    for field in ("components", "placement", "nodeGroup"):
        assert "pattern" not in entry[field]
        assert entry[field]["x-kubernetes-validations"][0]["message"].startswith(field)
    assert "autoPlacement.enabled is true" in spec["spec"]["x-kubernetes-validations"][0]["message"]
    group = build_crds()["rlplace.io_nodegroups.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    group_spec = group["properties"]["spec"]
    assert "cannot both be set" in group_spec["x-kubernetes-validations"][0]["message"]
    requirement = group_spec["properties"]["nodeSelector"]["properties"]["matchExpressions"]["items"]
    assert "values must be non-empty" in requirement["x-kubernetes-validations"][0]["message"]
    assert spec["spec"]["properties"]["entrypoint"]["maxLength"] == 65536


def test_schema_is_structural_and_documented() -> None:
    rljob = build_crds()["rlplace.io_rljobs.yaml"]
    version = rljob["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]

    def walk(schema: dict, path: str, field: bool = True) -> None:
        assert "$ref" not in schema and "anyOf" not in schema, path
        assert "type" in schema, f"{path} has no type"
        if field:
            assert schema.get("description"), f"{path} has no description"
        for name, prop in schema.get("properties", {}).items():
            walk(prop, f"{path}.{name}")
        if "items" in schema:
            walk(schema["items"], f"{path}[]", field=False)

    walk(spec, "spec")
    entry = spec["properties"]["componentPlacement"]
    assert entry["x-kubernetes-list-type"] == "map" and entry["x-kubernetes-list-map-keys"] == ["components"]
    assert "pattern" not in entry["items"]["properties"]["placement"]
    assert version["subresources"] == {"status": {}}
    assert rljob["spec"]["names"]["shortNames"] == ["rlj"]
    assert [c["name"] for c in version["additionalPrinterColumns"]][:13] == [
        "Phase",
        "Queue",
        "Waiting For",
        "Mode",
        "GPUs",
        "Nodes",
        "RayCluster",
        "Verified",
        "Restarts",
        "Iteration",
        "Step",
        "Bottleneck",
        "Age",
    ]
