"""The invariants of rlplace's status and holdings, checked on a live cluster: each violation one line.

    .venv/bin/python benchmarks/invariants.py [--kubeconfig F] [--watch SECONDS]

A library first (tests/e2e/test_chaos.py and benchmarks/chaos.py use it): `ClusterState.read(api)` reads the
cluster once, `Checker.check(state)` says what is wrong in it. The Checker keeps what it saw of each job between
looks, for what only a sequence shows (a phase moving back, an attempt or an iteration going down, a driver
submitted twice for one attempt, an object outliving its time).

The rules (docs/status-truth.md):
- gpu-twice: no GPU given twice. Whole nodes are held by one job (the rlplace.io/nodes annotation of its RayCluster);
  the pods bound to a node never ask more extended units than it has; no device is in two allocated claims, and a
  job's claims hold exactly the devices its status.gpuClaims names; a ClusterQueue's usage never passes its quota.
- orphan: every RayJob, RayCluster, ConfigMap, ResourceClaimTemplate and Workload of rlplace's has a live RLJob of
  the same uid (and a RayJob, of its current attempt); a finished job's RayCluster is gone within its TTL, and its
  Workload holds no quota.
- silent: a job not Running, finished or Suspended has a condition naming what it waits for, written within 60 s
  of its creation or its spec's change.
- lie: a Running job's planned pods all run, Ready, on its planned nodes, and run nowhere else (once the operator
  had 30 s to see a change: of its pods, or of its spec, which may move what is planned; a node whose Replace
  ranks status.components names as lost is excused); a job placed (Provisioning or Running) names nothing it waits for and no queue
  position; a phase moves back only with a condition that says why; the attempt never goes down.
- driver-twice, progress: one driver per attempt (one RayJob whose driver KubeRay submitted); the reported
  iteration never goes down within one attempt.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GROUP, VERSION = "rlplace.io", "v1alpha1"
JOB_LABEL = "rlplace.io/job"
MANAGED = "app.kubernetes.io/managed-by=rlplace"
NODES_ANNOTATION = "rlplace.io/nodes"
ATTEMPT_ANNOTATION = "rlplace.io/attempt"
FINISHED = ("Succeeded", "Failed")
#: Phases in the order a job goes through them: a move to a lower one is a move back.
ORDER = {"Pending": 0, "Queued": 0, "Provisioning": 1, "Running": 2, "Suspended": 0, "Succeeded": 3, "Failed": 3}
#: How long an object may outlive what ended it (a deletion under way, a watch that lags) before it is an orphan.
GRACE_SECONDS = 60.0
#: How long a new or changed job may go without a condition that says what it waits for.
SILENT_SECONDS = 60.0
#: How long a Running job's status may trail its pods (a pod that stopped being Ready, a worker gone) before it
#: is a lie: the operator learns of a pod's change by a watch and a look, not at the instant it happens.
REACTION_SECONDS = 30.0


def _time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _units(value: Any) -> int:
    text = str(value)
    return int(text) if text.isdigit() else 0


def _key(body: Mapping[str, Any]) -> str:
    meta = body["metadata"]
    return f"{meta.get('namespace')}/{meta['name']}" if meta.get("namespace") else meta["name"]


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


@dataclass
class ClusterState:
    """What the checker reads, at one moment (API JSON as `kubectl get -o json` items)."""

    now: dt.datetime
    rljobs: list[dict] = field(default_factory=list)
    rayclusters: list[dict] = field(default_factory=list)
    rayjobs: list[dict] = field(default_factory=list)
    configmaps: list[dict] = field(default_factory=list)
    claim_templates: list[dict] = field(default_factory=list)
    claims: list[dict] = field(default_factory=list)
    workloads: list[dict] = field(default_factory=list)
    cluster_queues: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)

    @classmethod
    def read(cls, api: Any) -> ClusterState:
        """Everything, from the API server behind `api` (a kubernetes.client.ApiClient)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)

        def items(group: str, version: str, plural: str, **selector: str) -> list[dict]:
            try:
                return list(custom.list_cluster_custom_object(group, version, plural, **selector).get("items") or [])
            except ApiException as err:
                if err.status == 404:  # not served here (no Kueue, no DRA)
                    return []
                raise

        def core_items(call: Any, **selector: str) -> list[dict]:
            return list(api.sanitize_for_serialization(call(**selector)).get("items") or [])

        return cls(
            now=dt.datetime.now(dt.UTC),
            rljobs=items(GROUP, VERSION, "rljobs"),
            rayclusters=items("ray.io", "v1", "rayclusters", label_selector=MANAGED),
            rayjobs=items("ray.io", "v1", "rayjobs", label_selector=MANAGED),
            configmaps=core_items(core.list_config_map_for_all_namespaces, label_selector=MANAGED),
            claim_templates=items("resource.k8s.io", "v1", "resourceclaimtemplates", label_selector=MANAGED),
            claims=items("resource.k8s.io", "v1", "resourceclaims"),
            workloads=items("kueue.x-k8s.io", "v1beta2", "workloads", label_selector=MANAGED),
            cluster_queues=items("kueue.x-k8s.io", "v1beta2", "clusterqueues"),
            pods=core_items(core.list_pod_for_all_namespaces),
            nodes=core_items(core.list_node),
        )


