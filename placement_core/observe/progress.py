"""Per-component step times from a driver: time each component's phase, report each iteration.

    from placement_core.observe.progress import StepTimer, reporter_from_env
    reporter = reporter_from_env()                  # a log line per iteration, and POSTs when configured
    for iteration in range(start, steps + 1):
        timer = StepTimer()
        with timer.phase("rollout"):
            generate()
        with timer.phase("actor"):
            train()
        with timer.phase("weight_sync", weight_sync=True):
            sync_weights()
        reporter.report(timer.report(iteration))
    reporter.close()

An `IterationReport` is typed and has one wire form (`to_json`/`from_json`, camelCase like the RLJob's status).
Reporters: `LogReporter` prints `rlplace-progress: <json>` (contract.PROGRESS_REPORT_PREFIX) on one line per
iteration; `HttpReporter` POSTs the JSON to $RLPLACE_PROGRESS_URL with the bearer token in
$RLPLACE_PROGRESS_TOKEN_FILE, at most one POST per `min_interval_s` (the latest report wins), from a background
thread, so `report()` never waits on the network. The operator writes them to the job's status.progress
(docs/progress.md).
The operator asks a driver to checkpoint now (before it stops the job: Kueue preemption) in the answer to a POST
(`ProgressAnswer.checkpoint`); `Reporter.checkpoint_requested()` says so, and a report carries the step of the
driver's newest checkpoint (`IterationReport.checkpoint_step`), sent at once when it is new (docs/driver.md).
Frameworks that already time their phases (RLinf, veRL, NeMo-RL, OpenRLHF) can turn their metric dicts into a
report with `observe.adapters`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol

from placement_core.contract import PROGRESS_REPORT_PREFIX, PROGRESS_TOKEN_FILE_ENV, PROGRESS_URL_ENV


@dataclass(frozen=True, slots=True)
class ComponentTime:
    """Seconds one component was busy in an iteration (summed over its phases)."""

    name: str
    seconds: float


@dataclass(frozen=True)
class IterationReport:
    """One iteration as the driver measured it."""

    iteration: int
    components: tuple[ComponentTime, ...]
    """In the order the driver timed them; each name once."""
    weight_sync_seconds: float | None = None
    """Time spent moving the trained weights to the generation engines, when the driver knows it."""
    iteration_seconds: float | None = None
    """Wall-clock seconds of the whole iteration (components may overlap, so not their sum)."""
    time: float = field(default_factory=time.time)
    """When the iteration ended (Unix seconds)."""
    checkpoint_step: int | None = None
    """The step of the newest checkpoint the driver has (a restart resumes after it), when it has one."""

    def __post_init__(self) -> None:
        if self.iteration < 0:
            raise ValueError(f"iteration must be 0 or more, got {self.iteration}")
        if self.checkpoint_step is not None and self.checkpoint_step < 0:
            raise ValueError(f"checkpoint step must be 0 or more, got {self.checkpoint_step}")
        names = [c.name for c in self.components]
        if len(set(names)) != len(names):
            raise ValueError(f"a component is reported twice: {names}")
        values = [c.seconds for c in self.components] + [self.weight_sync_seconds, self.iteration_seconds]
        for value in values:
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"seconds must be finite and 0 or more, got {value}")

    def seconds(self) -> dict[str, float]:
        return {c.name: c.seconds for c in self.components}

    def bottleneck(self) -> str | None:
        """The component that was busy longest (None with no components)."""
        return max(self.components, key=lambda c: c.seconds).name if self.components else None

    def to_json(self) -> str:
        raw: dict[str, object] = {
            "iteration": self.iteration,
            "components": [{"name": c.name, "seconds": round(c.seconds, 6)} for c in self.components],
            "time": round(self.time, 3),
        }
        if self.weight_sync_seconds is not None:
            raw["weightSyncSeconds"] = round(self.weight_sync_seconds, 6)
        if self.iteration_seconds is not None:
            raw["iterationSeconds"] = round(self.iteration_seconds, 6)
        if self.checkpoint_step is not None:
            raw["checkpointStep"] = self.checkpoint_step
        return json.dumps(raw, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> IterationReport:
        """The report back from `to_json`; anything else is a one-line ValueError."""
        try:
            raw = json.loads(text)
            components = tuple(ComponentTime(str(c["name"]), _number(c["seconds"])) for c in raw["components"])
            checkpoint_step = raw.get("checkpointStep")
            return cls(
                _integer("iteration", raw["iteration"]),
                components,
                _optional(raw.get("weightSyncSeconds")),
                _optional(raw.get("iterationSeconds")),
                _number(raw["time"]),
                None if checkpoint_step is None else _integer("checkpointStep", checkpoint_step),
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not an iteration report: {type(err).__name__}: {err}") from None


@dataclass(frozen=True)
class ProgressAnswer:
    """The operator's answer to an accepted report (HTTP 202), in one wire form for both sides."""

    accepted: int
    """The iteration accepted."""
    checkpoint: bool = False
    """The operator asks the driver to save a checkpoint now and report its step (it is about to stop the job:
    Kueue preempted it). Answered to every report until the job stops or the request is withdrawn; it is one
    request."""

    def to_json(self) -> str:
        raw: dict[str, object] = {"accepted": self.accepted}
        if self.checkpoint:
            raw["checkpoint"] = True
        return json.dumps(raw, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> ProgressAnswer:
        """The answer back from `to_json`; anything else is a one-line ValueError."""
        try:
            raw = json.loads(text)
            checkpoint = raw.get("checkpoint", False)
            if not isinstance(checkpoint, bool):
                raise ValueError(f"checkpoint {checkpoint!r} is not a boolean")
            return cls(_integer("accepted", raw["accepted"]), checkpoint)
        except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a progress answer: {type(err).__name__}: {err}") from None


def _integer(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} {value!r} is not an integer")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{value!r} is not a number")
    return float(value)


