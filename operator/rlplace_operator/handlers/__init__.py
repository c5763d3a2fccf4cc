"""kopf handlers; importing this package registers them."""

from rlplace_operator.handlers import nodegroup, raycluster, rljob

__all__ = ["nodegroup", "raycluster", "rljob"]
