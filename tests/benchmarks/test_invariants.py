"""The invariant checker (benchmarks/invariants.py) names each kind of violation planted in a recorded cluster
state, and nothing in a healthy one."""

from __future__ import annotations

import copy
import datetime as dt

from invariants import Checker, ClusterState

NOW = dt.datetime(2026, 11, 28, 3, 0, 0, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(seconds=61)
OWNER = {"apiVersion": "rlplace.io/v1alpha1", "kind": "RLJob", "name": "a", "uid": "uid-a", "controller": True}
LABELS = {"app.kubernetes.io/managed-by": "rlplace", "rlplace.io/job": "a"}


def rljob(name: str = "a", phase: str = "Running", **status: object) -> dict:
    placement = {"mode": "collocated", "components": [{"name": "actor", "processes": 8, "gpus": 8, "nodes": ["n0"]}]}
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}", "generation": 1,
                     "creationTimestamp": "2026-11-28T02:50:00Z"},
        "spec": {"nodeGroups": ["g"], "entrypoint": "python train.py"},
        "status": {"phase": phase, "attempts": 1, "rayCluster": f"{name}-abc", "placement": placement, **status},
    }  # fmt: skip


def pod(name: str, node: str, kind: str, cluster: str = "a-abc", gpus: int = 0, running: bool = True) -> dict:
    container: dict = {"name": "ray", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}
    conditions = [{"type": "Ready", "status": "True"}] if running else []
    return {
        "metadata": {"namespace": "ns", "name": name, "labels": {"ray.io/cluster": cluster, "ray.io/node-type": kind}},
        "spec": {"nodeName": node, "containers": [container]},
        "status": {"phase": "Running" if running else "Pending", "conditions": conditions},
    }


def raycluster(name: str, nodes: str, owner: dict | None = None) -> dict:
    refs = [owner] if owner else []
    meta = {"namespace": "ns", "name": name, "uid": f"rc-{name}", "labels": LABELS, "ownerReferences": refs}
    return {"metadata": {**meta, "annotations": {"rlplace.io/nodes": nodes}}}


