"""A lost rollout replica is replaced while the job runs (issue 42, docs/replace.md), on the real kubelets of the
local cluster: examples/rljob-replace-run.yaml (the actor on the a800 node, eight rollout ranks on the 4090
node, rollout onLoss Replace).

- The rollout's worker pod force-deleted mid-run: the job never leaves Running, says which ranks are lost and
  why, KubeRay makes the pod again, the launcher starts the ranks in it, their binding is verified again from
  inside (BindingVerified from the report printed after them), the actor's processes keep their PIDs, every step
  is reported once and in order; then the actor's pod deleted while the operator is down: a RestartJob loss
  restarts the job once the operator is back, which resumes from its last checkpoint as attempt 2, the restart
  recorded and named from what the kubelet left (the restart path of issue 22).
- The rollout's node cordoned and its pod gone: the ranks move to the other node of their NodeGroup (the
  ConfigMap's plan, the RayCluster's worker group), their binding is verified there, the job Succeeds as attempt 1.
- The same under Kueue, its node tainted NoExecute: while no node is free the job runs on without the ranks,
  waiting for Kueue; then they move to the node Kueue's topology-aware scheduling granted in the job's admitted
  Workload, within the ClusterQueue's quota.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from test_kueue_e2e import (  # noqa: F401  (kueue_queues: a fixture)
    KUEUE,
    QUEUE_LABEL,
    cluster_queue,
    granted_hosts,
    kueue_queues,
    local_queue,
    resource_flavor,
    workloads,
)
from test_lifecycle import CHECKPOINTS, condition, force_delete, ray_pods, summary_line, wait_ended
from test_run import RunJobs, example, real_nodes, run_jobs  # noqa: F401  (fixtures)

from placement_core.launcher.checkpoint import CheckpointStore

from e2e_cluster import wait_for
from invariants import Checker, ClusterState
from rlplace_fixtures import kubectl, kubectl_rlplace, run_tool

pytestmark = pytest.mark.e2e

GROUP, VERSION = "rlplace.io", "v1alpha1"
#: Enough one-second steps that the job still runs once its lost ranks are back (about a minute on a quiet
#: machine, where 40 steps ended first), and a checkpoint every EVERY for the restart to resume from.
STEPS, EVERY = 80, 10


#: The Secret the replace test's workers take their environment from.
TOKEN = "rollout-token"


def replace_job(run_jobs: RunJobs, name: str, **spec: object) -> dict:  # noqa: F811
    """examples/rljob-replace-run.yaml named `name`, STEPS steps, its checkpoints in a fresh host directory."""
    body = example("rljob-replace-run.yaml")
    body["metadata"]["name"] = name
    body["spec"]["entrypoint"] = f"python -m placement_core.launcher.demo --steps {STEPS} --checkpoint-every {EVERY}"
    directory = CHECKPOINTS / run_jobs.namespace / name
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o1777)
    for parent in (CHECKPOINTS, CHECKPOINTS / run_jobs.namespace):
        parent.chmod(0o755)
    body["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = str(directory)
    body["spec"].update(spec)
    return body


def driver_log(kubeconfig: str, namespace: str, job: str) -> str:
    return run_tool("kubectl", kubeconfig, "logs", "-n", namespace, f"job/{job}", check=False).stdout


def steps_seen(log: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^step (\d+)/\d+ \(attempt 1\)", log, re.MULTILINE)]


def pids(log: str, component: str) -> list[dict[str, str]]:
    """Every process table row of `component` in the log, oldest first: its RANK, PID and what it saw."""
    rows, header = [], None
    for line in log.splitlines():
        cells = line.split()
        if cells[:2] == ["component", "RANK"]:
            header = cells
        elif header and cells and cells[0] == component and len(cells) == len(header):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def verified_at_step_3(status: dict) -> dict | None:
    """The status once the binding is verified and the driver reported its third step."""
    progress = (status.get("progress") or {}).get("iteration") or 0
    return status if condition(status, "BindingVerified").get("status") == "True" and progress >= 3 else None


def rollout(status: dict) -> dict:
    return next(c for c in status.get("components") or [] if c["name"] == "rollout")


def lost_entries(status: dict) -> list[dict]:
    """The rollout's lost entries (ranks, node, why), none before its components are counted."""
    return next((c.get("lost") or [] for c in status.get("components") or [] if c["name"] == "rollout"), [])


