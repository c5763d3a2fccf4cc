"""Faults while a mixed load runs on the local cluster, and whether rlplace's status stays true through them.

    .venv/bin/python benchmarks/chaos.py [--faults 30] [--seed 1] [--kinds operator-kill,etcd-pause,...]

The cluster is the one in KUBECONFIG when it is a local one of `make cluster-up` (its state dir in
RLPLACE_E2E_DIR, default .e2e), else one started in .e2e/chaos (and stopped afterwards). The operator runs as
users run it (Helm, the chart's Deployment on a real node). The load (on the real nodes, whose pods really run):
jobs of rlplace's queue (two resumable jobs for one node: one waits), Kueue jobs (a low-priority one preempted by
a high-priority one while the faults come), a job on the DRA node's GPUs, an RLinf job, and a job the closed loop
re-places. New jobs of each kind are submitted as the earlier ones end, until the faults are done.

Each fault in turn, each several times, at random moments: the operator killed (-9; its pod's container is
restarted by the kubelet), KubeRay's operator and Kueue's controller killed and restarted, kube-apiserver
restarted, etcd paused, kube-scheduler killed and restarted, a real node's kubelet stopped then started, its
containerd killed and started, the DRA driver restarted, a Helm upgrade of the operator. After each one the
invariant checker (invariants.py) looks until every job is back on track (no violation, every job that ran runs
again or has ended); at the end every job must have reached its outcome (Succeeded, or Failed with the cause
named). Prints the table of docs/status-truth.md: fault, times, jobs affected, violations, time back on track.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from rlplace_operator.kube import ROLE_LABEL

from _harness import REPO, percentile, start_cluster, stop_cluster
from invariants import Checker, ClusterState
from rlplace_fixtures import OPERATOR_POD_SELECTOR, RELEASE, RELEASE_NAMESPACE, images_env, install_chart, kubectl

GROUP, VERSION = "rlplace.io", "v1alpha1"
QUEUE_LABEL, PRIORITY_LABEL = "kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"
#: Where the jobs keep their checkpoints: a host directory every real node sees (they share the host's /var/tmp).
CHECKPOINTS = Path("/var/tmp/rlplace-chaos")
#: How long a fault's effects may take to pass before the job states are read as they are.
RECOVERY_CAP_SECONDS = 300.0
#: Seconds between two looks of the checker while a fault's effects pass.
LOOK_SECONDS = 2.0
FINISHED = ("Succeeded", "Failed")


# -- the cluster and its components ---------------------------------------------------------------------------


@dataclasses.dataclass
class Cluster:
    """The local cluster the faults hit: its kubeconfig and state dir (e2e/cluster/component.sh's)."""

    kubeconfig: str
    e2e_dir: Path
    api: client.ApiClient = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.api = config.new_client_from_config(config_file=self.kubeconfig)

    def component(self, verb: str, *args: str) -> str:
        """e2e/cluster/component.sh VERB ARGS on this cluster; its standard output."""
        env = {**os.environ, "RLPLACE_E2E_DIR": str(self.e2e_dir)}
        command = ["bash", str(REPO / "e2e/cluster/component.sh"), verb, *args]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"component.sh {verb} {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def revive(self) -> list[str]:
        """Start what has exited, as the cluster's supervisor would (component.sh revive); the names started."""
        return self.component("revive").split()

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return kubectl(self.kubeconfig, *args, stdin=stdin)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until the API server answers /readyz again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.CalledProcessError):
                if self.kubectl("get", "--raw", "/readyz").strip() == "ok":
                    return
            time.sleep(1)
        raise TimeoutError("the API server did not answer /readyz")

    def real_nodes(self) -> list[str]:
        names = self.kubectl("get", "nodes", "-l", "rlplace.io/real-node=true", "-o", "name").split()
        return [n.removeprefix("node/") for n in names]

    def busiest_real_node(self) -> str:
        """The real node most of rlplace's Ray pods run on (a fault there hits the most jobs)."""
        pods = json.loads(self.kubectl("get", "pods", "-A", "-l", "rlplace.io/job", "-o", "json"))["items"]
        nodes = [p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName") in self.real_nodes()]
        return max(set(nodes), key=nodes.count) if nodes else self.real_nodes()[0]


def operator_pids(cluster: Cluster) -> tuple[list[str], list[int]]:
    """The acting operator's pod (the leader; every operator pod when none is labelled so) and the host PIDs of its
    container's processes (found by the pod's uid in their cgroup: other local clusters run operators of their own
    on this host)."""
    pods = json.loads(
        cluster.kubectl("get", "pods", "-n", RELEASE_NAMESPACE, "-l", OPERATOR_POD_SELECTOR, "-o", "json")
    )["items"]
    leaders = [p for p in pods if p["metadata"].get("labels", {}).get(ROLE_LABEL) == "leader"]
    pods = leaders or pods
    uids = [p["metadata"]["uid"] for p in pods]
    marks = {u for uid in uids for u in (uid, uid.replace("-", "_"))}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cgroup = (entry / "cgroup").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(mark in cgroup for mark in marks) and "rlplace" in cmdline:
                found.append(int(entry.name))
    return [p["metadata"]["name"] for p in pods], found


# -- the faults: each injects, lifts, and says what it did --------------------------------------------------------


def operator_kill(cluster: Cluster, rng: random.Random) -> str:
    pods, pids = operator_pids(cluster)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    return (
        f"killed the leading operator's processes {pids} in {', '.join(pods)} (-9): its restarted container takes "
        "the Lease back, or the standby once the Lease expires"
    )


def kuberay_kill(cluster: Cluster, rng: random.Random) -> str:
    cluster.component("restart", "ray-operator")
    return "killed KubeRay's operator (-9) and started it again"


def kueue_kill(cluster: Cluster, rng: random.Random) -> str:
    cluster.component("restart", "kueue")
    return "killed Kueue's controller (-9) and started it again"


def apiserver_restart(cluster: Cluster, rng: random.Random) -> str:
    cluster.component("restart", "kube-apiserver")
    cluster.wait_ready()
    return "restarted kube-apiserver"


def etcd_pause(cluster: Cluster, rng: random.Random, seconds: int = 30) -> str:
    cluster.component("pause", "etcd", str(seconds))
    cluster.wait_ready()
    return f"paused etcd for {seconds} s"


def scheduler_kill(cluster: Cluster, rng: random.Random) -> str:
    cluster.component("restart", "kube-scheduler")
    return "killed kube-scheduler (-9) and started it again"


def kubelet_stop(cluster: Cluster, rng: random.Random, seconds: int = 60) -> str:
    node = cluster.busiest_real_node()
    cluster.component("stop", f"kubelet@{node}")
    time.sleep(seconds)
    cluster.component("start", f"kubelet@{node}")
    return f"stopped {node}'s kubelet for {seconds} s"


def containerd_kill(cluster: Cluster, rng: random.Random) -> str:
    node = cluster.busiest_real_node()
    cluster.component("kill", f"containerd@{node}")
    time.sleep(5)  # what a service manager waits before it starts a crashed daemon again
    cluster.component("start", f"containerd@{node}")
    return f"killed {node}'s containerd (-9), started it 5 s later"


def dra_driver_restart(cluster: Cluster, rng: random.Random) -> str:
    nodes = [n for n in cluster.real_nodes() if "dra" in n]
    cluster.component("restart", f"dra-example-kubeletplugin@{nodes[0]}")
    return f"killed the DRA driver of {nodes[0]} (-9) and started it again"


def helm_upgrade(cluster: Cluster, rng: random.Random) -> str:
    stamp = str(rng.randrange(1 << 30))
    with contextlib.suppress(subprocess.CalledProcessError):
        subprocess.run(
            [str(REPO / ".e2e/bin/helm"), "--kubeconfig", cluster.kubeconfig, "upgrade", RELEASE,
             str(REPO / "charts/rlplace"), "-n", RELEASE_NAMESPACE, "--reuse-values",
             "--set-string", f"podAnnotations.chaos={stamp}", "--wait", "--timeout", "240s"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    return "upgraded the Helm release (a new operator pod replaces the old one)"


FAULTS: dict[str, Callable[[Cluster, random.Random], str]] = {
    "operator-kill": operator_kill,
    "kuberay-kill": kuberay_kill,
    "kueue-kill": kueue_kill,
    "apiserver-restart": apiserver_restart,
    "etcd-pause": etcd_pause,
    "scheduler-kill": scheduler_kill,
    "kubelet-stop": kubelet_stop,
    "containerd-kill": containerd_kill,
    "dra-driver-restart": dra_driver_restart,
    "helm-upgrade": helm_upgrade,
}


# -- the load -----------------------------------------------------------------------------------------------------


def example(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((REPO / "examples" / name).read_text()) if d]


def resumable(name: str, group: str, steps: int, namespace: str) -> dict:
    """The resumable example (synthetic steps, a checkpoint every 5) named `name` on `group`."""
    body = next(d for d in example("rljob-resumable-run.yaml") if d["kind"] == "RLJob")
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"]["nodeGroups"] = [group]
    body["spec"]["entrypoint"] = body["spec"]["entrypoint"].replace("--steps 60", f"--steps {steps}")
    directory = CHECKPOINTS / namespace / name
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o1777)
    body["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = str(directory)
    body["spec"]["checkpoint"]["preemptionGraceSeconds"] = 60
    body["spec"]["run"].update(activeDeadlineSeconds=3600, maxRestarts=20)
    return body


def kinds_of_load(namespace: str, steps: int) -> dict[str, Callable[[str], dict]]:
    """Each kind of job of the load, by name: a builder of a job of that kind named as given."""

    def queued(name: str) -> dict:
        return resumable(name, "real-a800", steps, namespace)

    def kueue(priority: str) -> Callable[[str], dict]:
        def build(name: str) -> dict:
            body = resumable(name, "real-4090", steps if priority == "rl-low" else max(4, steps // 4), namespace)
            body["metadata"]["labels"] = {QUEUE_LABEL: "chaos", PRIORITY_LABEL: priority}
            return body

        return build

    def dra(name: str) -> dict:
        body = next(d for d in example("rljob-shared-node.yaml") if d["kind"] == "RLJob")
        body["metadata"] = {"name": name, "namespace": namespace}
        body["spec"]["entrypoint"] = (
            f"python -m placement_core.launcher.demo --steps {steps} --workload synthetic --law actor=0.5 --law rollout=0.3"
        )
        body["spec"]["run"].update(activeDeadlineSeconds=3600, maxRestarts=20)
        return body

    def rlinf(name: str) -> dict:
        body = next(d for d in example("rljob-rlinf-run.yaml") if d["kind"] == "RLJob")
        body["metadata"] = {"name": name, "namespace": namespace}
        body["spec"]["run"].update(activeDeadlineSeconds=3600)
        return body

    def replace(name: str) -> dict:
        body = next(d for d in example("rljob-synthetic-replace.yaml") if d["kind"] == "RLJob")
        body["metadata"] = {"name": name, "namespace": namespace}
        body["spec"]["run"].update(activeDeadlineSeconds=3600)
        return body

    return {
        "queued": queued,
        "kueue-low": kueue("rl-low"),
        "kueue-high": kueue("rl-high"),
        "dra": dra,
        "rlinf": rlinf,
        "replace": replace,
    }


@dataclasses.dataclass
class Load:
    """Jobs of each kind kept in flight: a new one as soon as the last of its kind has ended (two for `queued`)."""

    cluster: Cluster
    namespace: str
    kinds: dict[str, Callable[[str], dict]]
    in_flight: dict[str, int]
    submitted: dict[str, str] = dataclasses.field(default_factory=dict)
    """Job name -> kind."""
    counter: int = 0
    running: bool = True

    def jobs(self) -> dict[str, dict]:
        custom = client.CustomObjectsApi(self.cluster.api)
        items = custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "rljobs").get("items") or []
        return {j["metadata"]["name"]: j for j in items}

    def top_up(self) -> None:
        if not self.running:
            return
        jobs = self.jobs()
        for kind, wanted in self.in_flight.items():
            live = [
                n
                for n, k in self.submitted.items()
                if k == kind and (jobs.get(n, {}).get("status") or {}).get("phase") not in FINISHED
            ]
            for _ in range(wanted - len(live)):
                self.counter += 1
                name = f"{kind}-{self.counter}"
                body = self.kinds[kind](name)
                client.CustomObjectsApi(self.cluster.api).create_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, "rljobs", body
                )
                self.submitted[name] = kind


def job_marks(jobs: dict[str, dict]) -> dict[str, tuple[Any, ...]]:
    """What says a job was touched: its phase, attempt, restarts and preemptions."""
    marks = {}
    for name, job in jobs.items():
        status = job.get("status") or {}
        marks[name] = (
            status.get("phase"),
            status.get("attempts"),
            len(status.get("restarts") or []),
            status.get("preemptions"),
        )
    return marks


@dataclasses.dataclass
class Result:
    kind: str
    what: str
    affected: int
    violations: list[str]
    recovery_seconds: float
    revived: list[str]


@dataclasses.dataclass
class Recovery:
    """What followed a fault: how long until every job was back on track, every violation seen from the fault's
    start until then (the checker allows the operator its reaction time), the jobs it touched and the cluster's
    components that had exited meanwhile (and were started again)."""

    seconds: float
    violations: list[str]
    touched: set[str]
    revived: list[str]
    not_back: dict[str, str] = dataclasses.field(default_factory=dict)
    """At the recovery cap: each job that ran before the fault and does not run again yet -> its phase and why."""


def look(cluster: Cluster, checker: Checker) -> list[str] | None:
    """The checker's word on the cluster now; None when the API cannot be read (a fault took it away)."""
    try:
        state = ClusterState.read(cluster.api)
    except Exception:  # whatever the client raises while the apiserver or etcd is away
        return None
    return checker.check(state)


def inject(
    cluster: Cluster, checker: Checker, fault: Callable[[Cluster, random.Random], str], rng: random.Random
) -> tuple[str, set[str]]:
    """The fault, looked at while it lasts (a kubelet stopped for a minute is when a status may lie): what it
    did and the violations seen meanwhile."""
    seen: set[str] = set()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        done = pool.submit(fault, cluster, rng)
        while not done.done():
            seen |= set(look(cluster, checker) or [])
            time.sleep(LOOK_SECONDS)
        return done.result(), seen


def recover(
    cluster: Cluster, load: Load, checker: Checker, before: dict[str, dict], seen: set[str] | None = None
) -> Recovery:
    """Look until every job is back on track: no violation, and every job that was Running before runs again or
    has ended. Components that exited are started again at each look, as a supervisor would."""
    started = time.monotonic()
    was_running = {n for n, j in before.items() if (j.get("status") or {}).get("phase") == "Running"}
    marks = job_marks(before)
    touched: set[str] = set()
    violations = set(seen or ())
    revived: list[str] = []
    while True:
        revived += cluster.revive()
        now = look(cluster, checker)
        violations |= set(now or [])
        jobs = load.jobs()
        touched |= {n for n, m in job_marks(jobs).items() if n in marks and m != marks[n]}
        phases = {n: (j.get("status") or {}).get("phase") for n, j in jobs.items()}
        back = all(phases.get(n) in ("Running", *FINISHED) for n in was_running)
        elapsed = time.monotonic() - started
        if (back and now == []) or elapsed > RECOVERY_CAP_SECONDS:
            not_back = {
                n: f"{phases.get(n)}: {((jobs.get(n) or {}).get('status') or {}).get('message')}"
                for n in sorted(was_running)
                if phases.get(n) not in ("Running", *FINISHED)
            }
            return Recovery(elapsed, sorted(violations), touched, revived, not_back)
        load.top_up()
        time.sleep(LOOK_SECONDS)


def setup(cluster: Cluster, namespace: str) -> None:
    """The operator (Helm), the real NodeGroups and DRA's, a Kueue flavor, ClusterQueue and LocalQueue for the
    4090 node, the priority classes, and the namespace."""
    repository, tag = images_env()["OPERATOR_IMAGE"].rsplit(":", 1)
    install_chart(
        cluster.kubeconfig, "replicas=2", f"image.repository={repository}", f"image.tag={tag}", "image.pullPolicy=Never",
        "dra.deviceClasses[0].name=gpu.example.com", "dra.deviceClasses[0].driver=gpu.example.com",
        strings=("nodeSelector.rlplace\\.io/real-node=true",),
    )  # fmt: skip
    cluster.kubectl("apply", "-f", str(REPO / "examples/nodegroups-real.yaml"))
    shared = [d for d in example("rljob-shared-node.yaml") if d["kind"] == "NodeGroup"]
    objects = [d for d in example("kueue-queues.yaml") if d["kind"] in ("Topology", "WorkloadPriorityClass")]
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "real-4090"},
              "spec": {"nodeLabels": {"rlplace.io/real-gpu-type": "4090"}, "topologyName": "rlplace-hosts"}}  # fmt: skip
    resources = [{"name": "cpu", "nominalQuota": 100}, {"name": "memory", "nominalQuota": "1Ti"},
                 {"name": "nvidia.com/gpu", "nominalQuota": 8}]  # fmt: skip
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "chaos"},
             "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                      "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                          "flavors": [{"name": "real-4090", "resources": resources}]}]}}  # fmt: skip
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "chaos", "namespace": namespace}, "spec": {"clusterQueue": "chaos"}}  # fmt: skip
    with contextlib.suppress(subprocess.CalledProcessError):
        cluster.kubectl("create", "namespace", namespace)
    stdin = yaml.safe_dump_all([*shared, *objects, flavor, queue, local])
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=stdin)


