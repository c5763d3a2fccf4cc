"""Generate the CRDs in `crds/` (and the chart's copy) from the pydantic models in `models.py`.

    python -m rlplace_operator.crdgen            # write crds/ and charts/rlplace/crds/
    python -m rlplace_operator.crdgen --check    # exit 1 if they are stale

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

from rlplace_operator import models

REPO = Path(__file__).resolve().parents[2]
OUTPUT_DIRS = (REPO / "crds", REPO / "charts" / "rlplace" / "crds")

# CEL rules with messages a person understands; a field that has one drops its regex `pattern`, so
# `kubectl apply` reports the readable message instead of the raw expression.
_RULES: dict[tuple[str, str], list[dict[str, str]]] = {
    ("PlacementEntry", "placement"): [
        {
            "rule": f"self.matches(r'{models.PLACEMENT_PATTERN}')",
            "message": "placement must be parts R[:P] separated by commas, where R is all, N or N-M and P is N or "
            "N-M (for example 0-7, all, 0-3:0-7)",
        }
    ],
    ("PlacementEntry", "components"): [
        {
            "rule": f"self.matches(r'{models.COMPONENTS_PATTERN}')",
            "message": "components must be component names separated by commas, for example actor,rollout",
        }
    ],
    ("PlacementEntry", "nodeGroup"): [
        {
            "rule": f"self.matches(r'{models.LABELS_PATTERN}')",
            "message": "nodeGroup must be NodeGroup names separated by commas, for example a800,4090",
        }
    ],
}
_OBJECT_RULES: dict[str, list[dict[str, str]]] = {
    "NodeGroupSpec": [
        {
            "rule": "!(has(self.hardware) && has(self.ignoreHardware) && self.ignoreHardware)",
            "message": "hardware and ignoreHardware cannot both be set",
        }
    ],
    "RLJobSpec": [
        {
            "rule": "(has(self.autoPlacement) && self.autoPlacement) || "
            "(has(self.componentPlacement) && size(self.componentPlacement) > 0)",
            "message": "componentPlacement needs at least one entry unless autoPlacement is true",
        },
        {
            # KubeRay suspends only a RayJob that deletes its cluster; the default (true) applies when unset.
            "rule": "!(has(self.suspend) && self.suspend) || !has(self.entrypoint) || !has(self.run) || "
            "!has(self.run.shutdownAfterJobFinishes) || self.run.shutdownAfterJobFinishes",
            "message": "a job with an entrypoint can be suspended only with run.shutdownAfterJobFinishes true",
        },
    ],
    "LabelSelectorRequirement": [
        {
            "rule": "(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)",
            "message": "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
        }
    ],
}
_LIST_MAPS = {("RLJobSpec", "componentPlacement"): "components"}


def _structural(schema: dict[str, Any], defs: dict[str, Any], owner: str | None = None) -> dict[str, Any]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        resolved = _structural(defs[name], defs, name)
        return {**resolved, **{k: v for k, v in schema.items() if k in ("description",)}}
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {schema['anyOf']} in a structural schema")
        merged = {**_structural(options[0], defs, owner), **{k: schema[k] for k in ("description",) if k in schema}}
        return merged
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("title", "additionalProperties", "$defs", "default"):
            continue
        if key == "properties":
            out["properties"] = {}
            for name, prop in value.items():
                field_schema = _structural(prop, defs)
                rules = _RULES.get((owner or "", name))
                if rules:
                    field_schema.pop("pattern", None)
                    field_schema["x-kubernetes-validations"] = rules
                list_key = _LIST_MAPS.get((owner or "", name))
                if list_key:
                    field_schema["x-kubernetes-list-type"] = "map"
                    field_schema["x-kubernetes-list-map-keys"] = [list_key]
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
    if owner in _OBJECT_RULES:
        out["x-kubernetes-validations"] = _OBJECT_RULES[owner]
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}), model.__name__)


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
        "metadata": {"name": f"{plural}.{models.GROUP}", "labels": {"app.kubernetes.io/part-of": "rlplace"}},
        "spec": {
            "group": models.GROUP,
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
                    "name": models.VERSION,
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
        models.NodeGroupSpec,
        models.NodeGroupStatus,
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
        models.RLJobSpec,
        models.RLJobStatus,
        [
            _column(
                "Phase",
                ".status.phase",
                description="Pending, Placing, Provisioning, Running, Suspended, Succeeded, Failed",
            ),
            _column("Mode", ".status.placement.mode", description="Placement mode"),
            _column("GPUs", ".status.gpus", "integer", "GPUs the job uses"),
            _column("Nodes", ".status.nodes", "integer", "Nodes the job uses"),
            _column("RayCluster", ".status.rayCluster", description="The job's RayCluster"),
            _column(
                "Verified",
                '.status.conditions[?(@.type=="BindingVerified")].status',
                description="Every launched process checked its own placement from inside (True/False)",
            ),
            age,
            _column("RayJob", ".status.rayJob", description="The RayJob running the entrypoint", priority=1),
            _column("Driver log", ".status.driverLog", description="Command that prints the driver's log", priority=1),
            _column("Predicted", ".status.predictedIterationTime", "number", "Predicted s/iteration", priority=1),
            _column("Message", ".status.message", description="Why Pending or Failed", priority=1),
        ],
    )
    return {"rlplace.io_nodegroups.yaml": nodegroup, "rlplace.io_rljobs.yaml": rljob}


def render(crd: dict[str, Any]) -> str:
    header = (
        "# Generated by `make crds` (python -m rlplace_operator.crdgen) from operator/rlplace_operator/models.py.\n"
    )
    return header + yaml.safe_dump(crd, sort_keys=False, width=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated file differs")
    args = parser.parse_args()
    stale = []
    for name, crd in build_crds().items():
        text = render(crd)
        for directory in OUTPUT_DIRS:
            path = directory / name
            if args.check:
                if not path.exists() or path.read_text() != text:
                    stale.append(str(path.relative_to(REPO)))
            else:
                directory.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    if stale:
        print(f"stale CRDs (run `make crds`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