def events(run_jobs: RunJobs, job: str, reason: str) -> list[str]:  # noqa: F811
    found = run_jobs.core.list_namespaced_event(run_jobs.namespace, field_selector=f"reason={reason}").items
    return [e.message for e in found if e.involved_object.name == job]


def watch_running(run_jobs: RunJobs, job: str, until: object, timeout: float, what: str) -> dict:  # noqa: F811
    """Poll the job every second until `until(status)`; it must stay Running meanwhile."""

    last: dict = {}

    def look() -> dict | None:
        status = last["status"] = run_jobs.status(job)
        said = {k: status.get(k) for k in ("message", "components")} | {
            "BindingVerified": condition(status, "BindingVerified")
        }
        assert status.get("phase") == "Running", f"{job} left Running: {status.get('phase')} {said}"
        return status if until(status) else None  # type: ignore[operator]

    try:
        return wait_for(look, timeout, what, interval=1)
    except TimeoutError as err:
        said = {k: last.get("status", {}).get(k) for k in ("message", "components", "conditions", "placement")}
        raise AssertionError(f"{err}; the job's status then: {said}") from None


def test_a_deleted_rollout_pod_is_replaced_while_the_job_runs_and_a_trainer_loss_restarts_it(
    run_jobs: RunJobs,  # noqa: F811
    real_nodes: list[str],  # noqa: F811
    kubeconfig: str,
    k8s: client.ApiClient,
    rlplace_operator: object,
) -> None:
    # The workers take their environment from a Secret, deleted before the rollout's pod is: the new pod KubeRay
    # makes for it cannot start until the Secret is back (a replacement that fails to start).
    secret = client.V1Secret(metadata=client.V1ObjectMeta(name=TOKEN), string_data={"ROLLOUT_TOKEN": "t"})
    run_jobs.core.create_namespaced_secret(run_jobs.namespace, secret)
    body = replace_job(run_jobs, "replace")
    body["spec"]["pods"] = {"workers": {"envFrom": [{"secretRef": {"name": TOKEN}}]}}
    run_jobs.create(body)

    wait_for(lambda: verified_at_step_3(run_jobs.status("replace")), 300, "replace verified at step 3", interval=1)
    before = driver_log(kubeconfig, run_jobs.namespace, "replace")
    actor_pids = {row["RANK"]: row["PID"] for row in pids(before, "actor")}
    (worker,) = [p for p in ray_pods(run_jobs, "replace", "worker") if p.spec.node_name == "real-4090-0"]
    run_jobs.core.delete_namespaced_secret(TOKEN, run_jobs.namespace)
    force_delete(run_jobs, worker)
    lost_at = time.monotonic()

    lost = watch_running(run_jobs, "replace", lambda s: rollout(s).get("lost"), 60, "the rollout ranks named lost")
    assert condition(lost, "RayClusterReady")["reason"] == "Replacing", lost["conditions"]
    assert rollout(lost)["live"] < 8 and "real-4090-0" in condition(lost, "RayClusterReady")["message"]

    def stuck_named(status: dict) -> bool:
        return any(TOKEN in entry.get("why", "") for entry in lost_entries(status))

    stuck = watch_running(run_jobs, "replace", stuck_named, 30, "the replacement pod's missing Secret named")
    (entry,) = lost_entries(stuck)
    new_pods = [p.metadata.name for p in ray_pods(run_jobs, "replace", "worker") if p.spec.node_name == "real-4090-0"]
    assert any(name in entry["why"] for name in new_pods) and worker.metadata.name not in new_pods, (entry, new_pods)
    assert stuck["attempts"] == 1 and not stuck.get("restarts"), stuck
    named_in = time.monotonic() - lost_at
    # `kubectl rlplace why` leads with the lost ranks, where they were and why their replacement waits.
    why = kubectl_rlplace(kubeconfig, "why", "replace", "-n", run_jobs.namespace)
    assert why.returncode == 0, why.stderr
    first = why.stdout.splitlines()[0]
    assert first.startswith(f"RLJob {run_jobs.namespace}/replace: rollout runs "), first
    assert "lost on real-4090-0" in first and TOKEN in first and "while the others go on" in first, first
    run_jobs.core.create_namespaced_secret(run_jobs.namespace, secret)
    secret_back = time.monotonic()

    def replaced(status: dict) -> bool:
        return rollout(status).get("replaced") == 8 and condition(status, "BindingVerified").get("status") == "True"

    back = watch_running(run_jobs, "replace", replaced, 180, "the rollout ranks replaced and verified again")
    took = time.monotonic() - secret_back
    assert rollout(back)["live"] == 8 and not rollout(back).get("lost"), back["components"]
    assert back["attempts"] == 1 and not back.get("restarts"), back
    assert events(run_jobs, "replace", "RanksLost") and events(run_jobs, "replace", "Replaced")

    # Each rollout rank's last process reported since the pod was lost (a rank reported more than once counts
    # once: the last 8 rows of the log need not be the 8 ranks). The driver prints the process table at the start
    # of the step after it took a rank back, a second or so after the binding report the status is read from, so
    # the table with every rank may follow the status by a step (two full runs read it a step early).
    def every_rank_reported() -> tuple[str, list[dict]] | None:
        log = driver_log(kubeconfig, run_jobs.namespace, "replace")
        since = pids(log, "rollout")[len(pids(before, "rollout")) :]
        reported = list({row["RANK"]: row for row in since}.values())
        return (log, reported) if len(reported) == 8 else None

    log, new_rollout = wait_for(every_rank_reported, 30, "every rollout rank's new process in the driver's log", 1)
    assert re.search(r"^replaced: component 'rollout' rank 7 ", log, re.MULTILINE), log[-3000:]
    after = pids(log, "actor")[-len(actor_pids) :]
    assert {row["RANK"]: row["PID"] for row in after} == actor_pids  # the trainer kept its processes
    assert {row["node"] for row in new_rollout} == {"real-4090-0"}, new_rollout
    assert sorted(row["CUDA_VISIBLE_DEVICES"] for row in new_rollout) == [str(i) for i in range(8)]
    assert Checker().check(ClusterState.read(k8s)) == []
    print(f"replace in place: the stuck replacement named in {named_in:.0f} s; Secret back -> verified in {took:.0f} s")

    # A loss that takes a RestartJob (the trainer's) process restarts the whole job, which resumes from its last
    # checkpoint (the restart path of docs/restarts.md, shown here once for both kinds of component). The pod is
    # deleted as `kubectl delete pod` does, while the operator is down: back up, it restarts the job once, and
    # names the loss.
    store = CheckpointStore(CHECKPOINTS / run_jobs.namespace / "replace")
    wait_for(lambda: any(s >= EVERY for s in store.steps()), 120, f"a checkpoint of step {EVERY}", interval=1)
    (trainer,) = [p for p in ray_pods(run_jobs, "replace", "worker") if p.spec.node_name == "real-a800-0"]
    rlplace_operator.stop()
    try:
        run_jobs.core.delete_namespaced_pod(trainer.metadata.name, run_jobs.namespace)

        def driver_failed() -> bool:
            rayjob = run_jobs.ray("rayjobs", "replace") or {}
            return (rayjob.get("status") or {}).get("jobStatus") == "FAILED"

        wait_for(driver_failed, 240, "the driver to fail while the operator is down", interval=1)
    finally:
        rlplace_operator.ensure_running()
    status = wait_ended(run_jobs, "replace", 400)
    assert status["phase"] == "Succeeded", status.get("message")
    assert (status["attempts"], status["restartCount"], len(status["restarts"])) == (2, 1, 1), status
    rayjob = run_jobs.ray("rayjobs", "replace")
    assert rayjob is None or rayjob["metadata"]["annotations"]["rlplace.io/attempt"] == "2"
    restart = status["restarts"][-1]
    # Back up, the operator names the loss from what is left: the deleted pod (its kubelet's events, when it saw
    # them) or the launcher's line naming the actor rank that died, on the pod's node.
    assert restart["attempt"] == 2 and restart["reason"] in ("PodDeleted", "WorkerDied"), restart
    named = (
        f"worker pod '{trainer.metadata.name}'" in restart["message"] or "component 'actor' rank" in restart["message"]
    )
    assert named and f"node '{trainer.spec.node_name}'" in restart["message"], restart
    assert len(restart["message"]) <= 300, restart
    assert condition(status, "BindingVerified").get("status") == "True"  # attempt 2 verified its own binding
    summary = summary_line(kubeconfig, run_jobs.namespace, "replace")
    # summary: attempt 2 ran <n> steps (<first>-<STEPS>), resumed from step <s>, repeated <r>
    assert summary.startswith("summary: attempt 2 "), summary
    resumed = int(summary.split("resumed from step ")[1].split(",")[0])
    repeated = int(summary.split("repeated ")[1].split()[0])
    assert resumed >= EVERY and resumed % EVERY == 0, summary
    assert repeated <= EVERY, summary  # at most one checkpoint interval done twice
    assert events(run_jobs, "replace", "Restarting")
    assert sorted(set(steps_seen(log))) == steps_seen(log)  # attempt 1: every step once, in order