def run(
    cluster: Cluster,
    kinds: list[str],
    faults: int,
    seed: int,
    namespace: str = "chaos",
    in_flight: dict[str, int] | None = None,
    steps: int = 120,
    gap: tuple[float, float] = (20.0, 50.0),
    final_timeout: float = 1800.0,
) -> tuple[list[Result], dict[str, dict], list[str]]:
    """The chaos run: the results per fault, every job as it ended, and the checker's final word."""
    rng = random.Random(seed)
    setup(cluster, namespace)
    builders = kinds_of_load(namespace, steps)
    load = Load(cluster, namespace, builders, in_flight or {**dict.fromkeys(builders, 1), "queued": 2})
    checker = Checker()
    schedule = [kinds[i % len(kinds)] for i in range(faults)]
    rng.shuffle(schedule)
    results: list[Result] = []
    load.top_up()
    time.sleep(gap[1])
    for number, kind in enumerate(schedule, 1):
        time.sleep(rng.uniform(*gap))
        load.top_up()
        before = load.jobs()
        what, during = inject(cluster, checker, FAULTS[kind], rng)
        after = recover(cluster, load, checker, before, during)
        results.append(Result(kind, what, len(after.touched), after.violations, after.seconds, after.revived))
        said = f"; {len(after.violations)} violations:" if after.violations else ""
        said += "".join(f"\n    {violation}" for violation in after.violations)
        revived = f"; exited and started again: {', '.join(after.revived)}" if after.revived else ""
        said += "".join(f"\n    not back: {name} {why}" for name, why in after.not_back.items())
        print(
            f"[chaos] {number}/{len(schedule)} {kind}: {what}; {len(after.touched)} jobs touched, "
            f"back on track in {after.seconds:.0f} s{revived}{said}",
            flush=True,
        )
    load.running = False
    deadline = time.monotonic() + final_timeout
    while time.monotonic() < deadline:
        jobs = load.jobs()
        if all((j.get("status") or {}).get("phase") in FINISHED for j in jobs.values()):
            break
        time.sleep(5)
    final = checker.check(ClusterState.read(cluster.api))
    return results, load.jobs(), final


