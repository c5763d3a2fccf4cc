"""The launcher's errors: one line each, naming the component and rank where there is one."""

from __future__ import annotations


class LaunchError(RuntimeError):
    """A plan the Ray cluster cannot run, or a worker that failed to start; the message is one line."""


class WorkerDiedError(LaunchError):
    """A worker actor died; `component` and `rank` say which, so the caller can tell what to restart."""

    def __init__(self, message: str, component: str, rank: int) -> None:
        super().__init__(message)
        self.component = component
        self.rank = rank
