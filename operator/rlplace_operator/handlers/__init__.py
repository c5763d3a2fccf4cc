"""kopf handlers; importing this package registers them."""

from rlplace_operator.handlers import nodegroup, raycluster, rayjob, rljob

__all__ = ["nodegroup", "raycluster", "rayjob", "rljob"]
