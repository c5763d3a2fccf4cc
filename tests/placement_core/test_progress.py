"""Per-component step times: the timer, the report's wire form, the log and HTTP reporters (a real local HTTP
server; the operator's request for a checkpoint in its answers), and the adapters over metric dicts written from
what RLinf, veRL, NeMo-RL and OpenRLHF log."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from placement_core import contract
from placement_core.observe import adapters
from placement_core.observe.progress import (
    ComponentTime,
    HttpReporter,
    IterationReport,
    LogReporter,
    ProgressAnswer,
    Reporters,
    StepTimer,
    find_progress,
    progress_line,
    reporter_from_env,
)


def test_names_in_the_contract() -> None:
    assert contract.PROGRESS_REPORT_PREFIX == "rlplace-progress: "
    assert contract.PROGRESS_URL_ENV == "RLPLACE_PROGRESS_URL"
    assert contract.PROGRESS_TOKEN_FILE_ENV == "RLPLACE_PROGRESS_TOKEN_FILE"


def test_the_timer_sums_phases_per_component_and_keeps_weight_sync_apart() -> None:
    timer = StepTimer()
    with timer.phase("rollout"):
        time.sleep(0.05)
    with timer.phase("actor"):
        time.sleep(0.02)
    with timer.phase("actor"):
        time.sleep(0.02)
    with timer.phase("sync", weight_sync=True):
        time.sleep(0.01)
    timer.add("reward", 1.5)
    report = timer.report(7)
    seconds = report.seconds()
    assert list(seconds) == ["rollout", "actor", "reward"]
    # Floors exact; ceilings loose (a sleep overshoots on a loaded machine).
    assert 0.05 <= seconds["rollout"] < 1.0 and 0.04 <= seconds["actor"] < 1.0 and seconds["reward"] == 1.5
    assert 0.01 <= report.weight_sync_seconds < 1.0
    assert report.iteration_seconds >= 0.1
    assert (report.iteration, report.bottleneck()) == (7, "reward")
    ordered = StepTimer(order=["actor", "rollout"])
    ordered.add("other", 1.0)
    ordered.add("rollout", 1.0)
    ordered.add("actor", 1.0)
    assert [c.name for c in ordered.report(1).components] == ["actor", "rollout", "other"]


def test_a_phase_that_raises_is_still_timed() -> None:
    timer = StepTimer()
    with pytest.raises(RuntimeError), timer.phase("actor"):
        raise RuntimeError("oom")
    assert "actor" in timer.report(1).seconds()


def test_wire_form_round_trips_and_bad_text_is_one_line() -> None:
    report = IterationReport(3, (ComponentTime("actor", 1.25), ComponentTime("rollout", 2.5)), 0.5, 4.0, 1700000000.0)
    text = report.to_json()
    assert json.loads(text) == {
        "iteration": 3,
        "components": [{"name": "actor", "seconds": 1.25}, {"name": "rollout", "seconds": 2.5}],
        "weightSyncSeconds": 0.5,
        "iterationSeconds": 4.0,
        "time": 1700000000.0,
    }
    assert IterationReport.from_json(text) == report
    bare = IterationReport(1, (ComponentTime("a", 1.0),), time=5.0)
    assert IterationReport.from_json(bare.to_json()) == bare
    for bad in ("{", '{"iteration": "1", "components": [], "time": 1}', '{"iteration": 1, "components": [{}]}'):
        with pytest.raises(ValueError, match=r"^not an iteration report: "):
            IterationReport.from_json(bad)
    saved = IterationReport(9, (ComponentTime("a", 1.0),), time=5.0, checkpoint_step=8)
    assert json.loads(saved.to_json())["checkpointStep"] == 8 and "checkpointStep" not in bare.to_json()
    assert IterationReport.from_json(saved.to_json()) == saved
    with pytest.raises(ValueError, match=r"^not an iteration report: .*checkpointStep '8' is not an integer"):
        IterationReport.from_json(saved.to_json().replace('"checkpointStep":8', '"checkpointStep":"8"'))


def test_the_operators_answer_round_trips_and_asks_for_a_checkpoint_only_when_it_says_so() -> None:
    assert ProgressAnswer(4).to_json() == '{"accepted":4}'
    assert ProgressAnswer(4, checkpoint=True).to_json() == '{"accepted":4,"checkpoint":true}'
    for answer in (ProgressAnswer(4), ProgressAnswer(4, checkpoint=True)):
        assert ProgressAnswer.from_json(answer.to_json()) == answer
    for bad in (b"", b"[]", b'{"accepted": 4, "checkpoint": "yes"}', b'{"checkpoint": true}'):
        with pytest.raises(ValueError, match=r"^not a progress answer: "):
            ProgressAnswer.from_json(bad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"iteration": -1}, "iteration must be 0 or more"),
        ({"components": (ComponentTime("a", 1), ComponentTime("a", 2))}, "a component is reported twice"),
        ({"components": (ComponentTime("a", float("nan")),)}, "seconds must be finite"),
        ({"weight_sync_seconds": -1.0}, "seconds must be finite and 0 or more, got -1.0"),
        ({"checkpoint_step": -1}, "checkpoint step must be 0 or more, got -1"),
    ],
)
def test_impossible_reports_are_refused(kwargs: dict, message: str) -> None:
    fields = {"iteration": 1, "components": (ComponentTime("a", 1.0),), **kwargs}
    with pytest.raises(ValueError, match=message):
        IterationReport(**fields)


def test_the_log_reporter_prints_one_prefixed_line_per_iteration_and_they_are_found_again() -> None:
    stream = io.StringIO()
    reporter = LogReporter(stream)
    reports = [IterationReport(i, (ComponentTime("actor", float(i)),), time=1.0) for i in (1, 2)]
    for report in reports:
        reporter.report(report)
    log = "noise\n" + stream.getvalue() + "rlplace-progress: {cut\n"
    assert stream.getvalue().splitlines()[0] == progress_line(reports[0])
    assert stream.getvalue().startswith("rlplace-progress: {")
    assert find_progress(log) == reports


# -- the HTTP reporter against a real server ------------------------------------------------------------


class Recorder(BaseHTTPRequestHandler):
    received: list[tuple[dict, str | None]]
    delay_s = 0.0
    status = 200
    checkpoint = False
    """Answer as the operator does when it wants the job's driver to checkpoint."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.delay_s)
        report = json.loads(body)
        type(self).received.append((report, self.headers.get("Authorization")))
        answer = ProgressAnswer(report["iteration"], self.checkpoint).to_json().encode()
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[Recorder]]]:
    handler = type("Handler", (Recorder,), {"received": [], "delay_s": 0.0, "status": 200, "checkpoint": False})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # A short poll: shutdown() waits for it (the default 0.5 s was half a second of every test here).
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/progress", handler
    httpd.shutdown()


