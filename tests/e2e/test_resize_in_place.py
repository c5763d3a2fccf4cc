"""A running job's rollout grown and shrunk in place (issue 43, docs/elastic.md), on the real kubelets of the local
cluster: the rollout's NodeGroup is the two real GPU nodes (real-4090-0 first), its placement `0-3` (four ranks on
real-4090-0), and a user patches its replicas while the reference driver runs.

- 4 -> 12: ranks 4-7 start on the node the job holds, ranks 8-11 on real-a800-0, which the job did not hold: the
  operator reserves it, KubeRay makes its worker pod, the driver (which reads the rewritten plan, its pod nudged
  to see it at once) starts the new ranks, each verified from inside, and uses them from its next step; the job
  never leaves Running, attempt 1, the kept processes keep their PIDs.
- 12 -> 4: the driver stops ranks 4-11 at its next step, then the operator deletes the a800 pod and the node is
  free again; every step is reported once and in order, and the invariant checker finds nothing wrong.
- The closed loop (spec.elastic) on a synthetic job whose rollout is the bottleneck: it grows the rollout
  1 -> 2 -> 4 replicas in place by writing the spec, and judges each change kept from the iterations after it.
- Fifty random patches in quick succession, under the invariant checker: the job settles on the last count.
- A job of higher priority queued for the grown job's extra node: the loop yields those replicas, the queue gives
  it the node, and the elastic job runs on.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from kubernetes import client
from test_kueue_e2e import KUEUE, QUEUE_LABEL, cluster_queue, granted_hosts, kueue_queues, workloads  # noqa: F401
from test_replace_in_place import (  # noqa: F401  (rollout_pair, kueue_pair: fixtures)
    PAIR_LABEL,
    PAIR_QUEUE,
    driver_log,
    events,
    kueue_pair,
    pair_gpus_used,
    pids,
    replace_job,
    rollout,
    rollout_nodes,
    rollout_pair,
    steps_seen,
    verified_at_step_3,
    watch_running,
)
from test_run import RunJobs, example, real_nodes, run_jobs  # noqa: F401  (fixtures)

from e2e_cluster import wait_for
from invariants import Checker, ClusterState
from rlplace_fixtures import kubectl

pytestmark = pytest.mark.e2e

GROUP, VERSION = "rlplace.io", "v1alpha1"
GROWN_ON = "real-a800-0"


def patch_replicas(kubeconfig: str, namespace: str, job: str, replicas: int) -> None:
    """What a user runs: a JSON patch of the component's replicas (docs/elastic.md)."""
    patch = f'[{{"op": "replace", "path": "/spec/components/0/replicas", "value": {replicas}}}]'
    kubectl(kubeconfig, "patch", "rljob", job, "-n", namespace, "--type", "json", "-p", patch)