@dataclass
class _Seen:
    """What the checker saw of one job (by uid) at its last look."""

    phase: str | None = None
    attempt: int = 0
    generation: int | None = None
    changed_at: dt.datetime | None = None
    """When the job was created or its spec changed, as far as the checker saw."""
    iterations: dict[int, int] = field(default_factory=dict)
    """Attempt -> the highest iteration reported."""
    rayjobs: dict[int, set[str]] = field(default_factory=dict)
    """Attempt -> uids of the RayJobs seen for it."""
    finished_at: dt.datetime | None = None
    lying_since: dt.datetime | None = None
    """Since when its Running status has disagreed with its pods, at every look since."""


#: KubeRay's deployment states of a RayJob whose driver was submitted (its submitter made, or its job ended).
SUBMITTED_STATES = frozenset({"Running", "Complete", "Failed", "Retrying"})


def submitted(rayjob: dict) -> bool:
    """Whether KubeRay submitted the RayJob's driver (a RayJob whose Ray cluster never came up ran none)."""
    status = rayjob.get("status") or {}
    return bool(status.get("jobStatus")) or status.get("jobDeploymentStatus") in SUBMITTED_STATES


class Checker:
    """Checks a sequence of ClusterStates; `check` returns this state's violations, one line each."""

    def __init__(
        self,
        grace_seconds: float = GRACE_SECONDS,
        silent_seconds: float = SILENT_SECONDS,
        reaction_seconds: float = REACTION_SECONDS,
    ) -> None:
        self.grace = dt.timedelta(seconds=grace_seconds)
        self.silent = dt.timedelta(seconds=silent_seconds)
        self.reaction = dt.timedelta(seconds=reaction_seconds)
        self.seen: dict[str, _Seen] = {}
        #: (kind, namespace/name, uid) -> when it was first seen orphaned (or a claim seen holding other devices).
        self.orphaned_since: dict[tuple[str, str, str], dt.datetime] = {}
        self.claim_mismatches: set[tuple[str, str, str]] = set()

    def check(self, state: ClusterState) -> list[str]:
        found: list[str] = []
        found += self._gpus(state)
        found += self._quota(state)
        found += self._orphans(state)
        for job in state.rljobs:
            found += self._job(state, job)
        live = {job["metadata"]["uid"] for job in state.rljobs}
        self.seen = {uid: seen for uid, seen in self.seen.items() if uid in live}
        return found

    # -- no GPU given twice -----------------------------------------------------------------------------------

    def _gpus(self, state: ClusterState) -> list[str]:
        found = []
        held: dict[str, list[str]] = {}
        for cluster in state.rayclusters:
            if cluster["metadata"].get("deletionTimestamp"):
                continue
            nodes = (cluster["metadata"].get("annotations") or {}).get(NODES_ANNOTATION, "")
            for node in filter(None, nodes.split(",")):
                held.setdefault(node, []).append(_key(cluster))
        found += [
            f"gpu-twice: node {node} is held whole by RayClusters {', '.join(sorted(owners))}"
            for node, owners in sorted(held.items())
            if len(owners) > 1
        ]
        allocatable = {n["metadata"]["name"]: n.get("status", {}).get("allocatable") or {} for n in state.nodes}
        asked: dict[tuple[str, str], list[tuple[str, int]]] = {}
        for pod in state.pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or (pod.get("status") or {}).get("phase") in FINISHED:
                continue
            for container in (pod.get("spec") or {}).get("containers") or []:
                resources = container.get("resources") or {}
                for resource, value in {**(resources.get("limits") or {}), **(resources.get("requests") or {})}.items():
                    if "/" in resource and _units(value):
                        asked.setdefault((node, resource), []).append((_key(pod), _units(value)))
        for (node, resource), uses in sorted(asked.items()):
            total, have = sum(u for _, u in uses), _units(allocatable.get(node, {}).get(resource, 0))
            if total > have:
                names = ", ".join(p for p, _ in uses)
                found.append(f"gpu-twice: node {node}: pods {names} ask {total} {resource} of its {have}")
        devices: dict[tuple[str, str, str], list[str]] = {}
        for claim in state.claims:
            results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
            for result in results:
                if not result.get("adminAccess"):
                    devices.setdefault((result["driver"], result["pool"], result["device"]), []).append(_key(claim))
        found += [
            f"gpu-twice: device {'/'.join(device)} is allocated to claims {', '.join(sorted(claims))}"
            for device, claims in sorted(devices.items())
            if len(claims) > 1
        ]
        return found + self._claims(state)

    def _claims(self, state: ClusterState) -> list[str]:
        """A job's allocated claims hold exactly the devices its status.gpuClaims names on their node (a claim of an
        earlier attempt being deleted gets the grace of an orphan)."""
        found = []
        jobs = {(j["metadata"]["namespace"], j["metadata"]["name"]): j for j in state.rljobs}
        mismatched: set[tuple[str, str, str]] = set()
        for claim in state.claims:
            meta = claim["metadata"]
            job = jobs.get((meta.get("namespace"), (meta.get("labels") or {}).get(JOB_LABEL)))
            results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
            if job is None or not results:
                continue
            wanted = {c["node"]: set(c.get("devices") or []) for c in (job.get("status") or {}).get("gpuClaims") or []}
            for pool in {r["pool"] for r in results}:
                held = {r["device"] for r in results if r["pool"] == pool}
                if wanted.get(pool) == held:
                    continue
                key = ("claim", _key(claim), pool)
                mismatched.add(key)
                since = self.orphaned_since.setdefault(key, state.now)
                if state.now - since >= self.grace:
                    said = ", ".join(sorted(wanted.get(pool, set()))) or "none"
                    found.append(
                        f"gpu-twice: claim {_key(claim)} holds {', '.join(sorted(held))} on {pool}, its RLJob "
                        f"{_key(job)} names {said} there"
                    )
        self.claim_mismatches = mismatched
        return found

    def _quota(self, state: ClusterState) -> list[str]:
        found = []
        for queue in state.cluster_queues:
            quota: dict[tuple[str, str], int] = {}
            for group in (queue.get("spec") or {}).get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    for resource in flavor.get("resources") or []:
                        quota[(flavor["name"], resource["name"])] = _quantity(resource.get("nominalQuota", 0))
            for flavor in (queue.get("status") or {}).get("flavorsUsage") or []:
                for resource in flavor.get("resources") or []:
                    key = (flavor["name"], resource["name"])
                    used = _quantity(resource.get("total", 0)) - _quantity(resource.get("borrowed", 0))
                    if key in quota and used > quota[key]:
                        found.append(
                            f"quota: ClusterQueue {queue['metadata']['name']} uses {used:g} {key[1]} of flavor "
                            f"{key[0]}, its quota is {quota[key]:g}"
                        )
        return found

    # -- no orphan ----------------------------------------------------------------------------------------------

    def _orphans(self, state: ClusterState) -> list[str]:
        jobs = {job["metadata"]["uid"]: job for job in state.rljobs}
        found = []
        now_orphaned: set[tuple[str, str, str]] = set()
        children = [
            ("RayCluster", state.rayclusters),
            ("RayJob", state.rayjobs),
            ("ConfigMap", state.configmaps),
            ("ResourceClaimTemplate", state.claim_templates),
            ("Workload", state.workloads),
        ]
        for kind, bodies in children:
            for body in bodies:
                why = self._orphan_of(kind, body, jobs, state)
                if why is None:
                    continue
                key = (kind, _key(body), body["metadata"].get("uid", ""))
                now_orphaned.add(key)
                since = self.orphaned_since.setdefault(key, state.now)
                if state.now - since >= self.grace:
                    found.append(f"orphan: {kind} {_key(body)} {why} (for {(state.now - since).total_seconds():.0f} s)")
        kept = now_orphaned | self.claim_mismatches
        self.orphaned_since = {k: v for k, v in self.orphaned_since.items() if k in kept}
        return found

    def _orphan_of(
        self, kind: str, body: Mapping[str, Any], jobs: Mapping[str, Mapping[str, Any]], state: ClusterState
    ) -> str | None:
        """Why a child of rlplace's has no business existing (None: it has)."""
        owners = [ref.get("uid") for ref in body["metadata"].get("ownerReferences") or [] if ref.get("kind") == "RLJob"]
        if kind == "RayCluster" and not owners:
            return None  # a RayJob's RayCluster: its RayJob is checked
        job = next((jobs[uid] for uid in owners if uid in jobs), None)
        if job is None:
            return "has no live RLJob of its owner's uid"
        status = job.get("status") or {}
        if kind == "RayJob":
            made_for = (body["metadata"].get("annotations") or {}).get(ATTEMPT_ANNOTATION)
            current = int(status.get("attempts") or 1)
            restarts = status.get("restarts") or []
            in_place = 0
            for restart in reversed(restarts):
                if not restart.get("inPlace"):
                    break
                in_place += 1
            if made_for and made_for.isdigit() and int(made_for) < max(1, current - in_place):
                return f"is of attempt {made_for}, its job runs attempt {current}"
        if kind == "Workload" and status.get("phase") in FINISHED:
            reserved = _condition(body.get("status") or {}, "QuotaReserved") or {}
            finished = _condition(body.get("status") or {}, "Finished") or {}
            if reserved.get("status") == "True" and finished.get("status") != "True":
                return f"holds quota though its RLJob {_key(job)} is {status['phase']}"
        if kind == "RayCluster" and status.get("phase") in FINISHED and job["spec"].get("entrypoint"):
            ended = _time(status.get("driverEndTime"))
            ttl = ((job["spec"].get("run") or {}).get("ttlSecondsAfterFinished", 60)) or 0
            if ended is not None and state.now - ended > dt.timedelta(seconds=ttl):
                return f"outlives its RLJob {_key(job)}, {status['phase']} at {status['driverEndTime']} (TTL {ttl} s)"
        return None

    # -- each job: silent, lies, attempts, drivers, progress ---------------------------------------------------------

    def _job(self, state: ClusterState, job: Mapping[str, Any]) -> list[str]:
        meta, status = job["metadata"], job.get("status") or {}
        name, uid = _key(job), meta["uid"]
        seen = self.seen.setdefault(uid, _Seen(changed_at=_time(meta.get("creationTimestamp"))))
        phase = status.get("phase")
        found = []
        if seen.generation is not None and meta.get("generation") != seen.generation:
            seen.changed_at, seen.iterations, seen.attempt = state.now, {}, 0  # a new spec starts over
        seen.generation = meta.get("generation")
        if (
            phase not in ("Running", "Suspended", *FINISHED)
            and state.now - (seen.changed_at or state.now) > self.silent
        ):
            waiting = [c for c in status.get("conditions") or [] if c.get("status") == "False" and c.get("message")]
            if not waiting or (phase == "Queued" and not status.get("waitingFor")):
                found.append(
                    f"silent: RLJob {name} is {phase or 'without a phase'} with no condition saying what it waits for"
                )
        lies = self._running(state, job) if phase == "Running" else []
        if not lies:
            seen.lying_since = None
        elif seen.lying_since is None:
            seen.lying_since = state.now
        # The operator's reaction counts from the disagreement or from the last spec change, whichever came later:
        # a spec changed every few seconds (replicas patched in a stream) moves the target each time.
        if lies and state.now - max(seen.lying_since, seen.changed_at or seen.lying_since) >= self.reaction:
            found += lies
        if phase in ("Provisioning", "Running") and (status.get("waitingFor") or status.get("queuePosition")):
            found.append(f"lie: RLJob {name} is {phase} but still says it waits for {status.get('waitingFor')!r}")
        if seen.phase is not None and phase is not None and ORDER.get(phase, 0) < ORDER.get(seen.phase, 0):
            said = [c for c in status.get("conditions") or [] if c.get("status") == "False" and c.get("reason")]
            if not said:
                found.append(f"lie: RLJob {name} moved from {seen.phase} back to {phase} with no condition saying why")
        attempt = int(status.get("attempts") or 0)
        if attempt < seen.attempt and phase not in FINISHED:
            found.append(f"lie: RLJob {name}'s attempt went down from {seen.attempt} to {attempt}")
        for rayjob in state.rayjobs:
            if not submitted(rayjob):
                continue  # a RayJob whose cluster never came up ran no driver (its job gave the nodes back)
            if any(ref.get("uid") == uid for ref in rayjob["metadata"].get("ownerReferences") or []):
                made_for = (rayjob["metadata"].get("annotations") or {}).get(ATTEMPT_ANNOTATION, "1")
                uids = seen.rayjobs.setdefault(int(made_for) if made_for.isdigit() else 1, set())
                new = rayjob["metadata"].get("uid", "")
                if new not in uids and uids:  # named when it happens, not at every look after
                    found.append(
                        f"driver-twice: RLJob {name}'s attempt {made_for} was submitted by {len(uids) + 1} RayJobs"
                    )
                uids.add(new)
        iteration = (status.get("progress") or {}).get("iteration")
        if iteration is not None:
            best = seen.iterations.get(attempt, -1)
            if iteration < best:
                found.append(f"progress: RLJob {name}'s attempt {attempt} reported iteration {iteration} after {best}")
            seen.iterations[attempt] = max(best, iteration)
        seen.phase, seen.attempt = phase, max(seen.attempt, attempt)
        return found

    def _running(self, state: ClusterState, job: Mapping[str, Any]) -> list[str]:
        """A Running job: its planned pods run, Ready, on its planned nodes, and none runs elsewhere."""
        name, status = _key(job), job.get("status") or {}
        planned = {n for c in (status.get("placement") or {}).get("components") or [] for n in c.get("nodes") or []}
        cluster = status.get("rayCluster")
        pods = [
            p
            for p in state.pods
            if p["metadata"].get("namespace") == job["metadata"]["namespace"]
            and (p["metadata"].get("labels") or {}).get("ray.io/cluster") == cluster
            and not p["metadata"].get("deletionTimestamp")
        ]
        workers = [p for p in pods if (p["metadata"].get("labels") or {}).get("ray.io/node-type") == "worker"]
        heads = [p for p in pods if (p["metadata"].get("labels") or {}).get("ray.io/node-type") == "head"]
        found = []
        if not heads or not all(_running_and_ready(p) for p in heads):
            found.append(f"lie: RLJob {name} is Running but its Ray head pod is not running")
        running = {p["spec"].get("nodeName") for p in workers if _running_and_ready(p)}
        # Ranks of Replace components the status names as lost: the job says it runs on without them.
        said_lost = {e.get("node") for c in status.get("components") or [] for e in c.get("lost") or []}
        missing = sorted(planned - running - said_lost)
        if missing:
            found.append(f"lie: RLJob {name} is Running but no worker pod runs on planned node {', '.join(missing)}")
        elsewhere = sorted({p["spec"].get("nodeName") or "(unbound)" for p in workers} - planned)
        if elsewhere:
            found.append(f"lie: RLJob {name}'s worker pods run on {', '.join(elsewhere)}, not in status.placement")
        return found


