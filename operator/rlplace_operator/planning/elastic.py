"""The replicas of elastic components (spec.components[].replicas, minReplicas, maxReplicas; docs/elastic.md).

A component's placement is written in units that repeat (placement_core.grammar.replica_shape): one process and
its GPUs, or one GPU and the processes that share it. `replicas` sets how many units run; the first are where
componentPlacement puts them and never move, more continue its last part over the next resources, fewer drop the
last. The range bounds what may change later: its maximum must be placeable and replaceable (plan.plan_job
places it at admission on every ready node of the job's NodeGroups), so that growing later can never meet a
placement error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from placement_core.errors import PlacementError
from placement_core.grammar import PlacementEntry, replica_shape, resized_placement
from rlplace_operator.api.rljob import ComponentSettings, RLJobSpec


def elastic_components(spec: RLJobSpec) -> list[ComponentSettings]:
    """The components that set replicas or a range."""
    return [c for c in spec.components if (c.replicas, c.min_replicas, c.max_replicas) != (None, None, None)]


def _entry_of(entries: Sequence[PlacementEntry], name: str) -> int:
    """The index of the one entry that places `name` alone."""
    for index, entry in enumerate(entries):
        if name in entry.names:
            if len(entry.names) > 1:
                raise PlacementError(
                    f"component '{name}': replicas need a componentPlacement entry of its own, but it shares "
                    f"'{entry.key}' with {', '.join(n for n in entry.names if n != name)}"
                )
            return index
    raise PlacementError(f"spec.components names '{name}', which the placement does not place")


def with_replicas(
    spec: RLJobSpec, entries: Sequence[PlacementEntry], count: Callable[[ComponentSettings], int | None]
) -> list[PlacementEntry]:
    """`entries` with each elastic component at `count(settings)` replicas (None: as placed); PlacementError (one
    line, naming the component) for a placement without one shape or a count outside the range."""
    resized = list(entries)
    for settings in elastic_components(spec):
        index = _entry_of(resized, settings.name)
        entry = resized[index]
        try:
            placed = replica_shape(entry.placement).count
        except PlacementError as err:
            raise PlacementError(f"component '{settings.name}': {err}") from None
        wanted = count(settings) or placed
        low, high = settings.min_replicas or 1, settings.max_replicas or max(wanted, placed)
        if not low <= wanted <= high:
            raise PlacementError(
                f"component '{settings.name}': {wanted} replicas (componentPlacement places {placed}) is outside "
                f"minReplicas..maxReplicas {low}..{high}"
            )
        resized[index] = dataclasses.replace(entry, placement=resized_placement(entry.placement, wanted))
    return resized


def running(settings: ComponentSettings) -> int | None:
    """The replicas the spec asks to run now."""
    return settings.replicas


def at_most(settings: ComponentSettings) -> int | None:
    """The most replicas the range allows (None: no maximum, the count now is the most)."""
    return settings.max_replicas or settings.replicas
