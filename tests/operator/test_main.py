"""The operator's command line: a bad --leader-election is refused before anything starts, naming the flag."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("value", ["rlplace-system", "ns/"])
def test_a_lease_that_is_not_namespace_slash_name_is_refused(value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rlplace_operator.main", f"--leader-election={value}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"rlplace-operator: error: --leader-election must be NAMESPACE/NAME, got '{value}'"
    )
    assert "Traceback" not in done.stderr


def test_an_api_server_out_of_reach_is_a_failed_try_not_the_end_of_the_election() -> None:
    """The library catches the API's error answers only: unreachable, its thread ended (seen in the e2e chaos
    test's apiserver restart), so a leader stopped renewing without being told. Now it is one failed try."""
    import threading

    from kubernetes.leaderelection import electionconfig
    from urllib3.exceptions import MaxRetryError

    from rlplace_operator.leadership import _Election

    class Unreachable:
        name, namespace, identity = "lease", "ns", "me"

        def get(self, name: str, namespace: str) -> object:
            raise MaxRetryError(None, "/apis/coordination.k8s.io", "connection refused")  # type: ignore[arg-type]

    config = electionconfig.Config(Unreachable(), 15, 10, 2, lambda: None, lambda: None)
    election = _Election(config, threading.Event())
    assert election.try_acquire_or_renew() is False
    released = threading.Event()
    released.set()
    assert _Election(config, released).try_acquire_or_renew() is False  # given back: never tries again