def healthy() -> ClusterState:
    node = {"metadata": {"name": "n0"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    return ClusterState(
        now=NOW,
        rljobs=[rljob()],
        rayclusters=[raycluster("a-abc", "n0")],
        pods=[pod("a-head", "n0", "head"), pod("a-worker", "n0", "worker", gpus=8)],
        nodes=[node],
    )


def test_a_healthy_cluster_has_no_violation_over_time() -> None:
    checker = Checker()
    assert checker.check(healthy()) == []
    later = healthy()
    later.now = LATER
    assert checker.check(later) == []


def test_a_gpu_given_twice_is_named_whichever_way() -> None:
    state = healthy()
    state.rayclusters.append(raycluster("b-xyz", "n0"))  # a second job holding the same node whole
    state.pods.append(pod("b-worker", "n0", "worker", cluster="b-xyz", gpus=8))
    claim = {"metadata": {"namespace": "ns", "name": "c"}, "status": {"allocation": {"devices": {"results": [
        {"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}]}}}}  # fmt: skip
    other = copy.deepcopy(claim)
    other["metadata"]["name"] = "d"
    state.claims += [claim, other]
    found = Checker().check(state)
    assert "gpu-twice: node n0 is held whole by RayClusters ns/a-abc, ns/b-xyz" in found
    assert "gpu-twice: node n0: pods ns/a-worker, ns/b-worker ask 16 nvidia.com/gpu of its 8" in found
    assert "gpu-twice: device gpu.example.com/n1/gpu-0 is allocated to claims ns/c, ns/d" in found


def test_a_clusterqueue_over_its_quota_is_named() -> None:
    state = healthy()
    state.cluster_queues = [
        {
            "metadata": {"name": "cq"},
            "spec": {"resourceGroups": [{"flavors": [{"name": "a800", "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]},
            "status": {"flavorsUsage": [{"name": "a800", "resources": [{"name": "nvidia.com/gpu", "total": "16"}]}]},
        }
    ]  # fmt: skip
    assert Checker().check(state) == ["quota: ClusterQueue cq uses 16 nvidia.com/gpu of flavor a800, its quota is 8"]


def test_an_orphan_claim_template_is_named_once_past_its_grace() -> None:
    gone = {**OWNER, "name": "old", "uid": "uid-old"}
    template = {"metadata": {"namespace": "ns", "name": "old-n0-gpus-1", "uid": "t1", "labels": LABELS,
                             "ownerReferences": [gone]}}  # fmt: skip
    checker = Checker()
    state = healthy()
    state.claim_templates.append(template)
    assert checker.check(state) == []  # a deletion may be under way
    later = copy.deepcopy(state)
    later.now = LATER
    assert checker.check(later) == [
        "orphan: ResourceClaimTemplate ns/old-n0-gpus-1 has no live RLJob of its owner's uid (for 61 s)"
    ]


def test_a_workload_holding_quota_after_its_job_ended_is_named() -> None:
    state = healthy()
    state.rljobs = [rljob(phase="Succeeded")]
    state.pods = []
    workload = {
        "metadata": {"namespace": "ns", "name": "a-1234", "uid": "w1", "labels": LABELS, "ownerReferences": [OWNER]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]},
    }
    state.workloads.append(workload)
    checker = Checker()
    checker.check(state)
    state.now = LATER
    assert "orphan: Workload ns/a-1234 holds quota though its RLJob ns/a is Succeeded (for 61 s)" in checker.check(
        state
    )


def test_a_running_job_without_its_pods_is_a_lie_once_the_operator_had_time_to_see_it() -> None:
    state = healthy()
    state.pods = [pod("a-head", "n0", "head"), pod("a-worker", "n1", "worker", running=False)]
    checker = Checker()
    assert checker.check(state) == []  # the pods changed just now: the operator gets its reaction time
    state.now = NOW + dt.timedelta(seconds=31)
    found = checker.check(state)
    assert "lie: RLJob ns/a is Running but no worker pod runs on planned node n0" in found
    assert "lie: RLJob ns/a's worker pods run on n1, not in status.placement" in found
    state.pods = []
    assert "lie: RLJob ns/a is Running but its Ray head pod is not running" in checker.check(state)
    state.pods = healthy().pods  # true again: the next disagreement gets its reaction time afresh
    assert checker.check(state) == []
    state.pods = []
    assert checker.check(state) == []


def test_a_spec_change_gives_the_operator_its_reaction_time_again() -> None:
    """A stream of replicas patches: each new spec may move what is planned, so a disagreement that began before
    the last change is named only once the operator had its 30 s after that change."""
    state = healthy()
    state.pods = [pod("a-head", "n0", "head"), pod("a-worker", "n1", "worker")]
    checker = Checker()
    assert checker.check(state) == []
    state.now = NOW + dt.timedelta(seconds=25)
    state.rljobs[0]["metadata"]["generation"] = 2  # patched 25 s into the disagreement
    assert checker.check(state) == []
    state.now = NOW + dt.timedelta(seconds=40)  # 40 s of disagreement, 15 s since the change
    assert checker.check(state) == []
    state.now = NOW + dt.timedelta(seconds=56)
    assert "lie: RLJob ns/a's worker pods run on n1, not in status.placement" in checker.check(state)


def test_a_running_job_that_says_its_replace_ranks_are_lost_is_no_lie() -> None:
    state = healthy()
    state.pods = [pod("a-head", "n0", "head")]
    checker = Checker(reaction_seconds=0)
    assert "lie: RLJob ns/a is Running but no worker pod runs on planned node n0" in checker.check(state)
    lost = {"node": "n0", "ranks": [0], "since": "2026-11-28T02:59:00Z", "why": "pod deleted"}
    state.rljobs[0]["status"]["components"] = [{"name": "actor", "desired": 8, "live": 0, "lost": [lost]}]
    assert Checker(reaction_seconds=0).check(state) == []


def test_a_running_job_still_saying_what_it_waits_for_is_a_lie() -> None:
    state = healthy()
    state.rljobs[0]["status"]["waitingFor"] = "Kueue (ClusterQueue chaos)"
    assert "lie: RLJob ns/a is Running but still says it waits for 'Kueue (ClusterQueue chaos)'" in Checker().check(
        state
    )


def test_a_silent_job_a_phase_moving_back_and_an_attempt_going_down_are_named() -> None:
    checker = Checker()
    assert checker.check(healthy()) == []
    back = healthy()
    back.rljobs = [rljob(phase="Queued", attempts=0)]
    back.pods = []
    back.now = LATER
    found = checker.check(back)
    assert "lie: RLJob ns/a moved from Running back to Queued with no condition saying why" in found
    assert "lie: RLJob ns/a's attempt went down from 1 to 0" in found
    assert "silent: RLJob ns/a is Queued with no condition saying what it waits for" in found
    said = healthy()
    said.rljobs = [rljob(phase="Queued", attempts=2, waitingFor="1 free node of g", conditions=[
        {"type": "Admitted", "status": "False", "reason": "Restarting", "message": "lost node n0"}])]  # fmt: skip
    said.pods, said.now = [], LATER
    assert Checker().check(said) == []


def test_a_second_driver_for_one_attempt_and_progress_going_back_are_named() -> None:
    checker = Checker()
    state = healthy()
    state.rljobs = [rljob(progress={"iteration": 9})]
    state.rayjobs = [{"metadata": {"namespace": "ns", "name": "a", "uid": "rj1", "labels": LABELS,
                                   "ownerReferences": [OWNER], "annotations": {"rlplace.io/attempt": "1"}},
                      "status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}}]  # fmt: skip
    assert checker.check(state) == []
    # A RayJob made again for the same attempt whose cluster never came up ran no driver (the job gave its nodes
    # back after a bind timeout): not a second driver.
    unstarted = copy.deepcopy(state)
    unstarted.rayjobs[0]["metadata"]["uid"] = "rj-never"
    unstarted.rayjobs[0]["status"] = {"jobDeploymentStatus": "Initializing"}
    assert checker.check(unstarted) == []
    again = copy.deepcopy(state)
    again.rayjobs[0]["metadata"]["uid"] = "rj2"
    again.rljobs = [rljob(progress={"iteration": 4})]
    found = checker.check(again)
    assert "driver-twice: RLJob ns/a's attempt 1 was submitted by 2 RayJobs" in found
    assert "progress: RLJob ns/a's attempt 1 reported iteration 4 after 9" in found
    # Named when it happens: the next look at the same cluster says nothing more of it.
    assert not [f for f in checker.check(again) if f.startswith("driver-twice")]
