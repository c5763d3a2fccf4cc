"""Recorded snapshots for the reconcile's tests: an RLJob's status, its RayCluster or RayJob, its pods and the
Warning events around it, as API JSON the way the operator reads them (small builders, so each case says only what
differs)."""

from __future__ import annotations

import datetime as dt

from rlplace_operator.reconcile.world import Job

NOW = dt.datetime(2026, 11, 24, 1, 0, 0, tzinfo=dt.UTC)
KEY = ("ns", "train")
ADMITTED = "2026-11-24T00:59:40Z"  # 20 s before NOW


def condition(status: dict, type_: str) -> dict | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def live_status(phase: str = "Provisioning", **fields: object) -> dict:
    return {
        "phase": phase,
        "observedGeneration": 1,
        "rayCluster": "train",
        "nodes": 1,
        "placement": {
            "mode": "collocated",
            "components": [{"name": "actor", "processes": 8, "gpus": 8, "nodes": ["kwok-0"]}],
        },
        "conditions": [
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": ADMITTED},
            {
                "type": "RayClusterReady",
                "status": "False",
                "reason": "RayClusterProvisioning",
                "message": "waiting for the Ray pods",
                "lastTransitionTime": ADMITTED,
            },
        ],
        **fields,
    }


def job(status: dict, entrypoint: str | None = None, run: dict | None = None) -> Job:
    spec: dict = {"nodeGroups": ["gpu"]}
    if entrypoint:
        spec["entrypoint"] = entrypoint
    if run:
        spec["run"] = run
    return Job("ns", "train", "uid-1", 1, spec, status, "100")


def raycluster(ready: bool = False) -> dict:
    owner = [{"uid": "uid-1", "kind": "RLJob", "name": "train"}]
    return {
        "kind": "RayCluster",
        "metadata": {"name": "train", "ownerReferences": owner},
        "status": {"state": "ready"} if ready else {},
    }


def pod(name: str, kind: str = "worker", node: str | None = "kwok-0", **status: object) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {"rlplace.io/job": "train", "ray.io/node-type": kind, "ray.io/cluster": "train"},
            "creationTimestamp": ADMITTED,
        },
        "spec": {"nodeName": node, "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.60.0"}]},
        "status": {"phase": "Pending", **status},
    }


def event(
    kind: str, name: str, reason: str, message: str, when: str = "2026-11-24T00:59:50Z", first: str | None = None
) -> dict:
    return {
        "metadata": {"name": f"{name}.1", "namespace": "ns"},
        "involvedObject": {"kind": kind, "name": name, "namespace": "ns"},
        "type": "Warning",
        "reason": reason,
        "message": message,
        "firstTimestamp": first or when,
        "lastTimestamp": when,
        "count": 3,
    }


def rayjob(deployment: str, job_status: str, started: str = "2026-11-24T00:59:45Z", **status: object) -> dict:
    owner = [{"uid": "uid-1", "kind": "RLJob", "name": "train"}]
    return {
        "kind": "RayJob",
        "metadata": {"name": "train", "ownerReferences": owner},
        "spec": {},
        "status": {
            "jobDeploymentStatus": deployment,
            "jobStatus": job_status,
            "rayClusterName": "train-abcde",
            "rayJobInfo": {"startTime": started},
            **status,
        },
    }


def running_driver_status(**fields: object) -> dict:
    return live_status(
        "Running",
        rayJob="train",
        rayCluster="train-abcde",
        driverStartTime="2026-11-24T00:59:45Z",
        attempts=1,
        binding=[{"name": "actor", "verified": 8, "processes": 8}],
        **fields,
    ) | {
        "conditions": [
            {"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": ADMITTED},
            {
                "type": "BindingVerified",
                "status": "True",
                "reason": "Verified",
                "message": "verified actor 8/8",
                "lastTransitionTime": "2026-11-24T00:59:50Z",
            },
        ]
    }
