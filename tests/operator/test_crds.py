"""The CRDs in crds/ and the chart are generated from the models; a stale copy fails here."""

from __future__ import annotations

import subprocess
import sys

from rlplace_operator.crdgen import OUTPUT_DIRS, build_crds, render


def test_generated_crds_are_current() -> None:
    for name, crd in build_crds().items():
        for directory in OUTPUT_DIRS:
            assert (directory / name).read_text() == render(crd), f"{directory / name} is stale: run `make crds`"


def test_check_mode_reports_stale_files() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rlplace_operator.crdgen", "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


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
    assert [c["name"] for c in version["additionalPrinterColumns"]][:7] == [
        "Phase",
        "Mode",
        "GPUs",
        "Nodes",
        "RayCluster",
        "Verified",
        "Age",
    ]
