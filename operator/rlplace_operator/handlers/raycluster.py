"""What a RayCluster's readiness means for its RLJob (RayClusterReady, phase Running); followed in reconcile.py."""

from __future__ import annotations

from rlplace_operator.api.conditions import (
    RAYCLUSTER_IS_READY,
    RAYCLUSTER_PROVISIONING,
    RAYCLUSTER_READY,
    is_true,
    set_condition,
)
from rlplace_operator.api.status import JobPhase

#: KubeRay's condition type on a RayCluster whose pods all came up.
KUBERAY_PROVISIONED = "RayClusterProvisioned"


def raycluster_ready(body: dict) -> bool:
    """KubeRay marks a cluster ready with state `ready` or the RayClusterProvisioned condition."""
    status = body.get("status") or {}
    return status.get("state") == "ready" or is_true(status.get("conditions"), KUBERAY_PROVISIONED)


def mirrored_status(job_status: dict, ready: bool, generation: int | None) -> dict:
    """The RLJob status fields that follow its RayCluster."""
    return {
        "phase": JobPhase.RUNNING if ready else JobPhase.PROVISIONING,
        "conditions": set_condition(
            job_status.get("conditions"),
            RAYCLUSTER_READY,
            ready,
            RAYCLUSTER_IS_READY if ready else RAYCLUSTER_PROVISIONING,
            "all Ray pods are ready" if ready else "waiting for the Ray pods",
            generation,
        ),
    }
