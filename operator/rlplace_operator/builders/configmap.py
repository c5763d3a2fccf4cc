"""The `<job>-placement` ConfigMap: the job's whole Plan, under the key the contract names (text, or gzip), each
worker node's rank (the worker pods read theirs before Ray starts), and for a framework job the probe its pods
import (frameworks: Framework.configmap_files)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence

from placement_core.contract import NODE_RANKS_KEY, POD_GPUS_KEY, node_ranks_text, plan_payload, pod_gpus_text
from placement_core.plan import Plan
from rlplace_operator.api.names import child_labels, placement_configmap_name


def build_placement_configmap(
    job: str, plan: Plan, files: Mapping[str, str] | None = None, pod_gpus: Mapping[int, Sequence[int]] | None = None
) -> dict:
    """The ConfigMap with one plan key: `plan.json` in data, or `plan.json.gz` in binaryData when large; the
    node ranks; the GPUs of the pods given exactly theirs (`pod_gpus`, DRA: node rank -> the plan's GPUs); and
    `files` (the probe of a framework job) in data.

    Written by server-side apply, so a re-plan that crosses the size boundary drops the other key.
    """
    key, payload = plan_payload(plan)
    files = {NODE_RANKS_KEY: node_ranks_text({p.node_name: p.node_rank for _, p in plan.processes()}), **(files or {})}
    if pod_gpus:
        files[POD_GPUS_KEY] = pod_gpus_text(pod_gpus)
    body: dict = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": placement_configmap_name(job), "labels": child_labels(job)},
    }
    if isinstance(payload, bytes):
        body["binaryData"] = {key: base64.b64encode(payload).decode()}
        body["data"] = files
    else:
        body["data"] = {key: payload, **files}
    return body
