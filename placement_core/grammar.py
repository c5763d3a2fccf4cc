"""The `component_placement` grammar (docs/placement.md, the grammar), as text -> typed parts.

Nothing here knows the cluster: a part's resource range is checked against a rank space later, in
`components.py`. Every function raises `PlacementError` with a message that quotes the offending text.

    placement := part ("," part)*        empty parts are skipped
    part      := resource [":" process]
    resource  := "all" | N | N "-" M
    process   := N | N "-" M
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from placement_core.configfile import shown
from placement_core.errors import PlacementError

_INTEGER = re.compile(r"[0-9]+")

#: A component may not make more processes than this; it keeps a typo such as `0:0-99999999` from trying
#: to build a billion placements.
MAX_PROCESSES = 1_000_000


@dataclass(frozen=True, slots=True)
class RankRange:
    """An inclusive range of non-negative ranks, `start-end` in the grammar."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start + 1

    def __iter__(self):
        return iter(range(self.start, self.end + 1))

    def __str__(self) -> str:
        return str(self.start) if self.start == self.end else f"{self.start}-{self.end}"


@dataclass(frozen=True, slots=True)
class Part:
    """One comma-separated part of a placement string.

    `resources` is None for `all`; `processes` is None when the part gives no `:P` (one process per resource).
    """

    text: str
    resources: RankRange | None
    processes: RankRange | None


#: Digits a rank may have (a billion billion); longer numbers are a typo or an attack.
MAX_DIGITS = 18


def parse_int(text: str, what: str) -> int:
    """A non-negative decimal integer; anything else (`-1`, `1.5`, `x`) is an error."""
    stripped = text.strip()
    if not _INTEGER.fullmatch(stripped):
        raise PlacementError(f"malformed {what} '{text.strip()}' (expected a non-negative integer)")
    if len(stripped) > MAX_DIGITS:
        # Python refuses to convert such text at all (over 4,300 digits), and no rank is this large.
        raise PlacementError(f"{what} '{stripped[:MAX_DIGITS]}...' has {len(stripped):,} digits; ranks are far smaller")
    return int(stripped)


def parse_range(text: str, what: str = "rank range") -> RankRange:
    """`N` or `N-M` (inclusive, N <= M)."""
    bounds = text.split("-")
    if len(bounds) > 2 or not text.strip():
        raise PlacementError(f"malformed {what} '{text.strip()}' (expected N or N-M)")
    try:
        start = parse_int(bounds[0], "integer")
        end = parse_int(bounds[-1], "integer")
    except PlacementError:
        raise PlacementError(f"malformed {what} '{text.strip()}' (expected N or N-M)") from None
    if end < start:
        raise PlacementError(f"reversed range '{text.strip()}' in {what} (write {end}-{start})")
    return RankRange(start, end)


def is_all(text: str) -> bool:
    return text.strip().lower() == "all"


def parse_placement(text: str) -> list[Part]:
    """Split a placement string into parts; empty parts (trailing commas) are skipped."""
    parts: list[Part] = []
    for raw in text.split(","):
        raw = raw.strip()
        if not raw:
            continue
        fields = raw.split(":")
        if len(fields) > 2:
            raise PlacementError(f"part '{raw}' has more than one ':' (write RESOURCES:PROCESSES)")
        resource_text = fields[0].strip()
        resources = None if is_all(resource_text) else parse_range(resource_text, "resource ranks")
        processes = None
        if len(fields) == 2:
            if is_all(fields[1]):
                raise PlacementError(f"'all' is not allowed as process ranks in '{raw}'")
            processes = parse_range(fields[1], "process ranks")
        parts.append(Part(raw, resources, processes))
    if not parts:
        raise PlacementError(f"empty placement '{text}'")
    return parts


def parse_rank_list(value: object, what: str) -> list[int]:
    """A list of ranks written as `0-1,3`, an int, `all` (returns []: the caller fills it in), or a YAML list."""
    if isinstance(value, bool) or value is None:
        raise PlacementError(f"malformed {what} '{value}' (expected e.g. 0-1,3 or all)")
    if isinstance(value, int):
        if value < 0:
            raise PlacementError(f"malformed {what} '{value}' (ranks are >= 0)")
        return [value]
    if isinstance(value, list):
        # `all` means every rank only on its own; `[]` or `[0, all]` must not widen to every rank.
        if not value:
            raise PlacementError(f"empty {what} '[]' (expected e.g. 0-1,3 or all)")
        ranks = []
        for item in value:
            if isinstance(item, list):
                raise PlacementError(f"malformed {what} item {item} in {value} (expected a rank or a range)")
            if is_all(str(item)):
                raise PlacementError(f"'all' inside the list {value} of {what} (write all alone, not in a list)")
            ranks.extend(parse_rank_list(item, what))
        return ranks
    text = str(value)
    if is_all(text):
        return []
    ranks: list[int] = []
    for piece in text.split(","):
        if piece.strip():
            ranks.extend(parse_range(piece, what))
    if not ranks:
        raise PlacementError(f"empty {what} '{text}'")
    return ranks


def parse_component_key(key: object) -> list[str]:
    """`actor,rollout` -> ['actor', 'rollout']; names are stripped and must be non-empty and distinct."""
    text = str(key)
    names = [name.strip() for name in text.split(",")]
    if any(not name for name in names):
        raise PlacementError(f"empty component name in key '{text}'")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PlacementError(f"component '{duplicates[0]}' appears twice in key '{text}'")
    return names


def parse_labels(value: object) -> list[str]:
    """A `node_group` value: `a800`, `"a800,4090"` or `[a800, "4090"]` (labels are turned into strings)."""
    items: Iterable[object] = value if isinstance(value, list) else str(value).split(",")
    labels = [str(item).strip() for item in items]
    if not labels or any(not label for label in labels):
        raise PlacementError(f"empty node group label in '{value}'")
    return labels