@pytest.fixture
def rollout_pair(k8s: client.ApiClient, real_nodes: list[str]) -> Iterator[str]:  # noqa: F811
    """A NodeGroup of the two real GPU nodes (real-4090-0 first: both are rank 0, then by name), every node
    uncordoned afterwards."""
    custom, core = client.CustomObjectsApi(k8s), client.CoreV1Api(k8s)
    name = f"rollout-pair-{uuid.uuid4().hex[:5]}"
    selector = {"matchExpressions": [{"key": "rlplace.io/real-gpu-type", "operator": "In", "values": ["a800", "4090"]}]}
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeGroup", "metadata": {"name": name}}
    custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", {**body, "spec": {"nodeSelector": selector}})

    def ready() -> bool:
        status = custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", name).get("status") or {}
        return status.get("readyNodes") == 2

    try:
        wait_for(ready, 60, f"NodeGroup {name} with 2 ready nodes")
        yield name
    finally:
        for node in ("real-4090-0", "real-a800-0"):
            core.patch_node(node, {"spec": {"unschedulable": None}})
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", name)


def test_a_lost_rollout_node_moves_its_ranks_to_the_other_node_of_the_group(
    run_jobs: RunJobs,  # noqa: F811
    rollout_pair: str,
    kubeconfig: str,
) -> None:
    placement = [
        {"components": "actor", "nodeGroup": "real-cpu", "placement": "0"},
        {"components": "rollout", "nodeGroup": rollout_pair, "placement": "0-3"},
    ]
    run_jobs.create(replace_job(run_jobs, "move", nodeGroups=["real-cpu", rollout_pair], componentPlacement=placement))

    first = wait_for(lambda: verified_at_step_3(run_jobs.status("move")), 300, "move verified at step 3", interval=1)
    (lost,) = rollout_nodes(first)
    run_jobs.core.patch_node(lost, {"spec": {"unschedulable": True}})
    (worker,) = [p for p in ray_pods(run_jobs, "move", "worker") if p.spec.node_name == lost]
    force_delete(run_jobs, worker)

    def moved(status: dict) -> bool:
        verified = condition(status, "BindingVerified").get("status") == "True"
        return rollout(status).get("replaced") == 4 and verified and lost not in rollout_nodes(status)

    back = watch_running(run_jobs, "move", moved, 240, "the rollout ranks moved, replaced and verified")
    (there,) = rollout_nodes(back)
    assert there != lost and events(run_jobs, "move", "RanksMoved"), back
    configmap = run_jobs.core.read_namespaced_config_map("move-placement", run_jobs.namespace)
    assert f"{there} " in configmap.data["node-ranks"] and lost not in configmap.data["node-ranks"]
    status = wait_ended(run_jobs, "move", 300)
    assert status["phase"] == "Succeeded" and status["attempts"] == 1, status
    log = driver_log(kubeconfig, run_jobs.namespace, "move")
    assert steps_seen(log) == list(range(1, STEPS + 1))