def report_of(iteration: int) -> IterationReport:
    return IterationReport(iteration, (ComponentTime("actor", 1.0),))


def test_posts_are_throttled_the_latest_wins_and_the_token_is_reread(server, tmp_path) -> None:
    url, handler = server
    token = tmp_path / "token"
    token.write_text("first\n")
    reporter = HttpReporter(url, str(token), min_interval_s=0.3)
    start = time.monotonic()
    for iteration in range(1, 101):  # a fast loop: 100 iterations in ~1 s
        reporter.report(report_of(iteration))
        if iteration == 50:
            token.write_text("rotated")
        time.sleep(0.01)
    reporter.close()
    elapsed = time.monotonic() - start
    iterations = [body["iteration"] for body, _ in handler.received]
    assert iterations[-1] == 100  # the last report is never lost
    assert iterations == sorted(iterations) and len(set(iterations)) == len(iterations)
    assert 2 <= len(iterations) <= elapsed / 0.3 + 2, iterations
    assert {auth for _, auth in handler.received} == {"Bearer first", "Bearer rotated"}
    assert reporter.sent == len(iterations) and reporter.failures == 0


def test_report_never_waits_on_a_slow_or_dead_server(server, capsys) -> None:
    url, handler = server
    handler.delay_s = 1.0
    reporter = HttpReporter(url, min_interval_s=0.0, close_timeout_s=3)
    took = []
    for iteration in range(20):
        start = time.perf_counter()
        reporter.report(report_of(iteration))
        took.append(time.perf_counter() - start)
    assert max(took) < 0.05, took
    reporter.close()
    assert len(handler.received) <= 3
    dead = HttpReporter("http://127.0.0.1:9/nothing", min_interval_s=0.0, timeout_s=1)
    dead.report(report_of(1))
    dead.report(report_of(2))
    dead.close()
    assert dead.failures >= 1 and dead.sent == 0
    assert capsys.readouterr().err.count("rlplace: progress POST to http://127.0.0.1:9/nothing failed") == 1