def table(results: list[Result]) -> str:
    """Fault x times injected x jobs affected x violations x seconds until every job was back on track."""
    rows = [
        "| fault | times | jobs affected | violations | back on track p50 / p95 (s) | also exited |",
        "|---|---|---|---|---|---|",
    ]
    for kind in dict.fromkeys(r.kind for r in results):
        mine = [r for r in results if r.kind == kind]
        seconds = [r.recovery_seconds for r in mine]
        rows.append(
            f"| {kind} | {len(mine)} | {sum(r.affected for r in mine)} | {sum(len(r.violations) for r in mine)} | "
            f"{statistics.median(seconds):.0f} / {percentile(seconds, 0.95):.0f} | "
            f"{', '.join(sorted({c for r in mine for c in r.revived})) or '-'} |"
        )
    return "\n".join(rows)


@contextlib.contextmanager
def local_cluster() -> Iterator[Cluster]:
    """The local cluster of KUBECONFIG (its state in RLPLACE_E2E_DIR, default .e2e), else one started in
    .e2e/chaos."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        yield Cluster(kubeconfig, Path(os.environ.get("RLPLACE_E2E_DIR", REPO / ".e2e")))
        return
    state = REPO / ".e2e" / "chaos"
    try:
        yield Cluster(start_cluster(state), state)
    finally:
        stop_cluster(state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kinds", default=",".join(FAULTS), help="comma-separated, of: " + ", ".join(FAULTS))
    parser.add_argument("--steps", type=int, default=120, help="steps of each job of the load")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in FAULTS]
    if unknown:
        parser.error(f"unknown fault {unknown[0]!r} (known: {', '.join(FAULTS)})")
    started = time.monotonic()
    with local_cluster() as cluster:
        results, jobs, final = run(cluster, kinds, args.faults, args.seed, steps=args.steps)
        print(table(results))
        ended = {n: (j.get("status") or {}).get("phase") for n, j in jobs.items()}
        failed = {n: (j.get("status") or {}).get("message") for n, j in jobs.items() if ended[n] == "Failed"}
        print(f"jobs: {len(jobs)}, {sum(p == 'Succeeded' for p in ended.values())} Succeeded, {len(failed)} Failed, "
              f"{sum(p not in FINISHED for p in ended.values())} not ended")  # fmt: skip
        for name, message in failed.items():
            print(f"  Failed {name}: {message}")
        print(f"final check: {len(final)} violations" + "".join(f"\n  {line}" for line in final))
        print(f"chaos run: {time.monotonic() - started:.0f} s, seed {args.seed}")


if __name__ == "__main__":
    sys.exit(main())