def rollout_nodes(status: dict) -> list[str]:
    components = (status.get("placement") or {}).get("components") or []
    return next(c["nodes"] for c in components if c["name"] == "rollout")


# -- under Kueue: the node a lost rollout replica moves to is the one Kueue grants --------------------------------

#: Both real GPU nodes carry it while the Kueue test runs: one ResourceFlavor's nodes, and a NoSchedule taint only
#: the job's workers tolerate (the head and the submitter then run on the CPU node, which nothing here takes away).
PAIR_LABEL = "rlplace.io/e2e-kueue-pair"
PAIR = ("real-4090-0", "real-a800-0")
PAIR_QUEUE = "rl-e2e-pair"


@pytest.fixture
def kueue_pair(
    kubeconfig: str,
    run_jobs: RunJobs,  # noqa: F811
    rollout_pair: str,
    kueue_queues: None,  # noqa: F811
) -> Iterator[str]:
    """LocalQueue `pair` of ClusterQueue rl-e2e-pair: flavor e2e-pair (the two real GPU nodes, labelled and
    tainted for it) with one node's GPUs (8), so Kueue grants the rollout one of them and may swap it for the
    other, and flavor e2e-real-cpu (the real CPU node) for the actor."""
    for node in PAIR:
        kubectl(kubeconfig, "label", "node", node, f"{PAIR_LABEL}=true", "--overwrite")
        kubectl(kubeconfig, "taint", "node", node, f"{PAIR_LABEL}=true:NoSchedule", "--overwrite")
    resource_flavor(kubeconfig, "e2e-pair", {PAIR_LABEL: "true"})
    resource_flavor(kubeconfig, "e2e-real-cpu", {"rlplace.io/real-cpu-only": "true"})
    cluster_queue(kubeconfig, PAIR_QUEUE, {"e2e-real-cpu": 0, "e2e-pair": 8})
    local_queue(kubeconfig, run_jobs.namespace, "pair", PAIR_QUEUE)
    try:
        yield "pair"
    finally:
        for node in PAIR:
            run_tool("kubectl", kubeconfig, "taint", "node", node, f"{PAIR_LABEL}:NoSchedule-", check=False)
            kubectl(kubeconfig, "label", "node", node, f"{PAIR_LABEL}-")


