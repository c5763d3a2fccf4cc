"""`make test`: every phase of the suite, timed, with the e2e modules split over local clusters run side by side.

Phases (each one's time is printed at the end, with the 15 slowest tests, so a regression shows on the run that
made it):

- tools: the control plane's binaries (e2e/cluster/tools.sh, cached by version outside the repo);
- images: the real nodes' images (e2e/images/build.sh);
- lint: ruff and helm lint;
- unit: every test that needs no cluster (pytest -m 'not e2e'), while the clusters start; those that start a
  local Ray cluster last (tests/conftest.py);
- cluster start: with no KUBECONFIG, one local cluster per e2e shard (e2e/cluster/up.sh, RLPLACE_E2E_DIR
  .e2e/shard-<i>), started side by side; each has its own control plane, kwok and real nodes, operator, so no
  test of one shard can see another's jobs, nodes, NodeGroups or operator restarts;
- e2e: pytest -m e2e, one process per shard, each on its own cluster once that is up and the unit tests are
  done. The tests are dealt to the shards by
  their measured durations (tests/e2e/durations.json, overridden by every full run's .e2e/suite/durations.json),
  longest first, each to the shard with the fewest seconds so far; a shard runs its tests in collection order.

With KUBECONFIG set (a kind cluster, a real one) the e2e modules run in one process against that cluster,
unchanged. The clusters this script started are stopped at the end, also after a failure or Ctrl-C, before
the summary: the last lines are the failed tests, the phases and the count, whatever printed before them.

Usage: python tests/suite.py [--shards N] [--skip-build]      (make test runs it with the defaults)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
E2E_STATE = REPO / ".e2e"
RESULTS = E2E_STATE / "suite"
#: Per e2e test (pytest node id), its seconds on the 2-core machine: the shards are balanced with them.
TEST_SECONDS = REPO / "tests" / "e2e" / "durations.json"
#: The same, measured by this machine's last full run (it overrides the file above).
MEASURED_TEST_SECONDS = RESULTS / "durations.json"
#: A test in neither file (a new one) is taken to last this long.
UNKNOWN_TEST_SECONDS = 30.0
SLOWEST = 15
DEFAULT_SHARDS = 3


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    ok: bool = True
    note: str = ""


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    slow: list[tuple[float, str]] = field(default_factory=list)
    #: Each failed or errored test with the first line of its message.
    failures: list[str] = field(default_factory=list)

    def add(self, other: Counts) -> None:
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped
        self.errors += other.errors
        self.slow += other.slow
        self.failures += other.failures


def say(text: str) -> None:
    print(f"[suite] {text}", flush=True)


#: The commands running now (phases run side by side): stopped when the suite is interrupted.
RUNNING: set[subprocess.Popen[str]] = set()


def run(command: Sequence[str], *, env: dict[str, str] | None = None, prefix: str = "") -> int:
    """Run `command` from the repo root, its output streamed (each line prefixed when `prefix` is given)."""
    piped = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "bufsize": 1} if prefix else {}
    process = subprocess.Popen(list(command), cwd=REPO, env=env, text=True, **piped)  # type: ignore[call-overload]
    RUNNING.add(process)
    try:
        if process.stdout is not None:
            for line in process.stdout:
                sys.stdout.write(f"{prefix}{line}")
                sys.stdout.flush()
        return process.wait()
    finally:
        RUNNING.discard(process)


def stop_running() -> None:
    """Stop every command still running (SIGTERM, then SIGKILL after 10 s)."""
    for process in list(RUNNING):
        process.terminate()
    for process in list(RUNNING):
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def timed(phases: list[Phase], name: str, command: Sequence[str], *, note: str = "") -> bool:
    say(f"{name}: {' '.join(command)}")
    start = time.monotonic()
    rc = run(command)
    notes = [text for text in (note, "" if rc == 0 else f"exit {rc}") if text]
    phases.append(Phase(name, time.monotonic() - start, rc == 0, ", ".join(notes)))
    return rc == 0


def junit_counts(path: Path) -> Counts:
    """Passed, failed, skipped and errored tests of a pytest JUnit XML file, and each test's seconds."""
    counts = Counts()
    if not path.exists():
        return counts
    for case in ET.parse(path).getroot().iter("testcase"):
        name = node_id(case)
        seconds = float(case.get("time") or 0)
        kinds = {child.tag: child for child in case}
        problem = kinds.get("failure", kinds.get("error"))
        if problem is not None:
            counts.failures.append(f"{name}: {(problem.get('message') or problem.tag).splitlines()[0][:300]}")
        if "failure" in kinds:
            counts.failed += 1
        elif "error" in kinds:
            counts.errors += 1
        elif "skipped" in kinds:
            counts.skipped += 1
        else:
            counts.passed += 1
        counts.slow.append((seconds, name))
    return counts


