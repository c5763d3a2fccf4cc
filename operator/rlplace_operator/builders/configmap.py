"""The `<job>-placement` ConfigMap: the whole plan (placement.md §3 fields, node names, environment)."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Mapping

from rlplace_operator.names import PLAN_GZIP_KEY, PLAN_KEY, child_labels, placement_configmap_name

#: Plans larger than this go into binaryData gzip-compressed, keeping the ConfigMap under etcd's 1 MiB limit
#: for thousands of processes (the JSON is very repetitive and compresses about 20x).
MAX_TEXT_PLAN_BYTES = 512 * 1024


def encode_plan(plan: Mapping) -> tuple[dict[str, str], dict[str, str]]:
    """(data, binaryData) holding the plan as readable JSON, or gzipped JSON when it is large."""
    text = json.dumps(plan, separators=(",", ":"))
    if len(text) <= MAX_TEXT_PLAN_BYTES:
        return {PLAN_KEY: text}, {}
    packed = gzip.compress(text.encode(), mtime=0)
    return {}, {PLAN_GZIP_KEY: base64.b64encode(packed).decode()}


def decode_plan(data: Mapping[str, str] | None, binary_data: Mapping[str, str] | None) -> dict:
    """The plan back from a ConfigMap's data/binaryData (what the launcher and the tests read)."""
    if data and PLAN_KEY in data:
        return json.loads(data[PLAN_KEY])
    if binary_data and PLAN_GZIP_KEY in binary_data:
        return json.loads(gzip.decompress(base64.b64decode(binary_data[PLAN_GZIP_KEY])))
    raise KeyError(f"no {PLAN_KEY} or {PLAN_GZIP_KEY} in the ConfigMap")


def build_placement_configmap(job: str, plan: Mapping) -> dict:
    data, binary_data = encode_plan(plan)
    body: dict = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": placement_configmap_name(job), "labels": child_labels(job)},
        "data": data,
    }
    if binary_data:
        body["binaryData"] = binary_data
    return body
