"""DRA node sharing on plain data: devices from ResourceSlices, admission at GPU granularity, the claim template
of a worker pod, and the GPU numbers its processes see (no cluster)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from placement_core import contract
from placement_core.components import component_placement
from placement_core.launcher.plan import LaunchPlan
from placement_core.observe.verify import Binding, check_binding
from placement_core.plan import build_plan
from rlplace_operator.admission.ledger import Holding, Ledger
from rlplace_operator.admission.queue import AdmissionWorld as World
from rlplace_operator.admission.queue import DraNode, admit, dra_node, queue_pass
from rlplace_operator.admission.rules import Admitted, GroupDemand, Pool, QueuedJob, Waiting, decide
from rlplace_operator.api.names import GPUS_ANNOTATION, JOB_LABEL, NODES_ANNOTATION
from rlplace_operator.api.nodegroup import Dra, NodeGroupSpec, PinAttribute
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.builders.claims import claim_templates
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.builders.raycluster import build_raycluster
from rlplace_operator.cluster.dra import (
    Device,
    NodeSlice,
    claimed_devices,
    device_pin,
    host_order,
    node_slice,
    parse_devices_annotation,
)
from rlplace_operator.cluster.selection import NodeInfo, dra_problem, nodegroup_status
from rlplace_operator.controllers.indexes import raycluster_nodes_index
from rlplace_operator.planning.plan import WorkerNode

DRIVER = "gpu.example.com"
INDEX_PIN = Dra(driver=DRIVER, pin_attribute=PinAttribute.INDEX)
UUID_PIN = Dra(driver=DRIVER)
GROUP = NodeGroupSpec.model_validate(
    {"nodeSelector": {"matchLabels": {"pool": "dra"}}, "gpuAllocation": "dra", "dra": {"driver": DRIVER}}
)


def slice_body(node: str, count: int = 8, driver: str = DRIVER, uuid: bool = True) -> dict:
    """A ResourceSlice as the example driver publishes it."""
    devices = []
    for i in range(count):
        attributes = {"index": {"int": i}, "model": {"string": "LATEST-GPU-MODEL"}}
        if uuid:
            attributes["uuid"] = {"string": f"gpu-{node}-{i}"}
        devices.append({"name": f"gpu-{i}", "attributes": attributes})
    spec = {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}
    return {"spec": {**spec, "devices": devices}}


def devices_of(node: str, count: int = 8) -> tuple[Device, ...]:
    found = node_slice(slice_body(node, count))
    assert found is not None
    return host_order(found[1].devices)


def claim_body(namespace: str, name: str, node: str, devices: list[int], job: str | None = None) -> dict:
    results = [{"request": "gpus", "driver": DRIVER, "pool": node, "device": f"gpu-{i}"} for i in devices]
    labels = {JOB_LABEL: job} if job else {}
    metadata = {"namespace": namespace, "name": name, "labels": labels}
    return {"metadata": metadata, "status": {"allocation": {"devices": {"results": results}}}}


# -- devices ------------------------------------------------------------------------------------------------


def test_a_slice_gives_its_nodes_devices_in_host_order() -> None:
    body = slice_body("n0", 12)
    body["spec"]["devices"].reverse()
    node, found = node_slice(body) or ("", NodeSlice("", "", ()))
    ordered = host_order(found.devices)
    assert node == "n0" and found.driver == DRIVER
    assert [d.name for d in ordered] == [f"gpu-{i}" for i in range(12)]  # by index, not by text (gpu-10 last)
    assert ordered[4].pin(PinAttribute.INDEX) == 4 and ordered[4].pin(PinAttribute.UUID) == "gpu-n0-4"


def test_without_an_index_the_order_is_the_pci_bus_then_the_name() -> None:
    pci = [Device(f"gpu-{m}", "p", None, f"u{m}", f"0000:{b:02x}:00.0") for m, b in ((0, 0x81), (1, 0x41), (2, 0x10))]
    assert [d.name for d in host_order(pci)] == ["gpu-2", "gpu-1", "gpu-0"]
    named = [Device(name, "p") for name in ("gpu-10", "gpu-2", "gpu-1")]
    assert [d.name for d in host_order(named)] == ["gpu-1", "gpu-2", "gpu-10"]


def test_allocated_claims_hold_their_devices_and_name_their_job() -> None:
    held = claimed_devices(claim_body("team", "pod-a-gpus-x", "n0", [4, 5], job="a"))
    assert [(d.pool, d.device, d.job) for d in held] == [("n0", "gpu-4", "a"), ("n0", "gpu-5", "a")]
    assert claimed_devices({"metadata": {"name": "c"}, "status": {}}) == []  # not allocated yet
    claims = {(DRIVER, "n0"): [tuple(held)], (DRIVER, "n1"): [tuple(claimed_devices(claim_body("x", "c", "n1", [0])))]}
    assert dra_node(devices_of("n0"), DRIVER, claims) == DraNode(8, {4: ("team", "a"), 5: ("team", "a")})


# -- NodeGroup status -------------------------------------------------------------------------------------


def info(name: str, slices: tuple[NodeSlice, ...] = (), allocatable: dict | None = None) -> NodeInfo:
    return NodeInfo(name, {"pool": "dra"}, allocatable or {}, True, (), slices)


def test_a_dra_group_counts_its_drivers_devices_and_names_nodes_that_cannot_take_jobs() -> None:
    slices = (node_slice(slice_body("n0"))[1],)  # type: ignore[index]
    good = info("n0", slices)
    missing = info("n1")
    other = info("n2", (node_slice(slice_body("n2", driver="gpu.nvidia.com"))[1],))  # type: ignore[index]
    mixed = info("n3", (node_slice(slice_body("n3"))[1],), {"nvidia.com/gpu": "8"})  # type: ignore[index]
    unpinnable = info("n4", (node_slice(slice_body("n4", uuid=False))[1],))  # type: ignore[index]
    status = nodegroup_status(GROUP, [good, missing, other, mixed, unpinnable], 1)
    by_name = {n.name: n for n in status.nodes}
    assert (by_name["n0"].units, by_name["n0"].ready, by_name["n0"].problem) == (8, True, None)
    assert status.hardware_type == "Accelerator" and status.ready_nodes == 1 and status.total_units == 8
    assert by_name["n1"].problem == "node n1 publishes no ResourceSlice of DRA driver gpu.example.com"
    assert by_name["n2"].problem == (
        "node n2 publishes no ResourceSlice of DRA driver gpu.example.com (it publishes devices of gpu.nvidia.com)"
    )
    assert "never both" in (by_name["n3"].problem or "") and not by_name["n3"].ready
    assert "has no 'uuid' attribute" in (by_name["n4"].problem or "")
    assert dra_problem(NodeGroupSpec.model_validate({"nodeSelector": {}}), missing) is None  # devicePlugin groups


# -- admission at GPU granularity ------------------------------------------------------------------------------


def gpus_job(name: str, *per_node: int, created: str = "2026-01-01T00:00:00Z") -> QueuedJob:
    used = frozenset(range(len(per_node)))
    demand = GroupDemand("dra", len(per_node), used, tuple(enumerate(per_node)))
    return QueuedJob(("ns", name), 0, created, (demand,))


def test_two_four_gpu_jobs_share_one_node_on_disjoint_gpus_and_a_third_waits() -> None:
    pool = Pool({"dra": ["n0"]}, {}, {"n0": tuple(range(8))})
    a, b, c = (gpus_job(n, 4, created=f"2026-01-01T00:00:0{i}Z") for i, n in enumerate("abc"))
    decisions = decide([a, b, c], pool)
    assert decisions[a.key] == Admitted(a.key, (("dra", ("n0",)),), frozenset(), (("n0", (0, 1, 2, 3)),))
    assert isinstance(decisions[b.key], Admitted) and decisions[b.key].gpus == (("n0", (4, 5, 6, 7)),)
    assert decisions[a.key].worker_nodes == frozenset({"n0"})
    waiting = decisions[c.key]
    assert isinstance(waiting, Waiting) and waiting.reason == "1 node of dra with enough free GPUs"


def test_a_job_packs_onto_the_first_node_with_enough_free_gpus() -> None:
    pool = Pool({"dra": ["n0", "n1"]}, {}, {"n0": (0, 1, 2), "n1": tuple(range(8))})
    assert decide([gpus_job("small", 2)], pool)[("ns", "small")].gpus == (("n0", (0, 1)),)  # type: ignore[union-attr]
    assert decide([gpus_job("big", 4)], pool)[("ns", "big")].gpus == (("n1", (0, 1, 2, 3)),)  # type: ignore[union-attr]


def test_the_head_keeps_the_gpus_it_waits_for_from_smaller_jobs_behind_it() -> None:
    pool = Pool({"dra": ["n0"]}, {}, {"n0": (0, 1, 2, 3, 4)})
    head = gpus_job("head", 6, created="2026-01-01T00:00:00Z")
    small = gpus_job("small", 1, created="2026-01-01T00:00:01Z")
    decisions = decide([head, small], pool)
    # The head would take five of its six GPUs here: the small job behind it may not take them.
    assert isinstance(decisions[head.key], Waiting) and isinstance(decisions[small.key], Waiting)


def world(dra_nodes: dict[str, DraNode], rayclusters: dict | None = None) -> World:
    jobs = {key: [{"status": {}, "priority": 0, "created": "2026-01-01T00:00:00Z", "labels": {}}] for key in ALL_JOBS}
    return World(jobs, rayclusters or {}, {}, {"dra": list(dra_nodes)}, set(), dra_nodes=dra_nodes)


ALL_JOBS = [("ns", name) for name in ("a", "b", "c", "other")]


def test_claims_of_others_and_reservations_count_and_a_deleted_claim_frees_its_gpus() -> None:
    ledger = Ledger()
    others = DraNode(8, {0: None, 1: None})  # a claim of no RLJob holds gpu-0 and gpu-1
    first = admit(ledger, world({"n0": others}), gpus_job("a", 4))
    assert isinstance(first, Admitted) and first.gpus == (("n0", (2, 3, 4, 5)),)
    second = admit(ledger, world({"n0": others}), gpus_job("b", 4))
    assert isinstance(second, Waiting)  # two free GPUs left: 6 and 7
    # The other user's claim goes (its pod was deleted): b starts on the GPUs it freed.
    freed = admit(ledger, world({"n0": DraNode(8, {})}), gpus_job("b", 4))
    assert isinstance(freed, Admitted) and freed.gpus == (("n0", (0, 1, 6, 7)),)


def test_after_a_restart_a_jobs_gpus_come_back_from_its_raycluster_and_it_keeps_them() -> None:
    annotations = {NODES_ANNOTATION: "n0,cpu-0", GPUS_ANNOTATION: "n0=4,5,6,7"}
    indexed = raycluster_nodes_index(namespace="ns", labels={JOB_LABEL: "a"}, annotations=annotations)
    assert indexed == {("ns", "a"): Holding(frozenset({"cpu-0"}), {"n0": frozenset({4, 5, 6, 7})})}
    assert parse_devices_annotation("n0=4,5 bad n1=x") == {"n0": frozenset({4, 5})}
    ledger = Ledger()
    seen = world({"n0": DraNode(8, {})}, {key: [value] for key, value in (indexed or {}).items()})
    assert admit(ledger, seen, gpus_job("a", 4)).gpus == (("n0", (4, 5, 6, 7)),)  # type: ignore[union-attr]
    other = admit(ledger, seen, gpus_job("b", 4))
    assert isinstance(other, Admitted) and other.gpus == (("n0", (0, 1, 2, 3)),)
    assert isinstance(admit(ledger, seen, gpus_job("c", 1)), Waiting)


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.integers(1, 4),
    jobs=st.lists(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3), min_size=1, max_size=8),
    foreign=st.sets(st.integers(0, 7), max_size=4),
)
def test_admitted_gpus_are_exactly_the_demand_and_never_overlap(
    nodes: int, jobs: list[list[int]], foreign: set[int]
) -> None:
    """For any queue of jobs of 1-8 GPUs per node over 1-4 nodes of 8 GPUs, with some GPUs of the first node held
    by others: every admitted job gets on each node exactly the GPUs it needs, free ones, never another's."""
    names = [f"n{i}" for i in range(nodes)]
    dra_nodes = {name: DraNode(8, dict.fromkeys(foreign, None) if name == "n0" else {}) for name in names}
    queue = [gpus_job(f"j{i}", *need, created=f"2026-01-01T00:00:{i:02d}Z") for i, need in enumerate(jobs)]
    seen = World(
        {job.key: [{"status": {}, "priority": 0, "created": job.created, "labels": {}}] for job in queue},
        {},
        {},
        {"dra": names},
        set(),
        dra_nodes=dra_nodes,
    )
    ledger = Ledger()
    ledger.demands.update({job.key: ((), _planned(job)) for job in queue})
    decisions = queue_pass(ledger, seen)
    used: dict[str, set[int]] = {name: set(foreign) if name == "n0" else set() for name in names}
    for job in queue:
        decision = decisions[job.key]
        if not isinstance(decision, Admitted):
            continue
        assert decision.nodes == frozenset()
        needs = sorted(count for _, count in job.demand[0].gpus or ())  # type: ignore[index]
        assert sorted(len(gpus) for _, gpus in decision.gpus) == needs
        for node, gpus in decision.gpus:
            assert not used[node] & set(gpus), (node, gpus, used[node])
            used[node] |= set(gpus)
    if not foreign and len(jobs[0]) <= nodes:
        assert isinstance(decisions[queue[0].key], Admitted)  # the first job fits on free nodes: it starts