def node_id(case: ET.Element) -> str:
    """The pytest node id of a JUnit testcase (tests/e2e/test_x.py::test_y[param])."""
    return f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"


def e2e_tests(python: str) -> list[str]:
    """The e2e tests' node ids in collection order (pytest --collect-only)."""
    listed = subprocess.run(
        [python, "-m", "pytest", "-m", "e2e", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    tests = [line.strip() for line in listed.stdout.splitlines() if "::" in line]
    if listed.returncode != 0 or not tests:
        raise SystemExit(f"collecting the e2e tests failed:\n{listed.stdout[-2000:]}{listed.stderr[-2000:]}")
    return tests


def deal(tests: Sequence[str], shards: int) -> list[list[str]]:
    """The tests dealt to `shards` shards: longest first, each to the shard with the fewest seconds so far; each
    shard keeps the collection order (module fixtures, and a module's tests in the order they are written)."""
    known: dict[str, float] = {}
    for source in (TEST_SECONDS, MEASURED_TEST_SECONDS):
        if source.exists():
            known.update(json.loads(source.read_text()))
    order = {test: index for index, test in enumerate(tests)}
    loads = [0.0] * shards
    dealt: list[list[str]] = [[] for _ in range(shards)]
    for test in sorted(tests, key=lambda t: (-known.get(t, UNKNOWN_TEST_SECONDS), order[t])):
        least = loads.index(min(loads))
        dealt[least].append(test)
        loads[least] += known.get(test, UNKNOWN_TEST_SECONDS)
    return [sorted(shard, key=order.__getitem__) for shard in dealt if shard]


def cluster_script(script: str, state_dir: Path, *, prefix: str, quiet: bool = False) -> int:
    """e2e/cluster/<script>.sh on the cluster of `state_dir` (its output prefixed, or dropped when `quiet`)."""
    env = {**os.environ, "RLPLACE_E2E_DIR": str(state_dir)}
    env.pop("KUBECONFIG", None)
    # Every shard's control plane starts at once, beside the unit tests: on 2 cores a component may take
    # longer than up.sh's default 90 s to answer.
    env.setdefault("RLPLACE_E2E_START_TIMEOUT", "180")
    if quiet:
        return subprocess.run(["bash", f"e2e/cluster/{script}.sh"], cwd=REPO, env=env, capture_output=True).returncode
    return run(["bash", f"e2e/cluster/{script}.sh"], env=env, prefix=prefix)


#: The images that need no tool of tools.sh, and those that wrap its pause and coredns binaries (together,
#: what `make images` builds).
IMAGES_WITHOUT_TOOLS = ("base", "ray", "ray-rlplace", "ray-rlinf-test", "operator")
IMAGES_OF_TOOLS = ("pause", "coredns")


def side_by_side(phases: list[Phase], commands: dict[str, Sequence[str]]) -> bool:
    """Run `commands` at once, each its own phase (its own time); each prefixes its own lines (e2e/ scripts)."""
    results: dict[str, int] = {}
    seconds: dict[str, float] = {}

    def one(name: str) -> None:
        begin = time.monotonic()
        results[name] = run(commands[name])
        seconds[name] = time.monotonic() - begin

    threads = [threading.Thread(target=one, args=(name,)) for name in commands]
    say(f"side by side: {', '.join(commands)}")
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in commands:
        rc = results.get(name, 1)
        phases.append(
            Phase(name, seconds.get(name, 0.0), rc == 0, "side by side" + ("" if rc == 0 else f", exit {rc}"))
        )
    return all(results.get(name) == 0 for name in commands)


def build(phases: list[Phase]) -> bool:
    """make tools and make images, with the images that need no tool built while the tools build (a cold
    machine spends most of its build here; warm, every step only checks its cache)."""
    if not timed(phases, "host packages", ["bash", "e2e/host-packages.sh"]):
        return False
    both = side_by_side(
        phases,
        {
            # With Prometheus and prometheus-operator: the monitoring e2e test starts them on its cluster.
            "tools": ["bash", "e2e/cluster/tools.sh", "--monitoring"],
            "images": ["bash", "e2e/images/build.sh", *IMAGES_WITHOUT_TOOLS],
        },
    )
    # The rest of `make images`: the images of the tools' pause and coredns binaries.
    return both and timed(phases, "tool images", ["bash", "e2e/images/build.sh", *IMAGES_OF_TOOLS])


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=int(os.environ.get("RLPLACE_E2E_SHARDS", DEFAULT_SHARDS)))
    parser.add_argument("--skip-build", action="store_true", help="no tools, images or lint phase")
    args = parser.parse_args()
    if args.shards < 1:
        parser.error("--shards must be at least 1")
    RESULTS.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    phases: list[Phase] = []
    counts = Counts()
    started_clusters: list[Path] = []
    wall = time.monotonic()

    def stop_clusters() -> None:
        # Side by side: each takes about 40 s, mostly waiting for processes to exit.
        stoppers = [
            threading.Thread(target=cluster_script, args=("down", d), kwargs={"prefix": f"[down {d.name}] "})
            for d in started_clusters
        ]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        started_clusters.clear()

    # Ctrl-C or CI's stop (SIGTERM): the clusters started here go down too.
    signal.signal(signal.SIGTERM, interrupted)
    try:
        ok = phases_in_order(args, python, phases, counts, started_clusters)
    except KeyboardInterrupt:
        say("interrupted")
        stop_running()
        ok = False
    finally:
        stop_clusters()
    return finish(phases, counts, wall, ok=ok)


def phases_in_order(
    args: argparse.Namespace, python: str, phases: list[Phase], counts: Counts, started_clusters: list[Path]
) -> bool:
    """Every phase, in order, until one fails; True when all passed. The clusters it starts are added to
    `started_clusters` (the caller stops them)."""
    if not args.skip_build:
        ok = build(phases)
        ok = timed(phases, "lint", ["make", "--no-print-directory", "lint"]) and ok
        if not ok:
            return False

    external = os.environ.get("KUBECONFIG")
    shards = deal(e2e_tests(python), 1 if external else args.shards)
    state_dirs: list[Path | None] = [None] if external else [E2E_STATE / f"shard-{i + 1}" for i in range(len(shards))]
    for index, tests in enumerate(shards):
        modules = sorted({test.split("::")[0].removeprefix("tests/e2e/").removesuffix(".py") for test in tests})
        say(f"e2e shard {index + 1}/{len(shards)}: {len(tests)} tests of {', '.join(modules)}")

    # Each shard starts its cluster while the unit tests run, and its tests once both are done. Starting the e2e
    # beside the unit tests gained nothing: with three clusters up the 2 cores are busy (load 20-40), the unit
    # tests took 630 s instead of 370 s, every shard ran slower, and a throttle test of 0.3 s failed.
    xmls = [RESULTS / f"e2e-{i + 1}.xml" for i in range(len(shards))]
    for xml in xmls:
        xml.unlink(missing_ok=True)
    e2e = E2eRun(python, shards, state_dirs, xmls, started_clusters)
    threads = [threading.Thread(target=e2e.shard, args=(i,), daemon=True) for i in range(len(shards))]
    for thread in threads:
        thread.start()
    unit_xml = RESULTS / "unit.xml"
    unit_ok = timed(
        phases,
        "unit",
        [python, "-m", "pytest", "-m", "not e2e", "-q", "-p", "no:cacheprovider", f"--junitxml={unit_xml}"],
        note="beside the clusters' start",
    )
    e2e.unit_done.set()
    counts.add(junit_counts(unit_xml))
    for thread in threads:
        thread.join()
    phases.extend(e2e.phases())
    counts.add(e2e.counts())
    return unit_ok and e2e.ok()


class E2eRun:
    """The e2e shards, each its own pytest process on its own cluster (started here unless KUBECONFIG is set;
    a state dir of None), side by side. Each shard's thread starts its cluster, then runs its tests once
    `unit_done` is set."""

    def __init__(
        self,
        python: str,
        shards: list[list[str]],
        state_dirs: list[Path | None],
        xmls: list[Path],
        started_clusters: list[Path],
    ) -> None:
        self.python, self.shards, self.state_dirs, self.xmls = python, shards, state_dirs, xmls
        self.started_clusters = started_clusters
        self.begin = time.monotonic()
        self.start_seconds: dict[int, float] = {}
        self.start_codes: dict[int, int] = {}
        self.spans: dict[int, tuple[float, float]] = {}
        self.results: dict[int, int] = {}
        self.lock = threading.Lock()
        self.unit_done = threading.Event()

    def start_cluster(self, state_dir: Path) -> int:
        """Up, or reused when it already runs healthy (a component died: started over)."""
        status = cluster_script("status", state_dir, prefix="", quiet=True)
        if status == 0:
            return 0
        if status == 2:
            cluster_script("down", state_dir, prefix=f"[{state_dir.name}] ")
        with self.lock:
            self.started_clusters.append(state_dir)
        return cluster_script("up", state_dir, prefix=f"[{state_dir.name}] ")

    def shard(self, index: int) -> None:
        env = dict(os.environ)
        state_dir = self.state_dirs[index]
        if state_dir is not None:
            began = time.monotonic()
            self.start_codes[index] = self.start_cluster(state_dir)
            self.start_seconds[index] = time.monotonic() - began
            if self.start_codes[index] != 0:
                return
            env["RLPLACE_E2E_DIR"] = str(state_dir)
        self.unit_done.wait()
        prefix = f"[e2e {index + 1}/{len(self.shards)}] " if len(self.shards) > 1 else ""
        command = [self.python, "-m", "pytest", "-m", "e2e", "-q", "-p", "no:cacheprovider"]
        command += [f"--junitxml={self.xmls[index]}", "-o", "junit_logging=system-out"]  # figures printed stay
        began = time.monotonic()
        self.results[index] = run([*command, *self.shards[index]], env=env, prefix=prefix)
        self.spans[index] = (began, time.monotonic())

    def phases(self) -> list[Phase]:
        phases = []
        if self.start_seconds:
            phases.append(
                Phase(
                    "cluster start",
                    max(self.start_seconds.values()),
                    all(rc == 0 for rc in self.start_codes.values()),
                    f"{len(self.start_seconds)} clusters side by side",
                )
            )
        if self.spans:
            first, last = min(b for b, _ in self.spans.values()), max(e for _, e in self.spans.values())
            shards = ", ".join(f"{end - began:.0f}" for _, (began, end) in sorted(self.spans.items()))
            note = f"{len(self.shards)} shard(s) of {shards} s, from {first - self.begin:.0f} s on"
            phases.append(Phase("e2e", last - first, self.ok(), note))
        return phases

    def ok(self) -> bool:
        return len(self.results) == len(self.shards) and all(rc in (0, 5) for rc in self.results.values())

    def counts(self) -> Counts:
        counts = Counts()
        measured: dict[str, float] = {}
        for xml in self.xmls:
            shard_counts = junit_counts(xml)
            counts.add(shard_counts)
            measured.update((name, seconds) for seconds, name in shard_counts.slow)
        if measured:
            known = json.loads(MEASURED_TEST_SECONDS.read_text()) if MEASURED_TEST_SECONDS.exists() else {}
            MEASURED_TEST_SECONDS.write_text(json.dumps({**known, **measured}, indent=1, sort_keys=True) + "\n")
        for index, code in sorted(self.start_codes.items()):
            if code != 0:
                counts.errors += 1
                counts.failures.append(f"e2e shard {index + 1}: its cluster did not start (exit {code}); no test ran")
        return counts


def finish(phases: list[Phase], counts: Counts, wall: float, *, ok: bool) -> int:
    print()
    say(f"{SLOWEST} slowest tests:")
    for seconds, name in sorted(counts.slow, reverse=True)[:SLOWEST]:
        print(f"  {seconds:8.1f} s  {name}")
    say("phases:")
    for phase in phases:
        mark = "ok" if phase.ok else "FAILED"
        print(f"  {phase.name:<14} {phase.seconds:8.1f} s  {mark}  {phase.note}".rstrip())
    print(f"  {'wall':<14} {time.monotonic() - wall:8.1f} s")
    if counts.failures:
        say("failed:")
        for failure in counts.failures:
            print(f"  {failure}")
    failed = counts.failed + counts.errors
    # The last line, whatever printed before it, is the suite's count (both pytest runs together).
    print(f"test: {counts.passed} passed, {failed} failed, {counts.skipped} skipped")
    return 0 if ok and failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
