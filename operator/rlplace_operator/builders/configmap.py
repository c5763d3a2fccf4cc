"""The `<job>-placement` ConfigMap: the job's whole Plan, under the key the contract names (text, or gzip)."""

from __future__ import annotations

import base64

from placement_core.contract import plan_payload
from placement_core.plan import Plan
from rlplace_operator.names import child_labels, placement_configmap_name


def build_placement_configmap(job: str, plan: Plan) -> dict:
    """The ConfigMap with exactly one key: `plan.json` in data, or `plan.json.gz` in binaryData when large.

    Written by server-side apply, so a re-plan that crosses the size boundary drops the other key.
    """
    key, payload = plan_payload(plan)
    body: dict = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": placement_configmap_name(job), "labels": child_labels(job)},
    }
    if isinstance(payload, bytes):
        body["binaryData"] = {key: base64.b64encode(payload).decode()}
    else:
        body["data"] = {key: payload}
    return body