@dataclass(frozen=True, slots=True)
class PlacementEntry:
    """One key of `component_placement`: the components that share it, where their ranks count, and the text.

    The operator builds these straight from an RLJob's entries; a config's mapping goes through
    `parse_placement_entries`.
    """

    names: tuple[str, ...]
    """The component names of the key, in order (`actor,rollout` -> ('actor', 'rollout'))."""
    placement: str
    """The placement string (`0-7`, `all`, `0-3:0-7`)."""
    node_groups: tuple[str, ...] | None = None
    """The node group labels the ranks count over, in order; None means the implicit `cluster` group."""

    @property
    def key(self) -> str:
        return ",".join(self.names)

    @classmethod
    def of(cls, key: object, placement: object, node_group: object = None) -> PlacementEntry:
        """An entry from a key, a placement and an optional node_group value, as a config writes them."""
        names = tuple(parse_component_key(key))
        # A string, or a scalar YAML typed (`actor: 3`); anything else (a list, a mapping, a date, a `${...}`
        # that could not be resolved) is no placement.
        if isinstance(placement, bool) or not isinstance(placement, str | int):
            raise PlacementError(
                f"component '{','.join(names)}': placement must be a string like '0-7' or 'all', got {shown(placement)}"
            )
        labels = None if node_group is None else tuple(parse_labels(node_group))
        return cls(names, str(placement), labels)


_VALUE_FIELDS = ("node_group", "placement")


def parse_placement_entries(raw: object) -> list[PlacementEntry]:
    """A `component_placement` mapping -> its entries. A value is a placement (a non-string scalar such as
    `actor: 3` is turned into a string) or a mapping `{node_group: <labels>, placement: <string>}`."""
    if not isinstance(raw, Mapping) or not raw:
        raise PlacementError("cluster.component_placement must be a non-empty mapping of components to placements")
    entries = []
    for key, value in raw.items():
        if isinstance(value, Mapping):
            where = f"component '{','.join(parse_component_key(key))}'"
            unknown = [k for k in value if k not in _VALUE_FIELDS]
            if unknown:
                raise PlacementError(f"{where}: unknown field '{unknown[0]}' (allowed: node_group, placement)")
            if value.get("placement") is None:
                raise PlacementError(f"{where}: a mapping value needs 'placement' (e.g. placement: 0-7)")
            entries.append(PlacementEntry.of(key, value["placement"], value.get("node_group")))
        else:
            entries.append(PlacementEntry.of(key, value))
    return entries


# -- replicas: a placement written in units that repeat -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaShape:
    """The unit a placement repeats: one replica is `resources` consecutive resources and the `processes` processes
    on them (`0-7`: 1 and 1; `0-7:0-3`: 2 resources for one process; `0-1:0-3`: one resource that two processes
    share). Its count is the placement's number of replicas."""

    resources: int
    processes: int
    count: int


def _part_shape(part: Part) -> tuple[int, int, int]:
    """(resources, processes, count) of one part's repeating unit."""
    assert part.resources is not None
    resources = len(part.resources)
    processes = resources if part.processes is None else len(part.processes)
    if max(resources, processes) % min(resources, processes):
        raise PlacementError(f"part '{part.text}': one count must divide the other")
    if processes <= resources:
        return resources // processes, 1, processes
    return 1, processes // resources, resources


def replica_shape(text: str) -> ReplicaShape:
    """The unit `text` repeats and how many times; PlacementError (one line) when it has none: `all` (its count
    depends on the cluster) or parts of different units (`0-1,2-5:2-3`: one GPU per process, then two)."""
    return _shape_of(text, parse_placement(text))


def _shape_of(text: str, parts: list[Part]) -> ReplicaShape:
    shapes = set()
    count = 0
    for part in parts:
        if part.resources is None:
            raise PlacementError(f"placement '{text}' uses 'all': replicas need the resources written out (e.g. 0-7)")
        resources, processes, units = _part_shape(part)
        shapes.add((resources, processes))
        count += units
    if len(shapes) > 1:
        raise PlacementError(
            f"placement '{text}' has parts of different shapes (resources per process or processes per resource): "
            "replicas need one shape"
        )
    ((resources, processes),) = shapes
    return ReplicaShape(resources, processes, count)


def _part_text(first: int, units: int, shape: ReplicaShape, process: int) -> str:
    resources = RankRange(first, first + units * shape.resources - 1)
    if shape.resources == 1 and shape.processes == 1:
        return str(resources)
    return f"{resources}:{RankRange(process, process + units * shape.processes - 1)}"


def resized_placement(text: str, replicas: int) -> str:
    """`text` with `replicas` replicas of its shape: the first ones as `text` places them, kept where they are; more
    continue the last part over the resources after it, fewer drop the last ones (`0-3` with 6: `0-5`;
    `0-3,8-11` with 6: `0-3,8-9`; `0-7:0-3` with 6: `0-11:0-5`). Resources beyond the group's are found when the
    result is placed, as for any placement."""
    if replicas < 1:
        raise PlacementError(f"replicas must be at least 1, got {replicas}")
    parts = parse_placement(text)
    shape = _shape_of(text, parts)
    texts: list[str] = []
    left, process = replicas, 0
    for index, part in enumerate(parts):
        assert part.resources is not None
        units = _part_shape(part)[2]
        if index == len(parts) - 1:
            units = left  # the last part takes what is left, more or fewer than it had
        units = min(units, left)
        texts.append(_part_text(part.resources.start, units, shape, process))
        left -= units
        process += units * shape.processes
        if left == 0:
            break
    return ",".join(texts)