def _planned(job: QueuedJob):
    from rlplace_operator.admission.ledger import PlannedDemand

    return PlannedDemand(job.demand or (), RLJobSpec.model_validate({"nodeGroups": ["dra"]}), None)


# -- the worker pod's claim -------------------------------------------------------------------------------


def test_a_pin_matches_exactly_its_devices_and_gets_a_new_name_for_a_new_pin_or_attempt() -> None:
    devices = devices_of("n0")
    by_index = device_pin("job", 0, 1, INDEX_PIN, devices, (6, 4, 5, 7))
    assert by_index.host_gpus == (4, 5, 6, 7)
    assert by_index.selector() == (
        'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].index in [4, 5, 6, 7]'
    )
    by_uuid = device_pin("job", 0, 1, UUID_PIN, devices, (1, 0))
    assert by_uuid.selector().endswith('.uuid in ["gpu-n0-0", "gpu-n0-1"]')
    assert by_index.template.startswith("job-n0-gpus-")
    assert device_pin("job", 0, 1, INDEX_PIN, devices, (4, 5, 6, 7)).template == by_index.template
    assert device_pin("job", 0, 2, INDEX_PIN, devices, (4, 5, 6, 7)).template != by_index.template
    assert device_pin("job", 0, 1, INDEX_PIN, devices, (0, 1, 2, 3)).template != by_index.template


