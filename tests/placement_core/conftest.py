"""What the placement_core tests share: one simulated Ray cluster for every test that only observes one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from placement_core import launcher


@pytest.fixture(scope="session")
def simulated_ray() -> Iterator[None]:
    """A simulated Ray cluster of two nodes of 8 fake GPUs (node ranks 0 and 1), placement_core shipped to the
    workers as for a stock Ray image. Started once for the session: the tests that use it launch their own
    actors and shut them down, and starting a cluster is most of what these tests cost."""
    with launcher.simulated_cluster([8, 8], ship_code=True):
        yield
