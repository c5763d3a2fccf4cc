"""Per-component step times from a driver: time each component's phase, report each iteration.

    from placement_core.launcher.progress import StepTimer, reporter_from_env
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
Frameworks that already time their phases (RLinf, veRL, NeMo-RL, OpenRLHF) can turn their metric dicts into a
report with `launcher.adapters`.
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

    def __post_init__(self) -> None:
        if self.iteration < 0:
            raise ValueError(f"iteration must be 0 or more, got {self.iteration}")
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
        return json.dumps(raw, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> IterationReport:
        """The report back from `to_json`; anything else is a one-line ValueError."""
        try:
            raw = json.loads(text)
            components = tuple(ComponentTime(str(c["name"]), _number(c["seconds"])) for c in raw["components"])
            iteration = raw["iteration"]
            if not isinstance(iteration, int) or isinstance(iteration, bool):
                raise ValueError(f"iteration {iteration!r} is not an integer")
            return cls(
                iteration,
                components,
                _optional(raw.get("weightSyncSeconds")),
                _optional(raw.get("iterationSeconds")),
                _number(raw["time"]),
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not an iteration report: {type(err).__name__}: {err}") from None


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

    def report(self, iteration: int) -> IterationReport:
        """The iteration's report, its wall-clock time measured from when the timer was made."""
        with self._lock:
            names = sorted(self._seconds, key=lambda name: self._order.get(name, len(self._order)))
            components = tuple(ComponentTime(name, self._seconds[name]) for name in names)
            return IterationReport(
                iteration, components, self._weight_sync, time.perf_counter() - self._started, time.time()
            )


# -- reporters -----------------------------------------------------------------------------------------


class Reporter(Protocol):
    """Where iteration reports go. `report` must return at once; `close` flushes what is pending."""

    def report(self, report: IterationReport) -> None: ...

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

    def close(self) -> None:
        pass


class HttpReporter:
    """POSTs each report's JSON to `url`, throttled and off the training loop.

    `report()` puts the report in a one-slot mailbox (a newer report replaces one not yet sent: the latest
    wins) and returns; a background thread sends at most one POST per `min_interval_s`, with
    `Authorization: Bearer <token>` read from `token_file` before each POST (projected tokens are rotated).
    A failed POST is counted in `failures` and noted once on stderr; it never reaches the driver, and the
    next report is tried as usual. `close()` sends what is pending (waiting up to `close_timeout_s`).
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
        self._closing = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="rlplace-progress", daemon=True)
        self._thread.start()

    def report(self, report: IterationReport) -> None:
        with self._wake:
            self._pending = report
            self._wake.notify()

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
                # Throttle: wait out the interval (a close cuts the wait short); reports arriving meanwhile
                # replace the pending one, so the POST carries the latest.
                while not self._closing:
                    remaining = last_post + self.min_interval_s - time.monotonic()
                    if remaining <= 0:
                        break
                    self._wake.wait(remaining)
                report, self._pending = self._pending, None
                closing = self._closing
            last_post = time.monotonic()
            self._post(report)
            if closing:
                with self._wake:
                    if self._pending is None:
                        return

    def _post(self, report: IterationReport) -> None:
        headers = {"Content-Type": "application/json"}
        try:
            if self.token_file:
                with open(self.token_file, encoding="utf-8") as file:
                    headers["Authorization"] = f"Bearer {file.read().strip()}"
            request = urllib.request.Request(self.url, report.to_json().encode(), headers, method="POST")
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
            self.sent += 1
        except (OSError, urllib.error.URLError, ValueError) as err:
            self.failures += 1
            if self.last_error is None:
                print(
                    f"rlplace: progress POST to {self.url} failed: {err} (further failures are counted)",
                    file=sys.stderr,
                )
            self.last_error = str(err)


class Reporters:
    """Several reporters as one."""

    def __init__(self, *reporters: Reporter) -> None:
        self.reporters = reporters

    def report(self, report: IterationReport) -> None:
        for reporter in self.reporters:
            reporter.report(report)

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