PLAN_SPEC = RLJobSpec.model_validate(
    {"nodeGroups": ["dra"], "componentPlacement": [{"components": "actor", "placement": "0-3"}], "entrypoint": "x"}
)


def test_a_pinned_worker_claims_its_gpus_instead_of_the_node_and_declares_the_plans_gpus() -> None:
    pin = device_pin("job", 0, 1, INDEX_PIN, devices_of("n0"), (4, 5, 6, 7))
    worker = WorkerNode(0, "n0", 8, {}, groups=("dra",), processes=4, hostname="n0", held_gpus=(0, 1, 2, 3), pin=pin)
    cluster = build_raycluster("job", PLAN_SPEC, [worker])
    assert cluster["metadata"]["annotations"] == {NODES_ANNOTATION: "n0", GPUS_ANNOTATION: "n0=4,5,6,7"}
    (group,) = cluster["spec"]["workerGroupSpecs"]
    pod = group["template"]["spec"]
    container = pod["containers"][0]
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": pin.template}]
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    assert not any("gpu" in key for key in container["resources"]["limits"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env[contract.HOST_GPUS_ENV] == "4,5,6,7"
    assert group["rayStartParams"]["num-gpus"] == "4"
    assert all(f'"rlplace_gpu_%s_{g}":1' in container["args"][0] for g in range(4))
    assert '"rlplace_gpu_%s_4"' not in container["args"][0]
    (template,) = claim_templates("job", [worker])
    request = template["spec"]["spec"]["devices"]["requests"][0]
    assert template["metadata"]["name"] == pin.template
    assert template["spec"]["metadata"]["labels"] == {JOB_LABEL: "job"}  # the claims say whose devices they hold
    assert (request["name"], request["exactly"]["count"], request["exactly"]["allocationMode"]) == (
        "gpus",
        4,
        "ExactCount",
    )
    assert request["exactly"]["deviceClassName"] == DRIVER


def test_pinned_workers_each_get_their_own_group_and_whole_node_workers_keep_sharing_one() -> None:
    devices = devices_of("n0")
    pinned = [
        WorkerNode(
            r,
            f"n{r}",
            8,
            {},
            groups=("dra",),
            hostname=f"n{r}",
            held_gpus=(0,),
            pin=device_pin("j", r, 1, INDEX_PIN, devices, (r,)),
        )
        for r in (0, 1)
    ]
    whole = [WorkerNode(r, f"a{r}", 8, {"nvidia.com/gpu": 8}, groups=("a800",), hostname=f"a{r}") for r in (2, 3)]
    groups = build_raycluster("j", PLAN_SPEC, [*pinned, *whole])["spec"]["workerGroupSpecs"]
    assert [g["replicas"] for g in groups] == [1, 1, 2]
    assert "resourceClaims" not in groups[2]["template"]["spec"]


def test_processes_in_a_pinned_pod_see_container_ordinals_and_the_check_proves_the_host_gpus() -> None:
    config = {"num_nodes": 1, "component_placement": {"actor": "4-7:0-3", "rollout": "5:0,7:1"}}
    placement = component_placement({"cluster": config})
    plan = build_plan(placement)
    configmap = build_placement_configmap("job", plan, None, {0: (4, 5, 6, 7)})
    pod_gpus = contract.parse_pod_gpus(configmap["data"][contract.POD_GPUS_KEY])
    launch = LaunchPlan.of(plan, pod_gpus)
    rollout = plan.component("rollout").processes
    assert [launch.env(p)["CUDA_VISIBLE_DEVICES"] for p in rollout] == ["1", "3"]  # 5 and 7 among 4..7
    assert rollout[0].env["CUDA_VISIBLE_DEVICES"] == "5"  # the plan keeps its own numbers
    binding = Binding("rollout", rollout[1], 2, "", pod_gpus[0])
    environ = {
        **binding.expected_env(),
        contract.HOST_GPUS_ENV: "0,1,2,3",  # admission gave the pod host GPUs 0..3
        **{f"GPU_DEVICE_{i}": f"gpu-{i}" for i in range(4)},
        **{f"GPU_DEVICE_{i}_RESOURCE_CLAIM": "uid-1" for i in range(4)},
    }
    good = check_binding(binding, environ, 0, None)
    assert good.ok and good.host_gpus == (3,) and good.pod_host_gpus == (0, 1, 2, 3) and good.claims == ("uid-1",)
    stolen = check_binding(binding, {**environ, "GPU_DEVICE_7": "gpu-7"}, 0, None)
    assert stolen.problems == ("the container was given host GPUs 0,1,2,3,7, its claim pins 0,1,2,3",)
    unmapped = check_binding(binding, {**environ, "CUDA_VISIBLE_DEVICES": "7"}, 0, None)
    assert unmapped.problems[0] == "CUDA_VISIBLE_DEVICES='7', planned '3'"


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 15), min_size=1, max_size=8), st.data())
def test_ordinals_map_back_through_the_pods_gpus_to_the_planned_ones(pod: set[int], data: st.DataObject) -> None:
    planned = data.draw(st.lists(st.sampled_from(sorted(pod)), min_size=1, max_size=len(pod), unique=True))
    ordinals = contract.container_ordinals([str(g) for g in planned], sorted(pod))
    assert [sorted(pod)[int(o)] for o in ordinals.split(",")] == planned
    assert all(0 <= int(o) < len(pod) for o in ordinals.split(","))


