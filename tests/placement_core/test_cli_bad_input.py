"""Bad input of every class ends as one `error:` line, exit status 2, in bounded time and memory.

Each case runs the real `rlplace` entry point in a child process under resource limits (address space and
CPU time), and the test measures the child's own CPU time and peak memory with `os.wait4`. The classes are
those a new user hits: YAML they did not mean, inputs that are huge, deep, binary or empty, stored plans in
the wrong form, and usage errors. Large but valid inputs must give the correct answer within the same bounds.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: What one CLI run may use: a second or two of CPU time (tests share a busy machine, hence 2.5 s), and a
#: few hundred MB. The child also runs under hard limits, so a runaway case fails instead of hanging.
MAX_CPU_S = 2.5
MAX_RSS_MB = 300
ADDRESS_SPACE_LIMIT = 2 * 1024**3
CPU_LIMIT_S = 20
WALL_LIMIT_S = 60


@dataclass(frozen=True)
class Run:
    status: int
    stdout: str
    stderr: str
    cpu_s: float
    rss_mb: float


def run_cli(args: list[str], stdin: bytes = b"", cwd: Path = REPO) -> Run:
    """`rlplace ARGS` in a child process with resource limits; its exit status, output, CPU time, peak RSS."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S))

    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'operator'}"}
    out_path, err_path = cwd / ".out", cwd / ".err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", "from placement_core.cli import main; main()", *args],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            cwd=cwd,
            env=env,
            preexec_fn=limits,
        )
        try:
            child.stdin.write(stdin)
            child.stdin.close()
        except BrokenPipeError:
            pass  # the CLI stopped reading (it had enough to refuse the input)
        deadline = time.monotonic() + WALL_LIMIT_S
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                child.kill()
                pid, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.02)
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait again
    return Run(
        status=os.waitstatus_to_exitcode(status),
        stdout=out_path.read_text(errors="replace"),
        stderr=err_path.read_text(errors="replace"),
        cpu_s=usage.ru_utime + usage.ru_stime,
        rss_mb=usage.ru_maxrss / 1024,
    )


def assert_bounded(run: Run) -> None:
    assert run.cpu_s < MAX_CPU_S, f"{run.cpu_s:.2f} s of CPU"
    assert run.rss_mb < MAX_RSS_MB, f"{run.rss_mb:.0f} MB peak memory"


def assert_one_error(run: Run, expected: str) -> None:
    assert run.status == 2, (run.status, run.stderr[-2000:])
    assert "Traceback" not in run.stderr
    assert run.stderr.startswith("error: ") and run.stderr.endswith("\n")
    assert run.stderr.count("\n") == 1, run.stderr[:2000]
    assert len(run.stderr) < 1200
    assert run.stdout == ""
    assert expected in run.stderr, run.stderr
    assert_bounded(run)


CLUSTER = "cluster:\n  num_nodes: 1\n  component_placement:\n    actor: 0-3\n"


def alias_bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n" + CLUSTER


def doubling(first: str) -> str:
    lines = [f"x0: {first!r}"] + [f"x{i + 1}: ${{x{i}}}${{x{i}}}" for i in range(40)]
    return "\n".join(lines) + "\n" + CLUSTER + "  note: ${x40}\n"


