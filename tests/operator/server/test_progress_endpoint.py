"""The progress endpoint (a real HTTP server on localhost; the TokenReview behind it injected as a function), its
throttle, the figures it writes (medians, bottleneck, the driver's checkpoint), its request for a checkpoint,
the head pod's token volume and the metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from placement_core import contract
from placement_core.observe.progress import ComponentTime, HttpReporter, IterationReport
from rlplace_operator.api.names import PROGRESS_AUDIENCE, progress_path
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.builders.progress import PROGRESS_TOKEN_DIR, with_progress_reporting
from rlplace_operator.builders.raycluster import build_raycluster
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.kube import ProgressWrite
from rlplace_operator.planning.plan import WorkerNode
from rlplace_operator.reconcile.decide import status_wire
from rlplace_operator.reconcile.pods import status_of as _status
from rlplace_operator.server.metrics import metrics_app
from rlplace_operator.server.progress import (
    Caller,
    IdentityCache,
    JobKey,
    ProgressService,
    Refused,
    Throttle,
    Window,
    summarize,
    token_expiry,
)


def report(
    iteration: int,
    at: float = 1_700_000_000.0,
    wall: float | None = None,
    checkpoint: int | None = None,
    **seconds: float,
) -> IterationReport:
    return IterationReport(
        iteration, tuple(ComponentTime(k, v) for k, v in seconds.items()), None, wall, at, checkpoint
    )


# -- figures ----------------------------------------------------------------------------------------------------


def test_progress_is_the_median_of_the_window_and_names_the_slowest_component() -> None:
    reports = [
        report(1, wall=10.0, rollout=6.0, actor=3.0),
        report(2, wall=30.0, rollout=2.0, actor=9.0),  # one slow outlier does not move the medians much
        report(3, wall=11.0, rollout=6.5, actor=3.5),
    ]
    progress = summarize(reports)
    assert progress is not None
    assert progress.iteration == 3 and progress.iteration_seconds == 11.0
    assert [(c.name, c.seconds) for c in progress.components] == [("rollout", 6.0), ("actor", 3.5)]
    assert progress.bottleneck == "rollout"
    assert progress.updated_at == "2023-11-14T22:13:20Z"
    assert progress.checkpoint_step is None
    # ... and the outlier itself is named: the iteration whose throughput dipped (a replica lost during it).
    assert (progress.slowest_iteration, progress.slowest_iteration_seconds) == (2, 30.0)


def test_progress_carries_the_latest_reports_checkpoint() -> None:
    progress = summarize([report(4, wall=1.0, checkpoint=2, a=1.0), report(5, wall=1.0, checkpoint=5, a=1.0)])
    assert progress is not None and progress.checkpoint_step == 5


def test_iteration_time_without_a_wall_clock_is_the_phases_in_a_row() -> None:
    progress = summarize([IterationReport(4, (ComponentTime("actor", 2.0),), 0.5, None, 0.0)])
    assert progress is not None and progress.iteration_seconds == 2.5 and progress.weight_sync_seconds == 0.5


def test_a_component_missing_from_some_reports_is_the_median_of_the_others() -> None:
    progress = summarize([report(1, wall=4, actor=1.0, reward=9.0), report(2, wall=4, actor=3.0)])
    assert progress is not None and {c.name: c.seconds for c in progress.components} == {"actor": 2.0, "reward": 9.0}


def test_window_keeps_one_report_per_iteration_and_starts_over_with_the_driver() -> None:
    window = Window(size=3)
    for i in (1, 2, 2, 3, 4):
        window.add(report(i, wall=float(i), a=1.0), now=float(i))
    assert [r.iteration for r in window.reports] == [2, 3, 4]
    window.add(report(1, wall=1.0, a=1.0), now=9.0)  # a new attempt from step 1: old steps are another run
    assert [r.iteration for r in window.reports] == [1] and window.received == 9.0


def test_status_carries_progress_through_the_reconcile() -> None:
    wire = {"phase": "Running", "progress": {"iteration": 3, "iterationSeconds": 1.5, "updatedAt": "x"}}
    assert status_wire(_status(wire))["progress"] == {
        "iteration": 3,
        "iterationSeconds": 1.5,
        "components": [],
        "updatedAt": "x",
    }


# -- throttle and identity cache ---------------------------------------------------------------------------------


def test_throttle_writes_at_once_then_at_most_once_per_interval() -> None:
    throttle, job = Throttle(5.0), ("ns", "a")
    assert throttle.due(job, 100.0) == 0.0
    assert throttle.due(job, 100.1) is None  # planned already: that write carries this report too
    throttle.wrote(job, 100.2)
    assert throttle.due(job, 101.2) == pytest.approx(4.0)
    assert throttle.due(("ns", "b"), 101.2) == 0.0  # per job
    throttle.wrote(job, 105.2)
    assert throttle.due(job, 111.0) == 0.0


def test_a_write_that_must_not_wait_goes_at_once_and_the_planned_one_still_goes() -> None:
    throttle, job = Throttle(5.0), ("ns", "a")
    throttle.due(job, 100.0)
    throttle.wrote(job, 100.0)
    assert throttle.due(job, 101.0) == pytest.approx(4.0)
    assert throttle.due(job, 102.0, at_once=True) == 0.0
    throttle.wrote(job, 102.0)  # the write at once; the planned one is still to come and carries what comes
    assert throttle.due(job, 103.0) is None
    throttle.wrote(job, 105.0)
    assert throttle.due(job, 106.0) == pytest.approx(4.0)


def test_identity_cache_reviews_a_token_once_until_it_expires() -> None:
    now = [0.0]
    seen: list[str] = []

    def identify(token: str) -> Caller:
        seen.append(token)
        return Caller(("ns", "job"), "pod", now[0] + 60)

    cache = IdentityCache(identify, clock=lambda: now[0])
    for _ in range(1000):
        assert cache.caller("t1").job == ("ns", "job")
    assert seen == ["t1"] and cache.reviews == 1
    now[0] = 61.0
    cache.caller("t1")
    assert seen == ["t1", "t1"]


def test_a_refused_token_is_answered_from_memory_for_a_while() -> None:
    now = [0.0]
    calls: list[str] = []

    def identify(token: str) -> Caller:
        calls.append(token)
        raise Refused(503 if token == "later" else 401, "no")

    cache = IdentityCache(identify, clock=lambda: now[0])
    for token in ("bad", "bad", "later", "later"):
        with pytest.raises(Refused):
            cache.caller(token)
    assert calls == ["bad", "later", "later"]  # a 503 (the operator's own trouble) is asked again at once
    now[0] = 31.0
    with pytest.raises(Refused):
        cache.caller("bad")
    assert calls[-1] == "bad" and len(calls) == 4


def test_token_expiry_reads_the_exp_claim() -> None:
    import base64

    payload = base64.urlsafe_b64encode(json.dumps({"exp": 1234}).encode()).decode().rstrip("=")
    assert token_expiry(f"h.{payload}.s") == 1234.0
    assert token_expiry("not-a-jwt") is None


# -- the endpoint over real HTTP --------------------------------------------------------------------------------

TOKENS = {"token-a": ("ns", "a"), "token-b": ("ns", "b"), "token-a-1": ("ns", "a"), "token-a-2": ("ns", "a")}
#: The Ray cluster of each token's pod: job a's attempt 1 ran on a-1, its attempt 2 runs on a-2.
CLUSTERS = {"token-a-1": "a-1", "token-a-2": "a-2"}


def identify(token: str) -> Caller:
    if token == "no-rbac":
        raise Refused(503, "the operator may not create tokenreviews")
    if token not in TOKENS:
        raise Refused(401, "token not valid")
    return Caller(TOKENS[token], f"{TOKENS[token][1]}-head", time.monotonic() + 600, CLUSTERS.get(token))


Scenario = Callable[[str, ProgressService, list[tuple[JobKey, dict[str, Any]]]], Awaitable[None]]


def serve_and(
    scenario: Scenario, interval: float = 0.3, checkpoint_wanted: Callable[[JobKey], bool] = lambda _: False
) -> None:
    writes: list[tuple[JobKey, dict[str, Any]]] = []

    def write(key: JobKey, progress: dict[str, Any], cluster: str | None) -> ProgressWrite:
        writes.append((key, progress))
        if key == ("ns", "deleted"):
            return ProgressWrite.GONE
        # Job a runs on Ray cluster a-2 now: a-1 is a stopped attempt's (None: a caller that names none).
        return ProgressWrite.OTHER_CLUSTER if cluster == "a-1" else ProgressWrite.WRITTEN

    async def main() -> None:
        service = ProgressService(identify, write, interval=interval, checkpoint_wanted=checkpoint_wanted)
        runner = web.AppRunner(service.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            await scenario(f"http://127.0.0.1:{port}", service, writes)
        finally:
            await service.drain()
            await runner.cleanup()
            service.close()

    asyncio.run(main())


async def post(base: str, job: JobKey, body: str, token: str | None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(base + progress_path(*job), data=body, headers=headers) as response,
    ):
        return response.status, await response.json()


def test_a_pod_updates_its_own_job_and_no_other() -> None:
    async def scenario(base: str, service: ProgressService, writes: list) -> None:
        body = report(7, wall=2.0, rollout=1.5, actor=0.4).to_json()
        assert (await post(base, ("ns", "a"), body, "token-a"))[0] == 202
        status, answer = await post(base, ("ns", "a"), body, "token-b")
        assert status == 403 and "belongs to RLJob ns/b, not ns/a" in answer["error"]
        assert (await post(base, ("ns", "a"), body, "forged"))[0] == 401
        assert (await post(base, ("ns", "a"), body, None))[0] == 401
        assert (await post(base, ("ns", "a"), '{"iteration": "x"}', "token-a"))[0] == 400
        await service.drain()
        assert [key for key, _ in writes] == [("ns", "a")]
        assert writes[0][1]["iteration"] == 7 and writes[0][1]["bottleneck"] == "rollout"

    serve_and(scenario)


def test_a_stopped_attempts_driver_never_writes_over_the_attempt_that_replaced_it() -> None:
    """Seen under chaos (a kubelet stopped 60 s): the job restarted as attempt 2 while attempt 1's head pod kept
    running on the kubelet-less node, and its driver's iteration 4 landed in attempt 2's status before attempt 2's
    iteration 1. A write names the reporting driver's Ray cluster and lands only while the job runs on it; once it
    did not, that cluster's reports are refused (409) and the current driver's are written."""

    async def scenario(base: str, service: ProgressService, writes: list) -> None:
        assert (await post(base, ("ns", "a"), report(4, wall=1.0, a=1.0).to_json(), "token-a-1"))[0] == 202
        await service.drain()  # not written: the job runs on a-2
        assert service.stopped == {("ns", "a"): {"a-1"}} and service.stats.writes == 0
        status, answer = await post(base, ("ns", "a"), report(5, wall=1.0, a=1.0).to_json(), "token-a-1")
        assert status == 409 and "Ray cluster a-1, which RLJob ns/a no longer runs on" in answer["error"]
        assert (await post(base, ("ns", "a"), report(1, wall=1.0, a=1.0).to_json(), "token-a-2"))[0] == 202
        await service.drain()
        assert service.stats.writes == 1 and writes[-1][1]["iteration"] == 1

    serve_and(scenario)


def test_a_window_starts_over_with_another_ray_clusters_driver() -> None:
    window = Window()
    window.add(report(7, wall=1.0, a=1.0), now=1.0, cluster="a-1")
    window.add(report(8, wall=1.0, a=1.0), now=2.0, cluster="a-2")
    assert [r.iteration for r in window.reports] == [8] and window.cluster == "a-2"


def test_reports_are_throttled_per_job_and_the_latest_wins() -> None:
    interval = 2.0

    async def scenario(base: str, service: ProgressService, writes: list) -> None:
        started = time.monotonic()
        async with aiohttp.ClientSession() as session:  # one connection, as a driver keeps its own
            for i in range(1, 21):
                body, headers = report(i, wall=1.0, a=1.0).to_json(), {"Authorization": "Bearer token-a"}
                async with session.post(base + progress_path("ns", "a"), data=body, headers=headers) as response:
                    assert response.status == 202
        # The premise: all 20 arrive within one interval (a new session per post took up to 2.5 s for 20 on a
        # 2-core machine under make test's load; one session takes a few milliseconds).
        assert time.monotonic() - started < interval
        await service.drain()
        # the first report is written at once, the other 19 arrive within the interval: one more write, the latest
        assert [w["iteration"] for _, w in writes] == [1, 20]
        assert service.stats.writes == 2 and service.identities.reviews == 1
        assert max(service.stats.staleness) < interval + 0.5  # the latest waited at most one interval

    serve_and(scenario, interval=interval)


def test_only_the_job_the_operator_wants_a_checkpoint_of_is_asked_for_one() -> None:
    wanted: set[JobKey] = set()  # as memo.checkpoint_requests

    async def scenario(base: str, service: ProgressService, writes: list) -> None:
        body = report(1, wall=1.0, a=1.0).to_json()
        assert await post(base, ("ns", "a"), body, "token-a") == (202, {"accepted": 1})
        wanted.add(("ns", "a"))
        assert await post(base, ("ns", "a"), body, "token-a") == (202, {"accepted": 1, "checkpoint": True})
        assert await post(base, ("ns", "b"), body, "token-b") == (202, {"accepted": 1})
        assert (await post(base, ("ns", "a"), body, "token-b"))[0] == 403  # another job's pod is asked nothing
        wanted.clear()
        assert await post(base, ("ns", "a"), body, "token-a") == (202, {"accepted": 1})

    serve_and(scenario, checkpoint_wanted=lambda key: key in wanted)


def test_a_new_checkpoint_is_written_at_once_and_reaches_the_status() -> None:
    async def scenario(base: str, service: ProgressService, writes: list) -> None:
        for i in (1, 2):  # 1 is written at once, 2 waits for the interval
            await post(base, ("ns", "a"), report(i, wall=1.0, a=1.0).to_json(), "token-a")
        await post(base, ("ns", "a"), report(3, wall=1.0, checkpoint=3, a=1.0).to_json(), "token-a")
        await asyncio.sleep(0.3)
        assert [(w["iteration"], w.get("checkpointStep")) for _, w in writes] == [(1, None), (3, 3)]
        await post(base, ("ns", "a"), report(4, wall=1.0, checkpoint=3, a=1.0).to_json(), "token-a")  # not new
        await asyncio.sleep(0.3)
        assert len(writes) == 2
        await service.drain()  # the write planned for 2 carries the latest
        assert [(w["iteration"], w.get("checkpointStep")) for _, w in writes] == [(1, None), (3, 3), (4, 3)]

    serve_and(scenario, interval=2.0)


def test_without_tokenreview_rights_progress_is_refused_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(base: str, service: ProgressService, writes: list) -> None:
        with caplog.at_level(logging.WARNING, "rlplace.progress"):
            for _ in range(3):
                status, answer = await post(base, ("ns", "a"), report(1, a=1.0).to_json(), "no-rbac")
                assert status == 503 and "tokenreviews" in answer["error"]
        assert not writes
        assert [r.getMessage() for r in caplog.records] == [
            "progress refused: the operator may not create tokenreviews"
        ]  # once, not once per report

    serve_and(scenario)


def test_a_deleted_job_is_forgotten() -> None:
    TOKENS["token-d"] = ("ns", "deleted")

    async def scenario(base: str, service: ProgressService, writes: list) -> None:
        assert (await post(base, ("ns", "deleted"), report(1, a=1.0).to_json(), "token-d"))[0] == 202
        await service.drain()
        assert ("ns", "deleted") not in service.windows

    serve_and(scenario)


def test_the_drivers_reporter_reaches_the_endpoint(tmp_path: Any) -> None:
    """The launcher's HttpReporter (what the reference driver uses) against this endpoint: one wire form."""
    token = tmp_path / "token"
    token.write_text("token-a\n")

    async def scenario(base: str, service: ProgressService, writes: list) -> None:
        reporter = HttpReporter(base + progress_path("ns", "a"), str(token), min_interval_s=0.0)
        await asyncio.to_thread(reporter.report, report(3, wall=1.0, rollout=0.7, actor=0.2))
        await asyncio.to_thread(reporter.close)
        await service.drain()
        assert reporter.failures == 0 and reporter.sent == 1
        assert writes[-1][1]["components"] == [{"name": "rollout", "seconds": 0.7}, {"name": "actor", "seconds": 0.2}]

    serve_and(scenario)


