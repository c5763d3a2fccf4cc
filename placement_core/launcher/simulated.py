"""A simulated multi-node Ray cluster for tests, benchmarks and trying a driver offline."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

from placement_core.contract import node_labels, node_resources
from placement_core.launcher.groups import connect

# The CPUs each simulated node declares. The launched actors ask for none; a raylet starts at most min(its CPUs, the
# machine's cores) worker processes at once, so with 1 a node's actors started one after another (8 actors: 5.7 s
# on a 2-core machine, 3.5 s with 2).
NODE_CPUS = 2


@contextlib.contextmanager
def simulated_cluster(
    gpus_per_node: Sequence[int], tmpdir: str | None = None, ship_code: bool = False
) -> Iterator[Any]:
    """A local `ray.cluster_utils.Cluster` whose node i declares `gpus_per_node[i]` fake GPUs and the
    rlplace label and resources of rank i, connected with `connect` (ship_code: send placement_core to the
    workers as for a stock Ray image); shut down on exit.

    Ray's socket paths must stay short, so its temp dir comes from RAY_TMPDIR (made under /tmp when unset,
    and removed on exit with the session logs in it).
    """
    import ray
    from ray.cluster_utils import Cluster

    previous = os.environ.get("RAY_TMPDIR")
    made = None if tmpdir or previous else tempfile.mkdtemp(prefix="rlray", dir="/tmp")
    os.environ["RAY_TMPDIR"] = tmpdir or previous or made
    cluster = Cluster()
    try:
        for rank, gpus in enumerate(gpus_per_node):
            cluster.add_node(
                num_cpus=NODE_CPUS, num_gpus=gpus, resources=node_resources(rank, gpus), labels=node_labels(rank)
            )
        connect(cluster.address, ship_code, logging_level="WARNING", log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        if previous is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = previous
        if made:
            shutil.rmtree(made, ignore_errors=True)
