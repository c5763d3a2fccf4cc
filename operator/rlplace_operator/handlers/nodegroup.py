"""NodeGroup: resolve the selector to nodes in rank order and keep the status in step with the nodes."""

from __future__ import annotations

from typing import Any

import kopf

from rlplace_operator.conditions import set_condition
from rlplace_operator.models import GROUP, VERSION, NodeGroupSpec, dump
from rlplace_operator.names import NODEGROUP_PLURAL
from rlplace_operator.selection import NodeInfo, nodegroup_status

#: How often a NodeGroup's status is recomputed from the node index (nodes joining, leaving, NotReady).
RESYNC_SECONDS = 2.0


@kopf.index("", "v1", "nodes")
def node_index(name: str, body: kopf.Body, **_: Any) -> dict[str, NodeInfo]:
    """Every node, by name: labels, allocatable and readiness (no API call per reconcile)."""
    return {name: NodeInfo.from_body(body)}


@kopf.index(GROUP, VERSION, NODEGROUP_PLURAL)
def nodegroup_index(name: str, spec: kopf.Spec, status: kopf.Status, **_: Any) -> dict[str, tuple[dict, dict]]:
    """Every NodeGroup, by name: its spec and the status the operator wrote."""
    return {name: (dict(spec), dict(status))}


def indexed(index: kopf.Index, key: object) -> Any | None:
    """The one value a kopf index holds for `key` (our indexes map each key to one object), or None."""
    store = index.get(key)
    return next(iter(store), None) if store is not None else None


@kopf.on.create(GROUP, VERSION, NODEGROUP_PLURAL)
@kopf.on.resume(GROUP, VERSION, NODEGROUP_PLURAL)
@kopf.on.update(GROUP, VERSION, NODEGROUP_PLURAL)
@kopf.timer(GROUP, VERSION, NODEGROUP_PLURAL, interval=RESYNC_SECONDS)
def nodegroup_observe(
    spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, patch: kopf.Patch, node_index: kopf.Index, **_: Any
) -> None:
    """Write the matched nodes, unit counts and readiness into status when they changed."""
    group = NodeGroupSpec.model_validate(dict(spec))
    nodes = [indexed(node_index, name) for name in node_index]
    observed = nodegroup_status(group, [n for n in nodes if n is not None], meta.get("generation"))
    ready = observed.ready_nodes > 0
    conditions = set_condition(
        status.get("conditions"),
        "Ready",
        ready,
        "NodesReady" if ready else "NoReadyNodes",
        f"{observed.ready_nodes} of {observed.total_nodes} nodes ready, {observed.total_units} units",
        meta.get("generation"),
    )
    new = {**dump(observed), "conditions": conditions}
    current = {k: v for k, v in dict(status).items() if k in new}
    if current != new:
        patch.status.update(new)