def verified_rollout(count: int) -> object:
    def check(status: dict) -> bool:
        binding = {b["name"]: b for b in status.get("binding") or []}
        said = binding.get("rollout") or {}
        verified = any(
            c.get("type") == "BindingVerified" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        return (
            verified
            and said.get("processes") == count == said.get("verified")
            and not rollout(status).get("unverified")
        )

    return check


def four_rollout_ranks(run_jobs: RunJobs, name: str, rollout_pair: str, steps: int) -> dict:  # noqa: F811
    """The actor on the CPU node, the rollout's four ranks on real-4090-0 (placement 0-3 of the pair, 1..12)."""
    placement = [
        {"components": "actor", "nodeGroup": "real-cpu", "placement": "0"},
        {"components": "rollout", "nodeGroup": rollout_pair, "placement": "0-3"},
    ]
    components = [{"name": "rollout", "onLoss": "Replace", "replicas": 4, "minReplicas": 1, "maxReplicas": 12}]
    body = replace_job(
        run_jobs, name, nodeGroups=["real-cpu", rollout_pair], componentPlacement=placement, components=components
    )
    body["spec"]["entrypoint"] = f"python -m placement_core.launcher.demo --steps {steps} --checkpoint-every 100"
    return body


def back_to_four(run_jobs: RunJobs, held: str) -> object:  # noqa: F811
    """Whether a status says the rollout runs its 4 ranks verified on `held` only, with no worker pod left on the
    node it grew onto."""

    def check(status: dict) -> bool:
        pods = run_jobs.core.list_namespaced_pod(run_jobs.namespace, label_selector="ray.io/node-type=worker").items
        on_added = [p for p in pods if p.spec.node_name == GROWN_ON and p.metadata.labels.get("ray.io/cluster")]
        return verified_rollout(4)(status) and rollout_nodes(status) == [held] and not on_added

    return check


def test_rollout_grows_onto_another_node_and_shrinks_back_while_the_job_runs(
    run_jobs: RunJobs,  # noqa: F811
    rollout_pair: str,  # noqa: F811
    kubeconfig: str,
    k8s: client.ApiClient,
) -> None:
    # Steps enough for both changes (each about half a minute) with the job still running; the test ends it.
    run_jobs.create(four_rollout_ranks(run_jobs, "grow", rollout_pair, steps=400))
    first = wait_for(lambda: verified_at_step_3(run_jobs.status("grow")), 300, "grow verified at step 3", interval=1)
    (held,) = rollout_nodes(first)
    assert held != GROWN_ON, first

    started = time.monotonic()
    patch_replicas(kubeconfig, run_jobs.namespace, "grow", 12)
    grown = watch_running(run_jobs, "grow", verified_rollout(12), 240, "rollout grown to 12 ranks and verified")
    took = time.monotonic() - started
    assert sorted(rollout_nodes(grown)) == sorted([held, GROWN_ON]) and grown["attempts"] == 1, grown
    assert rollout(grown)["desired"] == 12 and rollout(grown)["live"] == 12, grown
    assert events(run_jobs, "grow", "Resized") and events(run_jobs, "grow", "RanksStarted")

    # Every rollout rank as its own process saw itself, the new ones on their planned node and GPUs: the driver
    # prints its process table after the binding report that verified them (it asks every process), so the log is
    # read until the table is there.
    def all_rows() -> tuple[str, dict[int, dict[str, str]]] | None:
        log = driver_log(kubeconfig, run_jobs.namespace, "grow")
        rows = {int(r["RANK"]): r for r in pids(log, "rollout")}
        return (log, rows) if sorted(rows) == list(range(12)) else None

    log, rows = wait_for(all_rows, 60, "the process table of the 12 rollout ranks", interval=2)
    assert "resized: component 'rollout' 4 -> 12 replicas (ranks 4-11 starting)" in log
    assert "started: component 'rollout' rank 11 on node rank " in log
    assert {rows[r]["node"] for r in range(8, 12)} == {GROWN_ON}
    assert [rows[r]["CUDA_VISIBLE_DEVICES"] for r in range(8, 12)] == ["0", "1", "2", "3"]
    print(f"resize in place: 4 -> 12 rollout ranks verified {took:.0f} s after the patch")

    started = time.monotonic()
    patch_replicas(kubeconfig, run_jobs.namespace, "grow", 4)

    shrunk = back_to_four(run_jobs, held)
    small = watch_running(run_jobs, "grow", shrunk, 180, "rollout back to 4 ranks and the a800 pod gone")
    took = time.monotonic() - started
    assert small["attempts"] == 1 and rollout(small)["desired"] == 4, small
    cluster = run_jobs.ray("rayclusters", small["rayCluster"]) or {}
    assert GROWN_ON not in cluster["metadata"]["annotations"]["rlplace.io/nodes"], cluster["metadata"]
    log = driver_log(kubeconfig, run_jobs.namespace, "grow")
    assert "resized: component 'rollout' 12 -> 4 replicas (ranks 4-11 stopped)" in log
    assert "lost:" not in log  # the ranks were stopped by the driver, not lost under it
    seen = steps_seen(log)
    assert seen == list(range(1, len(seen) + 1)), seen  # every step once and in order, through both changes
    assert Checker().check(ClusterState.read(k8s)) == []
    print(f"resize in place: 12 -> 4 rollout ranks, the a800 pod deleted {took:.0f} s after the patch")
    assert seen == list(range(1, len(seen) + 1)), seen  # every step once and in order, through both changes
    assert Checker().check(ClusterState.read(k8s)) == []
    print(f"resize in place: 12 -> 4 rollout ranks, the a800 pod deleted {took:.0f} s after the patch")


def test_the_elastic_loop_grows_the_bottleneck_rollout_and_keeps_its_promise(
    run_jobs: RunJobs,  # noqa: F811
    rollout_pair: str,  # noqa: F811
    kubeconfig: str,
) -> None:
    """spec.elastic on, a synthetic workload whose rollout is the bottleneck (4 s per iteration on one GPU, 4/g:
    its work splits over its GPUs) beside a 0.3 s actor: the loop grows the rollout 1 -> 2 -> 4 replicas in place
    (each predicted about half the iteration), judges each on the iterations reported after it (kept: the iteration
    fell as promised), and stops at maxReplicas; the job never leaves Running, attempt 1, every step once."""
    placement = [
        {"components": "actor", "nodeGroup": "real-cpu", "placement": "0"},
        {"components": "rollout", "nodeGroup": rollout_pair, "placement": "0"},
    ]
    components = [{"name": "rollout", "onLoss": "Replace", "minReplicas": 1, "maxReplicas": 4}]
    body = replace_job(
        run_jobs, "loop", nodeGroups=["real-cpu", rollout_pair], componentPlacement=placement, components=components
    )
    body["spec"]["entrypoint"] = (
        "python -m placement_core.launcher.demo --steps 400 --workload synthetic --law actor=0.3 --law rollout=4/g"
    )
    # The cooldown covers most of the progress window (the medians of the last 10 reports, one per 5 s at most).
    body["spec"]["elastic"] = {"enabled": True, "minGain": 0.2, "cooldown": 40}
    run_jobs.create(body)

    def grown_and_kept(status: dict) -> bool:
        resizes = status.get("resizes") or []
        return [(r["previous"], r["replicas"], r["reason"]) for r in resizes] == [(1, 2, "Grow"), (2, 4, "Grow")] and (
            resizes[-1].get("kept") is True
        )

    wait_for(lambda: run_jobs.status("loop").get("phase") == "Running", 300, "loop running", interval=1)
    done = watch_running(run_jobs, "loop", grown_and_kept, 420, "the rollout grown 1 -> 2 -> 4 and both kept")
    first, second = done["resizes"]
    assert first["kept"] is True and first["observedAfterSeconds"] < first["observedIterationSeconds"] * 0.9, first
    assert second["observedAfterSeconds"] < first["observedAfterSeconds"] * 0.9, done["resizes"]
    assert done["attempts"] == 1 and rollout(done)["desired"] == 4, done
    assert [c["replicas"] for c in run_jobs.get("loop")["spec"]["components"]] == [4]
    assert len(events(run_jobs, "loop", "ReplicasChanged")) == 2
    log = driver_log(kubeconfig, run_jobs.namespace, "loop")
    seen = steps_seen(log)
    assert seen == list(range(1, len(seen) + 1)), seen
    print(
        "elastic loop: iteration "
        + " -> ".join(f"{r['observedIterationSeconds']:.2f}" for r in done["resizes"])
        + f" -> {second['observedAfterSeconds']:.2f} s over rollout 1 -> 2 -> 4 replicas"
    )


def test_a_stream_of_50_random_resizes_leaves_every_rank_with_its_pod_and_every_pod_with_its_ranks(
    run_jobs: RunJobs,  # noqa: F811
    rollout_pair: str,  # noqa: F811
    kubeconfig: str,
    k8s: client.ApiClient,
) -> None:
    """Fifty patches of the rollout's replicas in quick succession (a random count of 1..12 every 0.2-1.5 s, seeded)
    while the job runs: the operator and the driver follow each newest spec, never the spec of a patch overtaken
    by the next. Looked at by the invariant checker throughout (a Running job's planned pods run Ready on its
    planned nodes and nowhere else, within its 30 s of reaction), and once the stream ends: the job settles on
    the last count, every rank verified, its pods exactly on the plan's nodes, attempt 1, every step once."""
    run_jobs.create(four_rollout_ranks(run_jobs, "stream", rollout_pair, steps=600))
    wait_for(lambda: verified_at_step_3(run_jobs.status("stream")), 300, "stream verified at step 3", interval=1)

    seed = int(os.environ.get("RLPLACE_E2E_SEED") or random.randrange(1_000_000))  # a failure's seed, to replay it
    rng, count, checker, found = random.Random(seed), 4, Checker(), []
    for _ in range(50):
        count = rng.choice([n for n in range(1, 13) if n != count])
        patch_replicas(kubeconfig, run_jobs.namespace, "stream", count)
        found += checker.check(ClusterState.read(k8s))
        print(f"{time.strftime('%H:%M:%S')} patched {count}: {found[-1:] or 'ok'}", flush=True)
        time.sleep(rng.uniform(0.2, 1.5))
    streamed = time.monotonic()

    def settled(status: dict) -> bool:
        pods = run_jobs.core.list_namespaced_pod(run_jobs.namespace, label_selector="ray.io/node-type=worker").items
        live = [p for p in pods if p.metadata.labels.get("ray.io/cluster") and not p.metadata.deletion_timestamp]
        planned = {n for c in (status.get("placement") or {}).get("components") or [] for n in c["nodes"]}
        found.extend(checker.check(ClusterState.read(k8s)))
        return verified_rollout(count)(status) and {p.spec.node_name for p in live} == planned

    done = watch_running(run_jobs, "stream", settled, 300, f"the rollout settled on {count} verified ranks")
    assert done["attempts"] == 1 and rollout(done)["desired"] == count == rollout(done)["live"], done
    time.sleep(5)
    found += checker.check(ClusterState.read(k8s))
    assert found == [], f"seed {seed}: {found}"
    seen = steps_seen(driver_log(kubeconfig, run_jobs.namespace, "stream"))
    assert seen == list(range(1, len(seen) + 1)), (seed, seen)
    print(
        f"50 random resizes (seed {seed}): settled on {count} rollout ranks {time.monotonic() - streamed:.0f} s after the last"
    )


def test_a_job_of_higher_priority_takes_an_elastic_jobs_extra_replicas_without_stopping_it(
    run_jobs: RunJobs,  # noqa: F811
    rollout_pair: str,  # noqa: F811
    kubeconfig: str,
) -> None:
    """An elastic job runs twelve rollout ranks over both real GPU nodes (minimum four, on real-4090-0); a job of
    priority 10 asks for real-a800-0 (its own NodeGroup over that node) and is queued: the loop yields the rollout
    down to four ranks, the driver stops ranks 4-11, the a800 pod goes, and the queue gives the node to the waiting
    job, which runs; the elastic job never leaves Running, attempt 1, every step once."""
    body = four_rollout_ranks(run_jobs, "giver", rollout_pair, steps=600)
    body["spec"]["components"][0].update(replicas=12, minReplicas=4)
    body["spec"]["elastic"] = {"enabled": True}
    run_jobs.create(body)
    wait_for(lambda: verified_rollout(12)(run_jobs.status("giver")), 300, "giver's 12 ranks verified", interval=1)
    urgent = example("rljob-replace-run.yaml")
    urgent["metadata"]["name"] = "urgent"
    urgent["spec"] = {
        "nodeGroups": ["real-a800"],
        "componentPlacement": [{"components": "actor", "placement": "0-7"}],
        "priority": 10,
        "ray": urgent["spec"]["ray"],
    }
    started = time.monotonic()
    run_jobs.create(urgent)

    def yielded(status: dict) -> bool:
        return any(r["reason"] == "Yield" for r in status.get("resizes") or []) and verified_rollout(4)(status)

    done = watch_running(run_jobs, "giver", yielded, 240, "giver's rollout yielded down to 4 verified ranks")
    wait_for(lambda: run_jobs.status("urgent").get("phase") == "Running", 240, "the urgent job running")
    took = time.monotonic() - started
    (yield_,) = [r for r in done["resizes"] if r["reason"] == "Yield"]
    assert (yield_["previous"], yield_["replicas"], yield_["kept"]) == (12, 4, True), done["resizes"]
    assert run_jobs.status("urgent")["placement"]["components"][0]["nodes"] == [GROWN_ON]
    assert run_jobs.status("giver")["phase"] == "Running" and run_jobs.status("giver")["attempts"] == 1
    said = events(run_jobs, "giver", "ReplicasChanged")
    assert any("Yield: component 'rollout' 12 -> 4 replicas: job " in e and "of priority 10" in e for e in said), said
    seen = steps_seen(driver_log(kubeconfig, run_jobs.namespace, "giver"))
    assert seen == list(range(1, len(seen) + 1)), seen
    print(f"yield: the priority-10 job ran on the elastic job's extra node {took:.0f} s after it was created")


def test_under_kueue_growth_waits_for_quota_as_a_workload_slice_and_a_shrink_gives_the_quota_back(
    run_jobs: RunJobs,  # noqa: F811
    rollout_pair: str,  # noqa: F811
    kueue_pair: str,  # noqa: F811
    kubeconfig: str,
    k8s: client.ApiClient,
) -> None:
    """A job Kueue admitted (LocalQueue pair: one node's 8 GPUs of the two real GPU nodes) runs four rollout ranks
    with a range: its Workload is elastic. Patched to 12 ranks (a second node), it asks Kueue for a Workload slice
    and runs on as it is, saying it waits for Kueue's quota; the ClusterQueue raised to 16 GPUs, Kueue admits the
    slice on both nodes (keeping the first), finishes the replaced Workload (rlplace deletes it) and the rollout
    grows in place. Back to 4, the slice's count goes down and Kueue counts 8 GPUs again; attempt 1 throughout,
    every step once."""
    body = four_rollout_ranks(run_jobs, "kgrow", rollout_pair, steps=600)
    body["metadata"]["labels"] = {QUEUE_LABEL: kueue_pair}
    body["spec"]["pods"] = {"workers": {"tolerations": [{"key": PAIR_LABEL, "operator": "Exists"}]}}
    run_jobs.create(body)
    first = wait_for(lambda: verified_at_step_3(run_jobs.status("kgrow")), 300, "kgrow verified at step 3", interval=1)
    (held,) = rollout_nodes(first)
    assert held != GROWN_ON, first  # Kueue's first grant: the NodeGroup's first node (the one a grow keeps first)
    (admitted,) = workloads(run_jobs, "kgrow")
    assert admitted["metadata"]["annotations"]["kueue.x-k8s.io/elastic-job"] == "true", admitted["metadata"]

    patch_replicas(kubeconfig, run_jobs.namespace, "kgrow", 12)

    used = [pair_gpus_used(run_jobs)]  # what the ClusterQueue counts, sampled at each look

    def waits_for_quota(status: dict) -> bool:
        used.append(pair_gpus_used(run_jobs))
        placed = next((c for c in status.get("conditions") or [] if c["type"] == "Placed"), {})
        return placed.get("reason") == "WaitingForKueue" and "Workload slice" in placed.get("message", "")

    waiting = watch_running(run_jobs, "kgrow", waits_for_quota, 60, "the growth waiting for Kueue's quota")
    time.sleep(3)  # Kueue looks again meanwhile: the job runs on as it is, within the quota
    assert rollout_nodes(run_jobs.status("kgrow")) == [held] and waiting["attempts"] == 1
    used.append(pair_gpus_used(run_jobs))
    assert max(used) == 8, used
    (slice_,) = [w for w in workloads(run_jobs, "kgrow") if w["metadata"]["name"] != admitted["metadata"]["name"]]
    replaces = slice_["metadata"]["annotations"]["kueue.x-k8s.io/workload-slice-replacement-for"]
    assert replaces == f"{run_jobs.namespace}/{admitted['metadata']['name']}", slice_["metadata"]

    started = time.monotonic()
    cluster_queue(kubeconfig, PAIR_QUEUE, {"e2e-real-cpu": 0, "e2e-pair": 16})
    used = []

    def grown_and_counted(status: dict) -> bool:
        used.append(pair_gpus_used(run_jobs))
        return verified_rollout(12)(status)

    grown = watch_running(run_jobs, "kgrow", grown_and_counted, 240, "rollout grown to 12 ranks under Kueue")
    took = time.monotonic() - started
    assert sorted(rollout_nodes(grown)) == sorted(["real-4090-0", "real-a800-0"]) and grown["attempts"] == 1, grown
    assert grown["kueue"]["workload"] == slice_["metadata"]["name"], grown["kueue"]
    wait_for(lambda: len(workloads(run_jobs, "kgrow")) == 1, 30, "the replaced Workload deleted")
    (now,) = workloads(run_jobs, "kgrow")
    assert sorted(granted_hosts(now)[rollout_pair]) == sorted(["real-4090-0", "real-a800-0"])
    assert pair_gpus_used(run_jobs) == 16 and max(used) <= 16, used  # the slice counts the growth only

    patch_replicas(kubeconfig, run_jobs.namespace, "kgrow", 4)

    small = watch_running(run_jobs, "kgrow", back_to_four(run_jobs, held), 180, "rollout back to 4 ranks under Kueue")
    (now,) = workloads(run_jobs, "kgrow")
    counts = {p["name"]: p["count"] for p in now["spec"]["podSets"]}
    assert counts[rollout_pair] == 1 and small["attempts"] == 1, (counts, small)
    wait_for(lambda: pair_gpus_used(run_jobs) == 8, 30, "Kueue counting one node's GPUs again")
    seen = steps_seen(driver_log(kubeconfig, run_jobs.namespace, "kgrow"))
    assert seen == list(range(1, len(seen) + 1)), seen
    assert Checker().check(ClusterState.read(k8s)) == []
    print(f"under Kueue: the slice admitted and 4 -> 12 rollout ranks verified {took:.0f} s after the quota was raised")
