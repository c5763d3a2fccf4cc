"""kopf handlers; importing this package registers them."""

from rlplace_operator.handlers import lifecycle, nodegroup, queue, raycluster, rayjob, rljob

__all__ = ["lifecycle", "nodegroup", "queue", "raycluster", "rayjob", "rljob"]