def _optional(value: object) -> float | None:
    return None if value is None else _number(value)


class StepTimer:
    """Times the phases of one iteration; a component timed twice gets the sum. Components are reported in
    `order` (those not in it after, as first timed), whichever finished first."""

    def __init__(self, order: Sequence[str] = ()) -> None:
        self._order = {name: index for index, name in enumerate(order)}
        self._started = time.perf_counter()
        self._seconds: dict[str, float] = {}
        self._weight_sync: float | None = None
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def phase(self, component: str, weight_sync: bool = False) -> Iterator[None]:
        """Time the block as `component`'s (or, with `weight_sync`, as the weight sync). Thread-safe, so
        phases of components that run at the same time may be timed from their own threads."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(component, time.perf_counter() - start, weight_sync)

    def add(self, component: str, seconds: float, weight_sync: bool = False) -> None:
        """Add seconds measured elsewhere (e.g. inside a worker) to a component, or to the weight sync."""
        with self._lock:
            if weight_sync:
                self._weight_sync = (self._weight_sync or 0.0) + seconds
            else:
                self._seconds[component] = self._seconds.get(component, 0.0) + seconds

    def report(self, iteration: int, checkpoint_step: int | None = None) -> IterationReport:
        """The iteration's report, its wall-clock time measured from when the timer was made; `checkpoint_step`:
        the driver's newest checkpoint, when it has one."""
        with self._lock:
            names = sorted(self._seconds, key=lambda name: self._order.get(name, len(self._order)))
            components = tuple(ComponentTime(name, self._seconds[name]) for name in names)
            return IterationReport(
                iteration,
                components,
                self._weight_sync,
                time.perf_counter() - self._started,
                time.time(),
                checkpoint_step,
            )


# -- reporters -----------------------------------------------------------------------------------------


class Reporter(Protocol):
    """Where iteration reports go. `report` must return at once; `close` flushes what is pending;
    `checkpoint_requested` says whether the operator asked for a checkpoint that no report has carried since."""

    def report(self, report: IterationReport) -> None: ...

    def checkpoint_requested(self) -> bool: ...

    def close(self) -> None: ...


def progress_line(report: IterationReport) -> str:
    """The log line for a report: the contract's prefix and the JSON."""
    return PROGRESS_REPORT_PREFIX + report.to_json()


def find_progress(log: str) -> list[IterationReport]:
    """Every iteration report printed in a driver's log, in order (lines that only look like one skipped)."""
    found = []
    for line in log.splitlines():
        start = line.find(PROGRESS_REPORT_PREFIX)
        if start < 0:
            continue
        with contextlib.suppress(ValueError):
            found.append(IterationReport.from_json(line[start + len(PROGRESS_REPORT_PREFIX) :]))
    return found


