"""Settings for the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

# CI runs every property test on the same examples (no flakes between a green local run and CI); locally,
# each run draws new ones, which is how the property tests find new cases.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that start a local Ray cluster run last, each kept in its order. `make test` runs the unit tests
    while the e2e clusters start beside them on the same cores, and Ray gives a starting raylet 30 s to
    register (hard-coded in ray._private.node): one that started at the busiest moment timed out in CI. Last,
    they start after the clusters are up (about 100 s into the unit tests, which take about 250 s).

    They are also one xdist group: `make test-unit` runs the tests in two processes (`-n 2 --dist loadgroup`),
    and the Ray tests, which mostly wait for Ray, go to one of them together, so the session's one simulated
    cluster (`simulated_ray`) is started once while the other process runs the tests that compute. (tryfirst:
    before xdist's own hook reads the group markers.)"""
    items.sort(key=lambda item: item.get_closest_marker("ray") is not None)
    for item in items:
        if item.get_closest_marker("ray") is not None:
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="session")
def simulated_ray() -> Iterator[Any]:
    """A simulated Ray cluster of two nodes of 8 fake GPUs (node ranks 0 and 1), placement_core shipped to the
    workers as for a stock Ray image; yields its `ray.cluster_utils.Cluster` (a driver in a child process joins
    it with `--address` at its `.address`; a test that removes a node adds it back as it was). Started once for
    the session: the tests that use it launch their own actors and shut them down, and starting a cluster is most
    of what these tests cost."""
    from placement_core import launcher

    with launcher.simulated_cluster([8, 8], ship_code=True) as cluster:
        yield cluster
