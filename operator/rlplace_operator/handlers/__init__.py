"""kopf handlers; importing this package registers them."""

from rlplace_operator.handlers import nodegroup, queue, raycluster, rljob

__all__ = ["nodegroup", "queue", "raycluster", "rljob"]
