"""The placement core's errors: a placement that cannot be honoured, and a plan the Ray cluster cannot run."""


class PlacementError(ValueError):
    """A placement, cluster or profile description that cannot be honoured.

    The message is one line that says where (component, node group, field), what is wrong, and quotes the
    offending text; callers (the CLI, the operator) show it as is.
    """


class CapacityError(PlacementError):
    """The placement asks for more nodes or units than the cluster has: more capacity could fix it.

    The operator keeps such a job Pending and retries when nodes join, instead of failing it.
    """


class LaunchError(RuntimeError):
    """A plan the Ray cluster cannot run, or a worker that failed to start; the message is one line, naming the
    component and rank where there is one."""


class WorkerDiedError(LaunchError):
    """A worker actor died; `component` and `rank` say which, so the caller can tell what to restart."""

    def __init__(self, message: str, component: str, rank: int) -> None:
        super().__init__(message)
        self.component = component
        self.rank = rank