def pair_gpus_used(run_jobs: RunJobs) -> int:  # noqa: F811
    """The GPUs of flavor e2e-pair that ClusterQueue rl-e2e-pair counts as used now."""
    body = run_jobs.custom.get_cluster_custom_object(*KUEUE, "clusterqueues", PAIR_QUEUE)
    for flavor in (body.get("status") or {}).get("flavorsUsage") or []:
        if flavor["name"] == "e2e-pair":
            used = {r["name"]: r.get("total", 0) for r in flavor.get("resources") or []}
            return int(used.get("nvidia.com/gpu", 0))
    return 0


def test_under_kueue_a_lost_rollout_node_moves_its_ranks_to_the_node_kueue_grants(
    run_jobs: RunJobs,  # noqa: F811
    rollout_pair: str,
    kueue_pair: str,
    kubeconfig: str,
    k8s: client.ApiClient,
) -> None:
    """A NoExecute taint on the rollout's node while the other node of the flavor is cordoned: Kueue has no node
    to grant, keeps the Workload admitted (TASFailedNodeReplacementFailFast off, e2e/cluster/kueue-config.yaml),
    and the job runs on without its rollout, saying it waits for Kueue. Uncordoned, the other node is granted
    inside the admitted Workload and the rollout's ranks move to it while the job runs (attempt 1, no restart),
    their binding verified there; the flavor's 8 GPUs of quota are never passed."""
    placement = [
        {"components": "actor", "nodeGroup": "real-cpu", "placement": "0"},
        {"components": "rollout", "nodeGroup": rollout_pair, "placement": "0-3"},
    ]
    body = replace_job(run_jobs, "kmove", nodeGroups=["real-cpu", rollout_pair], componentPlacement=placement)
    body["metadata"]["labels"] = {QUEUE_LABEL: kueue_pair}
    body["spec"]["pods"] = {"workers": {"tolerations": [{"key": PAIR_LABEL, "operator": "Exists"}]}}
    run_jobs.create(body)

    first = wait_for(lambda: verified_at_step_3(run_jobs.status("kmove")), 300, "kmove verified at step 3", interval=1)
    (lost,) = rollout_nodes(first)
    (other,) = set(PAIR) - {lost}
    (workload,) = workloads(run_jobs, "kmove")
    assert granted_hosts(workload)[rollout_pair] == [lost], granted_hosts(workload)
    used = [pair_gpus_used(run_jobs)]
    kubectl(kubeconfig, "cordon", other)
    kubectl(kubeconfig, "taint", "node", lost, "rlplace.io/e2e-broken=true:NoExecute")
    try:

        def waits_for_kueue(status: dict) -> bool:
            used.append(pair_gpus_used(run_jobs))
            return any("waiting for Kueue to replace it" in entry.get("why", "") for entry in lost_entries(status))

        waiting = watch_running(run_jobs, "kmove", waits_for_kueue, 120, "the job running on, waiting for Kueue")
        ready = condition(waiting, "RayClusterReady")
        assert (ready["status"], ready["reason"]) == ("False", "Replacing"), ready
        (workload,) = workloads(run_jobs, "kmove")
        evicted = [c for c in workload["status"].get("conditions") or [] if c["type"] == "Evicted"]
        assert not any(c["status"] == "True" for c in evicted), evicted
        assert granted_hosts(workload)[rollout_pair] == [lost], granted_hosts(workload)
        time.sleep(3)  # Kueue retries its replacement meanwhile: still admitted, still Running, nothing restarted
        still = watch_running(run_jobs, "kmove", waits_for_kueue, 10, "still waiting for Kueue")
        assert still["attempts"] == 1 and not still.get("restarts"), still
        kubectl(kubeconfig, "uncordon", other)

        def moved(status: dict) -> bool:
            used.append(pair_gpus_used(run_jobs))
            verified = condition(status, "BindingVerified").get("status") == "True"
            return rollout(status).get("replaced") == 4 and verified and lost not in rollout_nodes(status)

        back = watch_running(run_jobs, "kmove", moved, 240, "the rollout ranks moved to Kueue's node and verified")
        assert rollout_nodes(back) == [other], back["placement"]
        (workload,) = workloads(run_jobs, "kmove")
        assert granted_hosts(workload)[rollout_pair] == [other], granted_hosts(workload)
        assert back["attempts"] == 1 and not back.get("restarts"), back
        assert events(run_jobs, "kmove", "RanksMoved")
        assert max(used) <= 8, used  # the swap is inside the admitted Workload: never two nodes' GPUs
        assert Checker().check(ClusterState.read(k8s)) == []
        # Every step so far once and in order (the run goes on to its end as the cordon test's does; not waited
        # for here, the suite's minutes are counted).
        seen = steps_seen(driver_log(kubeconfig, run_jobs.namespace, "kmove"))
        assert seen == list(range(1, len(seen) + 1)) and len(seen) >= 3, seen
    finally:
        run_tool("kubectl", kubeconfig, "uncordon", other, check=False)
        run_tool("kubectl", kubeconfig, "taint", "node", lost, "rlplace.io/e2e-broken:NoExecute-", check=False)
