"""Generate the CRDs in `crds/` (and the chart's copy) from the pydantic models in `api/`.

    python -m rlplace_operator.api.crdgen            # write crds/ and charts/rlplace/crds/
    python -m rlplace_operator.api.crdgen --check    # exit 1 if they are stale

pydantic's JSON Schema is turned into a Kubernetes structural schema: `$ref`s inlined, optional fields'
`anyOf [X, null]` collapsed to X, titles and `additionalProperties: false` dropped (a structural schema
prunes unknown fields instead), descriptions kept so `kubectl explain` shows them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from rlplace_operator.api.base import GROUP, VERSION
from rlplace_operator.api.nodegroup import NodeGroupSpec, NodeGroupStatus
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.api.status import RLJobStatus

REPO = Path(__file__).resolve().parents[3]
OUTPUT_DIRS = (REPO / "crds", REPO / "charts" / "rlplace" / "crds")

#: Keys a property keeps from the wrapper around it (`$ref`, `anyOf [X, null]`): its text and its CEL rules.
_CARRIED = (
    "description",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-preserve-unknown-fields",
)


def _structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        resolved = _structural(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
        return {**resolved, **{k: v for k, v in schema.items() if k in _CARRIED}}
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {schema['anyOf']} in a structural schema")
        return {**_structural(options[0], defs), **{k: schema[k] for k in _CARRIED if k in schema}}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("title", "additionalProperties", "$defs", "default"):
            continue
        if key == "properties":
            out["properties"] = {}
            for name, prop in value.items():
                field_schema = _structural(prop, defs)
                if "x-kubernetes-validations" in field_schema:
                    # The rule's message says what the regex means; the regex would only repeat it unreadably.
                    field_schema.pop("pattern", None)
                out["properties"][name] = field_schema
        elif key == "items":
            out["items"] = _structural(value, defs)
        elif key == "description":
            out[key] = " ".join(value.split())  # docstrings' line breaks would show in `kubectl explain`
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            # JSON Schema 2020 gives the bound; OpenAPI 3.0 (what Kubernetes reads) wants a flag beside it.
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = value
    default = schema.get("default")
    if isinstance(default, str | int | float | bool):  # scalar defaults only; object defaults stay in the models
        out["default"] = default
    if (
        schema.get("type") == "object"
        and "additionalProperties" in schema
        and isinstance(schema["additionalProperties"], dict)
    ):
        out["additionalProperties"] = _structural(schema["additionalProperties"], defs)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}))


def _column(name: str, path: str, kind: str = "string", description: str = "", priority: int = 0) -> dict:
    column = {"name": name, "type": kind, "jsonPath": path, "description": description}
    if priority:
        column["priority"] = priority
    return column


def _crd(
    kind: str,
    plural: str,
    short: str,
    scope: str,
    description: str,
    spec: type[BaseModel],
    status: type[BaseModel],
    columns: list[dict],
) -> dict[str, Any]:
    status_schema = _schema(status)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "rlplace"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": ["rlplace"],
            },
            "scope": scope,
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string", "description": "API version: rlplace.io/v1alpha1."},
                                "kind": {"type": "string", "description": f"Kind: {kind}."},
                                "metadata": {"type": "object"},
                                "spec": _schema(spec),
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def build_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD object."""
    age = _column("Age", ".metadata.creationTimestamp", "date")
    nodegroup = _crd(
        "NodeGroup",
        "nodegroups",
        "ng",
        "Cluster",
        "NodeGroup is a named set of Kubernetes nodes with one kind of hardware (GPUs, a robot type, or plain "
        "nodes), the Kubernetes form of cluster.node_groups.",
        NodeGroupSpec,
        NodeGroupStatus,
        [
            _column("Hardware", ".status.hardwareType", description="What the group's ranks count"),
            _column("Nodes", ".status.totalNodes", "integer", "Matched nodes"),
            _column("Ready", ".status.readyNodes", "integer", "Ready nodes"),
            _column("Units", ".status.totalUnits", "integer", "Hardware units on ready nodes"),
            age,
        ],
    )
    rljob = _crd(
        "RLJob",
        "rljobs",
        "rlj",
        "Namespaced",
        "RLJob is one reinforcement-learning training job: rlplace places its components on the GPUs of its "
        "NodeGroups and runs them in a KubeRay RayCluster whose processes see exactly the planned GPUs; with an "
        "entrypoint, a KubeRay RayJob runs its driver and the job ends Succeeded or Failed.",
        RLJobSpec,
        RLJobStatus,
        [
            _column(
                "Phase",
                ".status.phase",
                description="Pending, Queued, Provisioning, Running, Suspended, Succeeded, Failed",
            ),
            _column("Queue", ".status.queuePosition", "integer", "Place in the queue while Queued"),
            _column("Waiting For", ".status.waitingFor", description="What a Queued job waits for"),
            _column("Mode", ".status.placement.mode", description="Placement mode"),
            _column("GPUs", ".status.gpus", "integer", "GPUs the job uses"),
            _column("Nodes", ".status.nodes", "integer", "Nodes the job uses"),
            _column("RayCluster", ".status.rayCluster", description="The job's RayCluster"),
            _column(
                "Verified",
                '.status.conditions[?(@.type=="BindingVerified")].status',
                description="Every launched process checked its own placement from inside (True/False)",
            ),
            _column("Restarts", ".status.restartCount", "integer", "Driver restarts of the current spec"),
            _column("Iteration", ".status.progress.iteration", "integer", "Latest iteration the driver reported"),
            _column("Step", ".status.progress.iterationSeconds", "number", "Median seconds per iteration"),
            _column("Bottleneck", ".status.progress.bottleneck", description="Component busy longest per iteration"),
            age,
            _column("Attempts", ".status.attempts", "integer", "Driver submissions of the current spec", priority=1),
            _column("RayJob", ".status.rayJob", description="The RayJob running the entrypoint", priority=1),
            _column("Driver log", ".status.driverLog", description="Command that prints the driver's log", priority=1),
            _column("Predicted", ".status.predictedIterationTime", "number", "Predicted s/iteration", priority=1),
            _column("Message", ".status.message", description="Why Pending, Queued or Failed", priority=1),
        ],
    )
    return {"rlplace.io_nodegroups.yaml": nodegroup, "rlplace.io_rljobs.yaml": rljob}


def render(crd: dict[str, Any]) -> str:
    header = "# Generated by `make crds` (python -m rlplace_operator.api.crdgen) from the models in operator/rlplace_operator/api/.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=120)


def stale_files(output_dirs: tuple[Path, ...] = OUTPUT_DIRS) -> list[Path]:
    """Generated files that are missing or differ from what the models give."""
    crds = {name: render(crd) for name, crd in build_crds().items()}
    return [
        directory / name
        for directory in output_dirs
        for name, text in crds.items()
        if not (directory / name).exists() or (directory / name).read_text() != text
    ]


def write(output_dirs: tuple[Path, ...] = OUTPUT_DIRS) -> None:
    for name, crd in build_crds().items():
        for directory in output_dirs:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / name).write_text(render(crd))


def main(argv: list[str] | None = None, output_dirs: tuple[Path, ...] = OUTPUT_DIRS) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated file differs")
    args = parser.parse_args(argv)
    if not args.check:
        write(output_dirs)
        return 0
    stale = stale_files(output_dirs)
    if stale:
        print(f"stale CRDs (run `make crds`): {', '.join(map(str, stale))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
