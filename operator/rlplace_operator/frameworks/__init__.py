"""What rlplace does for the program that starts a job's processes, one module per framework (base: the
protocol). The registry below is keyed by `spec.framework`; adding a framework is one module, its entry here and
its name in api.rljob.FrameworkName."""

from __future__ import annotations

from rlplace_operator.api.rljob import FrameworkName, RLJobSpec
from rlplace_operator.frameworks.base import Framework
from rlplace_operator.frameworks.rlinf import RLinf
from rlplace_operator.frameworks.rlplace import RlplaceDriver
from rlplace_operator.frameworks.verl import Verl

#: Every framework, by the name spec.framework gives it.
REGISTRY: dict[FrameworkName, Framework] = {f.name: f for f in (RlplaceDriver(), RLinf(), Verl())}


def framework_named(name: str | None) -> Framework:
    """The framework `spec.framework` names (on the wire: absent means the default, rlplace's driver). A name the
    registry lacks is a ValueError naming the known ones."""
    try:
        return REGISTRY[FrameworkName(name or RLJobSpec.model_fields["framework"].default)]
    except ValueError:
        raise ValueError(f"unknown framework {name!r} (known: {', '.join(REGISTRY)})") from None


def framework_of(spec: RLJobSpec) -> Framework:
    """The framework of a parsed spec."""
    return REGISTRY[spec.framework]