CONFIG_CASES: dict[str, tuple[str | bytes, str]] = {
    # YAML the user did not mean.
    "second cluster section": (
        CLUSTER + "cluster:\n  num_nodes: 2\n",
        "key 'cluster' is given twice (first at line 1)",
    ),
    "component twice": (CLUSTER + "    actor: 4-7\n", "key 'actor' is given twice"),
    "null key": (CLUSTER + "    ~: 4-7\n", "a key is empty or null"),
    "empty key": (CLUSTER + "    ?\n    : 4-7\n", "a key is empty or null"),
    "a million digits": (CLUSTER.replace("num_nodes: 1", "num_nodes: " + "9" * 1_000_000), "too many digits"),
    "list as a key": (CLUSTER + "    ? [a, b]\n    : 4-7\n", "a key must be a plain name"),
    "value where a section goes": (
        "runner: {task_type: reasoning}\ncluster:\n  num_nodes: 1\n  component_placement:\n"
        "    actor,rollout,reward: all\nactor: {model: big}\n",
        "actor.model must be a mapping (a section with keys), got 'big'",
    ),
    "1e2 as num_nodes": (
        CLUSTER.replace("num_nodes: 1", "num_nodes: 1e2"),
        "is text, not a number: write 100 without quotes",
    ),
    "1e1 as a tp size": (
        "runner: {task_type: reasoning}\ncluster:\n  num_nodes: 2\n  component_placement:\n"
        "    actor,rollout,reward: all\nactor: {model: {tensor_model_parallel_size: 1e1}}\n",
        "write 10",
    ),
    "cluster is a number": ("cluster: 5\n", "cluster"),
    "a list, not a mapping": ("- a\n- b\n", "must hold a YAML mapping, got a list"),
    "invalid YAML": ("cluster: [1, 2\n", "is not valid YAML at line 2"),
    "tab indentation": ("cluster:\n\tnum_nodes: 1\n", "is not valid YAML"),
    # Bounded work.
    "alias bomb": (alias_bomb(), "expands to more than 1,000,000 values"),
    "15 MB on one line": ("cluster: " + "x" * 15_000_000 + "\n", "larger than 4 MiB"),
    "500 nested lists": ("a: " + "[" * 500 + "]" * 500 + "\n", "nests more than 64 levels"),
    "500 nested mappings": ("".join("  " * i + f"k{i}:\n" for i in range(500)), "nests more than 64 levels"),
    "binary": (bytes(range(256)) * 64, "is not UTF-8 text"),
    "NUL bytes": (b"cluster:\x00\n", "binary file"),
    "gzip": (gzip.compress(CLUSTER.encode()), "is gzip-compressed"),
    "empty": ("", "is empty"),
    "200,000 nodes": (CLUSTER.replace("num_nodes: 1", "num_nodes: 200000"), "at most 100000 nodes"),
    "interpolation doubling": (doubling("ab"), "interpolations would expand to about"),
    "interpolation doubling to nothing": (doubling(""), "interpolations would expand to about"),
    "interpolation loop": ("a: ${b}\nb: ${a}\n" + CLUSTER.replace("num_nodes: 1", "num_nodes: ${a}"), "Recursive"),
    "interpolation to nowhere": (CLUSTER.replace("num_nodes: 1", "num_nodes: ${nope.x}"), "'nope.x' not found"),
    "bad interpolation syntax": (
        CLUSTER.replace("num_nodes: 1", "num_nodes: ${a"),
        "cluster.num_nodes is '${a', which cannot be resolved",
    ),
    # A placement error quotes at most ~200 characters of a huge value.
    "huge bad placement": (CLUSTER.replace("0-3", "3-1" + "9" * 1_000_000), "characters)"),
    "rlplace manifest": ("apiVersion: rlplace.io/v1\nkind: RLJob\n", "apply it with kubectl"),
}


@pytest.mark.parametrize("name", CONFIG_CASES)
def test_bad_config(tmp_path, name):
    content, expected = CONFIG_CASES[name]
    path = tmp_path / "job.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert_one_error(run_cli(["plan", str(path), "-o", "json"], cwd=tmp_path), expected)


def test_bad_config_on_stdin(tmp_path):
    assert_one_error(run_cli(["plan", "-"], b"", cwd=tmp_path), "config file on stdin is empty")
    content, expected = CONFIG_CASES["alias bomb"]
    assert_one_error(run_cli(["plan", "-"], content.encode(), cwd=tmp_path), expected)


def test_paths_that_are_no_config(tmp_path):
    assert_one_error(run_cli(["plan", str(tmp_path)], cwd=tmp_path), "is a directory")
    assert_one_error(run_cli(["plan", str(tmp_path / "nope.yaml")], cwd=tmp_path), "does not exist")
    assert_one_error(run_cli(["plan", "/dev/zero"], cwd=tmp_path), "larger than 4 MiB")