def test_a_worker_pod_whose_pinned_gpus_another_claim_holds_gives_them_back_within_seconds() -> None:
    import datetime as dt

    from rlplace_operator.reconcile.actions import DeleteChildren
    from rlplace_operator.reconcile.decide import reconcile
    from rlplace_operator.reconcile.world import World

    from recorded import NOW, job, live_status, pod, raycluster

    unbound = pod("train-n0-worker-abcde", node=None)
    message = (
        "0/10 nodes are available: 1 cannot allocate all claims, 9 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    unbound["status"]["conditions"] = [{**scheduled, "lastTransitionTime": "2026-11-24T00:59:55Z"}]  # 5 s before NOW
    status = live_status()
    soon = reconcile(job(status), World(now=NOW, raycluster=raycluster(), pods=[unbound]))
    assert soon.status.phase == "Provisioning"  # a claim of the job's own stopped pod may still be going
    later = reconcile(job(status), World(now=NOW + dt.timedelta(seconds=6), raycluster=raycluster(), pods=[unbound]))
    admitted = next(c for c in later.status.conditions if c.type == "Admitted")
    assert later.status.phase == "Queued" and admitted.reason == "GPUsUnavailable", later.status.message
    assert "train-n0-worker-abcde" in admitted.message and "cannot allocate all claims" in admitted.message
    assert DeleteChildren() in later.actions and later.status.retry_after is None


def test_the_operator_checks_the_reported_gpus_against_the_claims_it_recorded() -> None:
    from placement_core.observe.verify import BindingReport, ProcessCheck
    from rlplace_operator.cluster.dra import with_claims_checked

    seen = ProcessCheck("actor", 0, "n0", (), host_gpus=(4,), pod_host_gpus=(4, 5, 6, 7), claims=("uid",))
    whole = ProcessCheck("reward", 0, "a800-0", ())
    report = BindingReport((seen, whole), ("actor", "reward"))
    assert with_claims_checked(report, {"n0": [4, 5, 6, 7]}).ok
    wrong = with_claims_checked(report, {"n0": [0, 1, 2, 3]})
    assert not wrong.ok and wrong.first_failure().problems == (  # type: ignore[union-attr]
        "its container was given host GPUs 4,5,6,7, the job claims 0,1,2,3 there",
    )
    assert wrong.checks[1].ok  # a whole-node pod reports no claimed GPUs: nothing to compare


def test_a_re_placement_that_needs_more_gpus_may_use_the_jobs_own_and_keeps_them_when_it_fits() -> None:
    ledger = Ledger()
    annotations = {NODES_ANNOTATION: "n0", GPUS_ANNOTATION: "n0=4,5,6,7"}
    indexed = raycluster_nodes_index(namespace="ns", labels={JOB_LABEL: "a"}, annotations=annotations) or {}
    # Its own claims hold 4..7 (allocated, labelled with the job); another user's claim holds 0.
    nodes = {"n0": DraNode(8, {4: ("ns", "a"), 5: ("ns", "a"), 6: ("ns", "a"), 7: ("ns", "a"), 0: None})}
    seen = world(nodes, {key: [value] for key, value in indexed.items()})
    same = admit(ledger, seen, gpus_job("a", 4))
    assert isinstance(same, Admitted) and same.gpus == (("n0", (4, 5, 6, 7)),)  # kept: nothing moves
    bigger = admit(ledger, seen, gpus_job("a", 6))
    assert isinstance(bigger, Admitted) and bigger.gpus == (("n0", (1, 2, 3, 4, 5, 6)),)
    assert isinstance(admit(ledger, seen, gpus_job("b", 2)), Waiting)  # a's new six and the other claim: one left


def test_after_its_node_is_lost_a_job_is_admitted_on_another_dra_node_under_a_new_claim_template() -> None:
    """A restart leaves the failed node out (status.excludedNodes becomes QueuedJob.excluded): on a DRA group
    the job gets GPUs of another node, and its new attempt's pin has a new template name."""
    pool = Pool({"dra": ["n0", "n1"]}, {}, {"n0": tuple(range(8)), "n1": (2, 3, 4, 5, 6, 7)})
    first = decide([gpus_job("a", 4)], pool)[("ns", "a")]
    assert isinstance(first, Admitted) and first.gpus == (("n0", (0, 1, 2, 3)),)
    lost = QueuedJob(("ns", "a"), 0, "2026-01-01T00:00:00Z", gpus_job("a", 4).demand, {"n0": "node n0 is left out"})
    again = decide([lost], pool)[("ns", "a")]
    assert isinstance(again, Admitted) and again.gpus == (("n1", (2, 3, 4, 5)),)
    before = device_pin("a", 0, 1, INDEX_PIN, devices_of("n0"), (0, 1, 2, 3))
    after = device_pin("a", 0, 2, INDEX_PIN, devices_of("n1"), (2, 3, 4, 5))
    assert before.template != after.template and after.selector().endswith("index in [2, 3, 4, 5]")
