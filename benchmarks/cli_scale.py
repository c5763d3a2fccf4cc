"""How fast the `rlplace` command answers, end to end, against a baseline commit measured in the same run.

Each figure is the wall time of a whole CLI process (`python -c 'from placement_core.cli import main; main()'`),
started fresh, best of a few runs:

    --help          `rlplace --help` (start-up: imports only)
    readme plan     `rlplace plan examples/collocated-single-node.yaml` (the README's example, a table)
    1000x8 json     `rlplace plan -o json` of 1,000 nodes x 8 GPUs, `actor,rollout: all` (16,000 processes)
    20000 comps     `rlplace plan -o json` of 20,000 one-GPU components on 2,500 nodes x 8 GPUs

The baseline is the tree of `--baseline` (a git revision, default: the commit before the CLI work), exported
with `git archive` into a temporary folder and run the same way; `ratio` is baseline / current. A run that
passes `--limit` seconds is stopped and shown as `>LIMIT`.

    .venv/bin/python benchmarks/cli_scale.py [--baseline REV] [--repeat 3] [--limit 30]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
#: The commit the CLI work started from (issue 14's "today").
DEFAULT_BASELINE = "a80ecfe"
CLI = "from placement_core.cli import main; main()"


def scale_config(num_nodes: int, components: int = 0) -> str:
    placement = {"actor,rollout": "all"} if not components else {f"c{i}": str(i) for i in range(components)}
    config = {"cluster": {"num_nodes": num_nodes, "accelerators_per_node": 8, "component_placement": placement}}
    return yaml.safe_dump(config, sort_keys=False)


def run_cli(tree: Path, args: list[str], limit: float) -> float | None:
    """Wall seconds of one CLI process run from `tree`, or None when it passed `limit`."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'operator'}"}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", CLI, *args], env=env, cwd=tree, capture_output=True, timeout=limit, check=False
        )
    except subprocess.TimeoutExpired:
        return None
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{tree}: rlplace {' '.join(args)} failed: {done.stderr.decode()[-400:]}")
    return elapsed


def best_of(tree: Path, args: list[str], repeat: int, limit: float) -> float | None:
    times = []
    for _ in range(repeat):
        elapsed = run_cli(tree, args, limit)
        if elapsed is None:
            return None
        times.append(elapsed)
    return min(times)


def export_tree(revision: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", revision], cwd=REPO, capture_output=True, check=True).stdout
    tar_path = into / "baseline.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision to compare against")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best is printed")
    parser.add_argument("--limit", type=float, default=30.0, help="seconds before a run is stopped")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        baseline = export_tree(args.baseline, work)
        (work / "nodes.yaml").write_text(scale_config(1000))
        (work / "components.yaml").write_text(scale_config(2500, components=20_000))
        cases = {
            "--help": ["--help"],
            "readme plan": ["plan", "examples/collocated-single-node.yaml"],
            "1000x8 json": ["plan", str(work / "nodes.yaml"), "-o", "json"],
            "20000 comps": ["plan", str(work / "components.yaml"), "-o", "json"],
        }

        def show(seconds: float | None) -> str:
            return f">{args.limit:.0f}" if seconds is None else f"{seconds:.3f}"

        print(f"baseline {args.baseline}; wall seconds of one CLI process, best of {args.repeat}")
        print(f"{'case':<14}{'baseline s':>12}{'current s':>12}{'ratio':>8}")
        for name, cli_args in cases.items():
            before = best_of(baseline, cli_args, args.repeat, args.limit)
            after = best_of(REPO, cli_args, args.repeat, args.limit)
            ratio = "-" if before is None or after is None else f"{before / after:.1f}x"
            if before is None and after is not None:
                ratio = f">{args.limit / after:.0f}x"
            print(f"{name:<14}{show(before):>12}{show(after):>12}{ratio:>8}", flush=True)


if __name__ == "__main__":
    main()