USAGE_CASES: dict[str, tuple[list[str], str]] = {
    "unknown option": (["plan", "job.yaml", "--bogus"], "No such option: --bogus"),
    "missing argument": (["plan"], "Missing argument 'CONFIG.yaml'"),
    "bad format": (["plan", "job.yaml", "-o", "xml"], "'xml' is not one of"),
    "unknown command": (["plam"], "No such command 'plam'"),
    "rank is no number": (["plan", "job.yaml", "--env", "actor", "x"], "Invalid value for '--env'"),
    "rank out of range": (["plan", "job.yaml", "--env", "actor", "9"], "component 'actor' has ranks 0-3, not 9"),
    "unknown component": (["plan", "job.yaml", "--env", "critic", "0"], "unknown component 'critic'"),
    "--write on stdin": (["autotune", "-", "--write"], "--write needs a config file"),
}


@pytest.mark.parametrize("name", USAGE_CASES)
def test_usage_errors(tmp_path, name):
    (tmp_path / "job.yaml").write_text(CLUSTER)
    args, expected = USAGE_CASES[name]
    assert_one_error(run_cli(args, cwd=tmp_path), expected)


def gzip_bomb() -> bytes:
    # 140 MiB of zeros compress to about 140 KB: a small file that must not be unpacked whole.
    return gzip.compress(b"0" * (140 * 1024 * 1024), compresslevel=9)


#: Contents, or a function making them when the test runs (the bomb takes a second to compress).
SHOW_CASES: dict[str, tuple[bytes | Callable[[], bytes], str]] = {
    "not a plan": (b'{"kind": "Pod"}', "has no 'components' mapping"),
    "json nested deeply": (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
    "yaml nested deeply": (b"a: " + b"[" * 500 + b"]" * 500, "nests more than 64 levels"),
    "bad json": (b'{"mode": ', "not valid JSON"),
    "binary": (bytes(range(256)) * 64, "not UTF-8 text"),
    "gzip bomb": (gzip_bomb, "unpacks to more than 128 MiB"),
    "cut gzip": (gzip.compress(b'{"mode": "x"}' * 1000)[:40], "gzip"),
    "ConfigMap without a plan": (b'{"kind": "ConfigMap", "data": {"other": "x"}}', "has no data.plan.json"),
    "ConfigMap with bad base64": (b'{"kind": "ConfigMap", "binaryData": {"plan.json.gz": "%%%"}}', "is not base64"),
    "empty": (b"   \n", "is empty"),
}


@pytest.mark.parametrize("name", SHOW_CASES)
def test_bad_plan(tmp_path, name):
    content, expected = SHOW_CASES[name]
    data = content() if callable(content) else content
    assert_one_error(run_cli(["show", "-"], data, cwd=tmp_path), expected)


def test_huge_cluster_with_a_tiny_placement_is_placed(tmp_path):
    """100,000 nodes x 1,024 GPUs declared, 14 processes placed: memory follows the processes."""
    config = (
        "cluster:\n  num_nodes: 100000\n  accelerators_per_node: 1024\n  component_placement:\n"
        "    actor: 0-3\n    rollout: 102399990-102399999\n"
    )
    (tmp_path / "job.yaml").write_text(config)
    run = run_cli(["plan", "job.yaml", "-o", "json"], cwd=tmp_path)
    assert run.status == 0, run.stderr
    plan = json.loads(run.stdout)["components"]
    assert [p["visible_accelerators"] for p in plan["actor"]["processes"]] == [["0"], ["1"], ["2"], ["3"]]
    last = plan["rollout"]["processes"][-1]
    assert (last["node_name"], last["local_hardware_ranks"]) == ("node-99999", [1023])
    assert_bounded(run)


def test_many_components_are_placed(tmp_path):
    """20,000 one-GPU components, as a table (per-process "shared with" included) and as JSON."""
    lines = [f"    c{i}: {i}\n" for i in range(20_000)]
    (tmp_path / "job.yaml").write_text("cluster:\n  num_nodes: 2500\n  component_placement:\n" + "".join(lines))
    for output in ("table", "json"):
        run = run_cli(["plan", "job.yaml", "-o", output], cwd=tmp_path)
        assert run.status == 0, run.stderr
        assert "c19999" in run.stdout
        # Parsing 20,000 entries and building their strategies is the core's work, not the CLI's: allow
        # more than the one-error budget, but far less than the minutes it took before.
        assert run.cpu_s < 4 * MAX_CPU_S, f"{output}: {run.cpu_s:.2f} s of CPU"
        assert run.rss_mb < MAX_RSS_MB, f"{output}: {run.rss_mb:.0f} MB"
