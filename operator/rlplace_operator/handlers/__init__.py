"""kopf handlers; importing this package registers them."""

from rlplace_operator.handlers import nodegroup, queue, raycluster, rayjob, rljob

__all__ = ["nodegroup", "queue", "raycluster", "rayjob", "rljob"]