def until(condition: Callable[[], bool], timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_checkpoint_request_is_seen_and_the_checkpoint_is_reported_at_once(server) -> None:
    url, handler = server
    handler.checkpoint = True
    reporter = HttpReporter(url, min_interval_s=60.0, close_timeout_s=3)  # after the first POST, only
    start = time.monotonic()  # a new checkpoint is sent before close
    reporter.report(report_of(1))
    assert until(reporter.checkpoint_requested), "the answer's request was not seen"
    reporter.report(report_of(2))  # held back: the interval
    reporter.report(IterationReport(3, (ComponentTime("actor", 1.0),), checkpoint_step=3))
    assert until(lambda: reporter.sent == 2)
    assert time.monotonic() - start < 5
    assert [(body["iteration"], body.get("checkpointStep")) for body, _ in handler.received] == [(1, None), (3, 3)]
    # The answer to the checkpoint's report asks again: the same request, met by that checkpoint.
    assert not reporter.checkpoint_requested()
    handler.checkpoint = False  # withdrawn ...
    reporter.report(IterationReport(4, (ComponentTime("actor", 1.0),), checkpoint_step=4))
    assert until(lambda: reporter.sent == 3) and not reporter.checkpoint_requested()
    handler.checkpoint = True  # ... and asked again: a new request
    reporter.report(IterationReport(5, (ComponentTime("actor", 1.0),), checkpoint_step=5))
    assert until(reporter.checkpoint_requested)
    reporter.report(IterationReport(6, (ComponentTime("actor", 1.0),), checkpoint_step=5))  # not new: held back
    time.sleep(0.2)
    assert reporter.sent == 4 and reporter.checkpoint_requested()
    reporter.close()
    assert [body["iteration"] for body, _ in handler.received] == [1, 3, 4, 5, 6] and reporter.failures == 0
    assert not LogReporter().checkpoint_requested() and Reporters(LogReporter(), reporter).checkpoint_requested()


def test_reporter_from_env(server, tmp_path, capsys) -> None:
    url, handler = server
    assert isinstance(reporter_from_env({}), LogReporter)
    both = reporter_from_env({"RLPLACE_PROGRESS_URL": url}, min_interval_s=0.0)
    assert isinstance(both, Reporters)
    both.report(report_of(4))
    both.close()
    assert [body["iteration"] for body, _ in handler.received] == [4]
    assert [r.iteration for r in find_progress(capsys.readouterr().out)] == [4]
    with pytest.raises(ValueError, match=r"^progress URL must start with http:// or https://, got 'ftp://x'$"):
        reporter_from_env({"RLPLACE_PROGRESS_URL": "ftp://x"})


# -- adapters: metric dicts as the frameworks log them ----------------------------------------------------

#: veRL's trainer metrics of one step (keys as in its logged lines: `timing_s/<phase>` in seconds).
VERL_STEP = {
    "training/global_step": 302,
    "actor/pg_loss": -0.0013,
    "actor/grad_norm": 0.0032,
    "critic/score/mean": 0.91,
    "timing_s/gen": 228.2,
    "timing_s/reward": 29.1,
    "timing_s/old_log_prob": 32.0,
    "timing_s/ref": 21.5,
    "timing_s/adv": 0.4,
    "timing_s/update_actor": 109.3,
    "timing_s/update_weights": 10.2,
    "timing_s/save_checkpoint": 55.0,
    "timing_s/step": 408.8,
    "timing_per_token_ms/gen": 0.052,
    "perf/throughput": 0.313,
}
#: RLinf's embodied runner metrics of one step (`time/<scope>` in seconds, env sub-scopes, rollout profile).
RLINF_STEP = {
    "time/step": 95.0,
    "time/generate_rollouts": 60.1,
    "time/actor_training": 30.2,
    "time/cal_adv_and_returns": 0.8,
    "time/sync_weights": 2.5,
    "time/env/interact": 41.0,
    "time/env/evaluate": 3.0,
    "time/eval": 12.0,
    "time/rollout/profile/peak_gpu_memory_mib": 20480.0,
    "train/actor/policy_loss": 0.11,
    "env/success_once": 0.42,
}
#: NeMo-RL's GRPO step metrics (`timing/train/<phase>` in seconds; refit under prepare_for_generation).
NEMO_RL_STEP = {
    "timing/train/total_step_time": 100.0,
    "timing/train/generation": 60.0,
    "timing/train/policy_and_reference_logprobs": 8.0,
    "timing/train/policy_training": 25.0,
    "timing/train/reward_calculation": 1.5,
    "timing/train/prepare_for_generation/total": 4.0,
    "timing/train/prepare_for_generation/transfer_and_update_weights": 3.2,
    "timing/train/checkpointing": 0.0,
    "timing/train/valid_tokens_per_sec_per_gpu": 10.0,
    "train/loss": -0.01,
}
#: OpenRLHF's PPO step status (`timing/<phase>` in seconds), and as its logger writes it (`train/` prefix).
OPENRLHF_STATUS = {
    "policy_loss": 0.21,
    "kl": 0.0012,
    "timing/make_experience": 80.0,
    "timing/ppo_train": 40.0,
    "timing/broadcast": 3.0,
    "generated_samples": ["prompt", "answer"],
}


def test_verl() -> None:
    report = adapters.from_verl(VERL_STEP)
    assert report.iteration == 302
    assert report.seconds() == pytest.approx({"rollout": 228.2, "reward": 29.1, "actor": 141.3, "reference": 21.5})
    assert (report.weight_sync_seconds, report.iteration_seconds, report.bottleneck()) == (10.2, 408.8, "rollout")


def test_rlinf() -> None:
    report = adapters.from_rlinf(RLINF_STEP, iteration=12)
    assert report.seconds() == pytest.approx({"rollout": 60.1, "actor": 31.0, "env": 41.0})
    assert (report.iteration, report.weight_sync_seconds, report.iteration_seconds) == (12, 2.5, 95.0)


def test_nemo_rl_sync_and_async() -> None:
    report = adapters.from_nemo_rl(NEMO_RL_STEP, iteration=5)
    assert report.seconds() == pytest.approx({"rollout": 60.0, "actor": 33.0, "reward": 1.5})
    assert (report.weight_sync_seconds, report.iteration_seconds) == (4.0, 100.0)
    asynchronous = {
        "timing/train/total_step_time": 40.0,
        "timing/train/exposed_generation": 12.0,
        "timing/train/policy_training": 25.0,
        "timing/train/weight_sync": 5.0,
    }
    report = adapters.from_nemo_rl(asynchronous, iteration=6)
    assert report.seconds() == {"rollout": 12.0, "actor": 25.0}
    assert report.weight_sync_seconds == 5.0


def test_openrlhf_status_and_logged_form() -> None:
    report = adapters.from_openrlhf(OPENRLHF_STATUS, iteration=9)
    assert report.seconds() == {"rollout": 80.0, "actor": 40.0}
    assert report.weight_sync_seconds == 3.0 and report.iteration_seconds is None
    logged = {"train/global_step": 9, **{f"train/{k}": v for k, v in OPENRLHF_STATUS.items()}}
    assert adapters.from_openrlhf(logged).seconds() == report.seconds()
    assert adapters.from_openrlhf(logged).iteration == 9


def test_numbers_as_frameworks_hold_them_and_bad_dicts() -> None:
    class Scalar:  # a numpy scalar or 0-d tensor: anything float() takes
        def __float__(self) -> float:
            return 2.0

    assert adapters.from_verl({"timing_s/gen": Scalar()}, iteration=1).seconds() == {"rollout": 2.0}
    with pytest.raises(ValueError, match=r"^no known timing keys in the metrics"):
        adapters.from_verl({"actor/pg_loss": 1.0}, iteration=1)
    with pytest.raises(ValueError, match=r"^no 'training/global_step' in the metrics; pass the iteration$"):
        adapters.from_verl({"timing_s/gen": 1.0})
    with pytest.raises(ValueError, match=r"^metric 'timing_s/gen' is not a number: 'fast'$"):
        adapters.from_verl({"timing_s/gen": "fast"}, iteration=1)