class LogReporter:
    """One `rlplace-progress: {...}` line per iteration on `stream` (stdout by default)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream

    def report(self, report: IterationReport) -> None:
        print(progress_line(report), file=self._stream or sys.stdout, flush=True)

    def checkpoint_requested(self) -> bool:
        return False  # a log line gets no answer

    def close(self) -> None:
        pass


class HttpReporter:
    """POSTs each report's JSON to `url`, throttled and off the training loop.

    `report()` puts the report in a one-slot mailbox (a newer report replaces one not yet sent: the latest
    wins) and returns; a background thread sends at most one POST per `min_interval_s`, with
    `Authorization: Bearer <token>` read from `token_file` before each POST (projected tokens are rotated).
    A failed POST is counted in `failures` and noted once on stderr; it never reaches the driver, and the
    next report is tried as usual. `close()` sends what is pending (waiting up to `close_timeout_s`).

    Checkpoints: a report whose `checkpoint_step` is newer than any before is sent at once, not held back by
    `min_interval_s`, so the operator learns of a checkpoint within a POST. The answer of each POST is read
    (`ProgressAnswer`); `checkpoint_requested()` is True from an answer that asks for a checkpoint until a
    report carries a checkpoint newer than the one the answered report carried. The operator asks in every
    answer until it stops the job, so those answers are one request; an answer that does not ask ends it.
    """

    def __init__(
        self,
        url: str,
        token_file: str | None = None,
        min_interval_s: float = 5.0,
        timeout_s: float = 5.0,
        close_timeout_s: float = 5.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"progress URL must start with http:// or https://, got '{url}'")
        self.url = url
        self.token_file = token_file
        self.min_interval_s = min_interval_s
        self.timeout_s = timeout_s
        self.close_timeout_s = close_timeout_s
        self.sent = 0
        self.failures = 0
        self.last_error: str | None = None
        self._pending: IterationReport | None = None
        self._send_now = False
        """The pending report carries a new checkpoint: the interval is not waited out."""
        self._newest_checkpoint: int | None = None
        """The newest checkpoint step any report carried."""
        self._asked = False
        """The latest answer asked for a checkpoint."""
        self._requested = False
        """A checkpoint was asked for and no report carried one since."""
        self._closing = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="rlplace-progress", daemon=True)
        self._thread.start()

    def report(self, report: IterationReport) -> None:
        with self._wake:
            if _newer(report.checkpoint_step, self._newest_checkpoint):
                self._newest_checkpoint = report.checkpoint_step
                self._send_now = True
                self._requested = False  # newer than any answered report carried: the request is met
            self._pending = report
            self._wake.notify()

    def checkpoint_requested(self) -> bool:
        with self._wake:
            return self._requested

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join(self.close_timeout_s)

    def _run(self) -> None:
        last_post = -math.inf
        while True:
            with self._wake:
                while self._pending is None and not self._closing:
                    self._wake.wait()
                if self._pending is None:
                    return
                # Throttle: wait out the interval (a close or a new checkpoint cuts the wait short); reports
                # arriving meanwhile replace the pending one, so the POST carries the latest.
                while not self._closing and not self._send_now:
                    remaining = last_post + self.min_interval_s - time.monotonic()
                    if remaining <= 0:
                        break
                    self._wake.wait(remaining)
                report, self._pending, self._send_now = self._pending, None, False
                closing = self._closing
            last_post = time.monotonic()
            answer = self._post(report)
            if answer is not None:
                self._heard(report, answer)
            if closing:
                with self._wake:
                    if self._pending is None:
                        return

    def _post(self, report: IterationReport) -> bytes | None:
        """POST the report; the answer's body, or None when the POST failed."""
        headers = {"Content-Type": "application/json"}
        try:
            if self.token_file:
                with open(self.token_file, encoding="utf-8") as file:
                    headers["Authorization"] = f"Bearer {file.read().strip()}"
            request = urllib.request.Request(self.url, report.to_json().encode(), headers, method="POST")
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
            self.sent += 1
            return body
        except (OSError, urllib.error.URLError, ValueError) as err:
            self.failures += 1
            if self.last_error is None:
                print(
                    f"rlplace: progress POST to {self.url} failed: {err} (further failures are counted)",
                    file=sys.stderr,
                )
            self.last_error = str(err)
            return None

    def _heard(self, report: IterationReport, body: bytes) -> None:
        """Take the operator's answer to `report`: a request for a checkpoint starts when an answer first asks."""
        try:
            answer = ProgressAnswer.from_json(body)
        except ValueError:
            return  # an endpoint that answers something else asks for nothing
        with self._wake:
            if answer.checkpoint and not self._asked:
                # A checkpoint reported after the answered one (sent meanwhile) already meets the request.
                self._requested = not _newer(self._newest_checkpoint, report.checkpoint_step)
            elif not answer.checkpoint:
                self._requested = False  # withdrawn
            self._asked = answer.checkpoint


def _newer(step: int | None, than: int | None) -> bool:
    """Whether checkpoint `step` is newer than `than` (None: no checkpoint)."""
    return step is not None and (than is None or step > than)


class Reporters:
    """Several reporters as one."""

    def __init__(self, *reporters: Reporter) -> None:
        self.reporters = reporters

    def report(self, report: IterationReport) -> None:
        for reporter in self.reporters:
            reporter.report(report)

    def checkpoint_requested(self) -> bool:
        return any(reporter.checkpoint_requested() for reporter in self.reporters)

    def close(self) -> None:
        for reporter in self.reporters:
            reporter.close()


def reporter_from_env(environ: Mapping[str, str] | None = None, min_interval_s: float = 5.0) -> Reporter:
    """The log reporter, plus an HttpReporter when $RLPLACE_PROGRESS_URL is set."""
    env = os.environ if environ is None else environ
    url = env.get(PROGRESS_URL_ENV)
    if not url:
        return LogReporter()
    return Reporters(LogReporter(), HttpReporter(url, env.get(PROGRESS_TOKEN_FILE_ENV) or None, min_interval_s))