def test_metrics_show_each_jobs_figures() -> None:
    async def scenario(base: str, service: ProgressService, writes: list) -> None:
        await post(base, ("ns", "a"), report(5, wall=4.0, rollout=3.0, actor=1.0).to_json(), "token-a")
        runner = web.AppRunner(metrics_app(service))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
        await runner.cleanup()
        assert 'rlplace_job_last_step_seconds{namespace="ns",rljob="a"} 4.0' in text
        assert 'rlplace_component_busy_seconds{component="rollout",namespace="ns",rljob="a"} 3.0' in text
        assert 'rlplace_component_idle_ratio{component="actor",namespace="ns",rljob="a"} 0.75' in text
        assert 'rlplace_progress_reports_total{code="202"} 1.0' in text

    serve_and(scenario)


# -- the head pod's token and URL --------------------------------------------------------------------------------

SPEC = RLJobSpec.model_validate(
    {"nodeGroups": ["g"], "componentPlacement": [{"components": "actor", "placement": "all"}], "entrypoint": "x"}
)


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob"])
def test_head_pod_gets_an_rlplace_token_and_its_jobs_url(kind: str) -> None:
    nodes = [WorkerNode(0, "n0", 8, {"nvidia.com/gpu": 8})]
    child = build_rayjob("job", SPEC, nodes) if kind == "RayJob" else build_raycluster("job", SPEC, nodes)
    body = with_progress_reporting(child, "job", "http://op.sys.svc:8081/")
    cluster = body["spec"]["rayClusterSpec"] if kind == "RayJob" else body["spec"]
    pod = cluster["headGroupSpec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "projected" in v]
    token = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert token["audience"] == PROGRESS_AUDIENCE and token["expirationSeconds"] >= 600
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    url = env[contract.PROGRESS_URL_ENV]["value"]
    assert url == "http://op.sys.svc:8081/v1/namespaces/$(RLPLACE_NAMESPACE)/rljobs/job/progress"
    # $(VAR) expands only to a variable defined earlier in the list
    names = [e["name"] for e in pod["containers"][0]["env"]]
    assert names.index("RLPLACE_NAMESPACE") < names.index(contract.PROGRESS_URL_ENV)
    assert env[contract.PROGRESS_TOKEN_FILE_ENV]["value"].startswith(PROGRESS_TOKEN_DIR)
    assert {"name": volume["name"], "mountPath": PROGRESS_TOKEN_DIR, "readOnly": True} in pod["containers"][0][
        "volumeMounts"
    ]
    for group in cluster["workerGroupSpecs"]:  # the driver runs on the head only
        assert "projected" not in str(group["template"]["spec"].get("volumes"))
    assert with_progress_reporting(child, "job", None) is child
    # veRL's metrics are written wherever its TaskRunner actor runs: every pod gets the token and the URL.
    everywhere = with_progress_reporting(child, "job", "http://op.sys.svc:8081/", workers=True)
    cluster = everywhere["spec"]["rayClusterSpec"] if kind == "RayJob" else everywhere["spec"]
    for group in cluster["workerGroupSpecs"]:
        env = {e["name"] for e in group["template"]["spec"]["containers"][0]["env"]}
        assert contract.PROGRESS_URL_ENV in env and contract.PROGRESS_TOKEN_FILE_ENV in env


# -- KubeIdentify: the real Kubernetes client against a stand-in API server ---------------------------------------


class StandInApi:
    """Answers TokenReview and the pod / owner reads the way the API server does (its JSON), from a table."""

    def __init__(self, reviews: dict[str, dict], objects: dict[str, dict], review_status: int = 201) -> None:
        self.reviews, self.objects, self.review_status = reviews, objects, review_status
        self.requests: list[str] = []

    def app(self) -> web.Application:
        async def review(request: web.Request) -> web.Response:
            body = await request.json()
            self.requests.append("tokenreview")
            if self.review_status != 201:
                return web.json_response({"kind": "Status", "code": self.review_status}, status=self.review_status)
            assert body["spec"]["audiences"] == [PROGRESS_AUDIENCE]
            status = self.reviews.get(body["spec"]["token"], {"authenticated": False, "error": "invalid bearer token"})
            return web.json_response({**body, "status": status}, status=201)

        async def read(request: web.Request) -> web.Response:
            self.requests.append(request.path)
            if request.path not in self.objects:
                return web.json_response({"kind": "Status", "code": 404}, status=404)
            return web.json_response(self.objects[request.path])

        app = web.Application()
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", review)
        app.router.add_get("/{path:.*}", read)
        return app


def owned(kind: str, name: str, uid: str) -> list[dict]:
    return [{"apiVersion": "x/v1", "kind": kind, "name": name, "uid": uid, "controller": True}]


HEAD = "/api/v1/namespaces/ns/pods/job-head"
OBJECTS = {
    HEAD: {
        "metadata": {
            "name": "job-head",
            "namespace": "ns",
            "uid": "pod-1",
            "labels": {"rlplace.io/job": "job"},
            "ownerReferences": owned("RayCluster", "job-rc", "rc-1"),
        }
    },
    "/apis/ray.io/v1/namespaces/ns/rayclusters/job-rc": {
        "metadata": {"name": "job-rc", "uid": "rc-1", "ownerReferences": owned("RayJob", "job", "rj-1")}
    },
    "/apis/ray.io/v1/namespaces/ns/rayjobs/job": {
        "metadata": {"name": "job", "uid": "rj-1", "ownerReferences": owned("RLJob", "job", "rl-1")}
    },
    "/apis/rlplace.io/v1alpha1/namespaces/ns/rljobs/job": {"metadata": {"name": "job", "uid": "rl-1"}},
    "/api/v1/namespaces/ns/pods/forged": {
        "metadata": {"name": "forged", "namespace": "ns", "uid": "pod-2", "labels": {"rlplace.io/job": "job"}}
    },
}


def pod_review(pod: str, uid: str) -> dict:
    extra = {"authentication.kubernetes.io/pod-name": [pod], "authentication.kubernetes.io/pod-uid": [uid]}
    return {
        "authenticated": True,
        "audiences": [PROGRESS_AUDIENCE],
        "user": {"username": "system:serviceaccount:ns:default", "uid": "sa", "extra": extra},
    }


def identify_against(api: StandInApi, token: str) -> Caller | Refused:
    from kubernetes import client as k8s

    from rlplace_operator.kube import Kube
    from rlplace_operator.server.progress import KubeIdentify

    async def main() -> Caller | Refused:
        runner = web.AppRunner(api.app())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        configuration = k8s.Configuration()
        configuration.host = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            return await asyncio.to_thread(KubeIdentify(Kube(k8s.ApiClient(configuration))), token)
        except Refused as refused:
            return refused
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def test_a_head_pods_token_is_its_job_through_its_owners() -> None:
    api = StandInApi({"good": pod_review("job-head", "pod-1")}, OBJECTS)
    caller = identify_against(api, "good")
    assert isinstance(caller, Caller) and caller.job == ("ns", "job") and caller.pod == "job-head"
    assert caller.expires > time.monotonic() + 500  # no exp claim: the cache's own bound


@pytest.mark.parametrize(
    ("token", "status", "words"),
    [
        ("bad", 401, "token not valid"),
        ("forged", 403, "not owned by it"),  # labelled for the job, owned by nothing
        ("replaced", 403, "was replaced"),  # the pod's name came back with another uid
        ("user", 403, "not a pod's ServiceAccount token"),
    ],
)
def test_tokens_that_are_not_a_jobs_pod_are_refused(token: str, status: int, words: str) -> None:
    user = {"authenticated": True, "audiences": [PROGRESS_AUDIENCE], "user": {"username": "alice"}}
    reviews = {
        "forged": pod_review("forged", "pod-2"),
        "replaced": pod_review("job-head", "pod-0"),
        "user": user,
    }
    refused = identify_against(StandInApi(reviews, OBJECTS), token)
    assert isinstance(refused, Refused) and refused.status == status and words in str(refused), refused


def test_without_the_tokenreview_grant_the_answer_says_what_to_grant() -> None:
    refused = identify_against(StandInApi({}, OBJECTS, review_status=403), "good")
    assert isinstance(refused, Refused) and refused.status == 503 and "create` on tokenreviews" in str(refused)


def test_an_api_server_out_of_reach_is_the_operators_503_not_a_crash() -> None:
    """Seen in a full run's operator log (the API server restarting under a test): the TokenReview's connection
    error escaped the handler, aiohttp answered 500 and logged a traceback."""
    from kubernetes import client as k8s

    from rlplace_operator.kube import Kube
    from rlplace_operator.server.progress import KubeIdentify

    configuration = k8s.Configuration()
    configuration.host = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    configuration.retries = 0
    with pytest.raises(Refused) as refused:
        KubeIdentify(Kube(k8s.ApiClient(configuration)))("good")
    assert refused.value.status == 503 and "the API server could not be reached" in str(refused.value)


def test_a_report_whose_connection_is_lost_while_it_is_read_is_refused_quietly() -> None:
    class CutOff:
        def __init__(self) -> None:
            self.match_info = {"namespace": "ns", "name": "a"}
            self.headers = {"Authorization": "Bearer token-a"}

        async def read(self) -> bytes:
            raise ConnectionResetError("Connection lost")

    async def main() -> web.Response:
        service = ProgressService(identify, lambda *_: ProgressWrite.WRITTEN, interval=0.1)
        try:
            return await service.handle(CutOff())  # type: ignore[arg-type]
        finally:
            service.close()

    answer = asyncio.run(main())
    assert answer.status == 400 and "connection was lost" in answer.text


# -- the operator's start-up serves both ------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_operator_startup_serves_the_endpoint_and_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    import kopf
    from kubernetes import client as k8s

    from rlplace_operator.controllers import operator as main

    configuration = k8s.Configuration()
    configuration.host = "http://127.0.0.1:1"  # never called: the requests below carry no token
    monkeypatch.setattr(main, "api_client", lambda _pool: k8s.ApiClient(configuration))
    progress_port, metrics_port = free_port(), free_port()

    async def scenario() -> None:
        memo = kopf.Memo(serving=main.Serving(progress_port, "http://op.svc:8081", metrics_port))
        await main.serve_progress(memo=memo, logger=logging.getLogger("test"))
        try:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{progress_port}{progress_path('ns', 'job')}"
                async with session.post(url, data="{}") as response:
                    assert response.status == 401
                async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as response:
                    assert (
                        response.status == 200
                        and 'rlplace_progress_reports_total{code="401"} 1.0' in await response.text()
                    )
        finally:
            await main.stop_serving(memo=memo)

    asyncio.run(scenario())


def test_a_write_held_up_by_the_api_server_never_lands_after_a_newer_one() -> None:
    """Seen under chaos (an apiserver restart): a planned write that waited for the API server landed after the
    one a new checkpoint sent at once, and the job's reported iteration went back from 55 to 50."""
    landed: list[int] = []
    first = threading.Event()

    def write(key: JobKey, progress: dict[str, Any], cluster: str | None) -> ProgressWrite:
        if not landed and not first.is_set():
            first.set()
            time.sleep(1.0)  # the API server is away: this request hangs
        landed.append(progress["iteration"])
        return ProgressWrite.WRITTEN

    async def main() -> None:
        service = ProgressService(identify, write, interval=0.1)
        service.accept(("ns", "a"), report(50, wall=1.0, a=1.0))  # written at once, and held up
        await asyncio.sleep(0.2)
        service.accept(("ns", "a"), report(55, wall=1.0, checkpoint=55, a=1.0))  # a new checkpoint: at once
        await service.drain()
        service.close()

    asyncio.run(main())
    assert landed == sorted(landed) and landed[-1] == 55, landed
