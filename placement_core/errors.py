"""The one error type of the placement core."""


class PlacementError(ValueError):
    """A placement, cluster or profile description that cannot be honoured.

    The message is one line that says where (component, node group, field), what is wrong, and quotes the
    offending text; callers (the CLI, the operator) show it as is.
    """


class CapacityError(PlacementError):
    """The placement asks for more nodes or units than the cluster has: more capacity could fix it.

    The operator keeps such a job Pending and retries when nodes join, instead of failing it.
    """