def _running_and_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    ready = _condition(status, "Ready") or {}
    return status.get("phase") == "Running" and ready.get("status") == "True"


def _quantity(value: Any) -> float:
    from kubernetes.utils.quantity import parse_quantity

    return float(parse_quantity(str(value)))


def check_once(api: Any, checker: Checker | None = None) -> list[str]:
    """The violations of the cluster behind `api` now."""
    return (checker or Checker()).check(ClusterState.read(api))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--watch", type=float, default=0.0, help="look again every this many seconds, until Ctrl-C")
    args = parser.parse_args(argv)
    from kubernetes import client, config

    try:
        config.load_kube_config(args.kubeconfig)
    except (config.ConfigException, OSError) as err:
        print(f"error: no cluster to check: {err}", file=sys.stderr)
        return 2
    api, checker = client.ApiClient(), Checker()
    while True:
        try:
            state = ClusterState.read(api)
        except Exception as err:  # the API's errors, the connection's: one line, not a traceback
            print(
                f"error: reading the cluster failed: {str(err).splitlines()[0] if str(err) else type(err).__name__}",
                file=sys.stderr,
            )
            return 2
        violations = checker.check(state)
        for line in violations:
            print(line)
        print(f"{len(violations)} violations at {dt.datetime.now(dt.UTC):%H:%M:%S}", file=sys.stderr)
        if not args.watch:
            return 1 if violations else 0
        time.sleep(args.watch)


if __name__ == "__main__":
    sys.exit(main())
