"""The cluster model (docs/placement.md, "The cluster"): nodes, node groups, and the rank spaces placements count in.

Offline the cluster comes from the `cluster:` section of a config (`Cluster.from_config`); the operator builds
the same objects from live NodeGroups and Kubernetes Nodes.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from placement_core.configfile import Unresolved, not_a_number_hint, quote, shown
from placement_core.errors import CapacityError, PlacementError
from placement_core.grammar import parse_rank_list
from placement_core.placement import RankTuple

ACCELERATOR = "Accelerator"
ROBOT_TYPES = ("Franka", "DualFranka", "GimArm", "DOSW1", "Turtle2")
NV_GPU = "NV_GPU"
NO_ACCEL = "NO_ACCEL"
CLUSTER_GROUP = "cluster"
NODE_GROUP = "node"
RESERVED_LABELS = (CLUSTER_GROUP, NODE_GROUP)
#: `accelerators_per_node` when a config does not say (the common 8-GPU node).
DEFAULT_ACCELERATORS_PER_NODE = 8
#: Bounds that keep a typo (`num_nodes: 1000000000`) from building a cluster that exhausts memory.
MAX_NODES = 100_000
MAX_ACCELERATORS_PER_NODE = 1024

_NODE_GROUP_FIELDS = (
    "label",
    "node_ranks",
    "hardware",
    "ignore_hardware",
    "env_configs",
    # Read by auto placement (docs/autoplace.md): the GPUs of a group, for GPU-aware search.
    "accelerator_memory_gb",
    "accelerator_type",
)
#: Keys of the `cluster:` section: what rlplace reads, and what the reference framework reads there that
#: placement does not need (left alone). Any other key is a typo (`gpus_per_node`) and an error.
CLUSTER_FIELDS = (
    "num_nodes",
    "accelerators_per_node",
    "component_placement",
    "node_groups",
    "auto_scheduler",
    "use_pre_process_policy",
    "use_wait_before_last_iter_policy",
    "recreate_nccl_groups",
    "net_emulation",
    "tracer",
)
#: What a shell (and `export`) takes as a variable name; any other key could not be set, or would run code
#: when `rlplace plan --env` output is evaluated.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_CONFIG_FIELDS = ("node_ranks", "env_vars", "python_interpreter_path")


@dataclass(frozen=True, slots=True)
class Node:
    """One machine. `rank` is its global node rank; `name` is the Kubernetes node name in the operator."""

    rank: int
    num_accelerators: int
    accelerator_type: str = NV_GPU
    name: str = ""
    domains: tuple[str, ...] = ()
    """Its network domains, widest first (block, rack: the operator reads them from the node's labels); empty
    when not known. Auto placement prices the weight sync by the narrowest domain the two sides share."""

    @property
    def display_name(self) -> str:
        return self.name or f"node-{self.rank}"


@dataclass(frozen=True, slots=True)
class EnvConfig:
    """Environment variables (and a Python interpreter) for workers on some of a group's nodes."""

    node_ranks: tuple[int, ...]
    env_vars: tuple[tuple[str, str], ...] = ()
    python_interpreter_path: str | None = None


@dataclass(frozen=True)
class NodeGroup:
    """A labelled set of nodes with at most one kind of hardware.

    `hardware_type` is None (the resources are the nodes), `"Accelerator"` (the nodes' GPUs) or a robot type.
    `hardware_units`, for robot types, is the number of units on each node of `node_ranks`, in that order.
    """

    label: str
    node_ranks: tuple[int, ...]
    hardware_type: str | None = None
    hardware_units: tuple[int, ...] = ()
    hardware_configs: tuple[Mapping[str, object], ...] = ()
    env_configs: tuple[EnvConfig, ...] = ()
    accelerator_type: str | None = None
    """What kind of GPU the group's nodes have (`a800`, `4090`; auto placement's per-type costs use it).
    None: not said (auto placement then names the type after the label)."""
    accelerator_memory_gb: float | None = None
    """Memory of one of its GPUs in GB (auto placement never places a process that needs more); None: unknown."""

    def env_for(self, node_rank: int) -> dict[str, str]:
        """The variables this group sets for a worker on `node_rank` (empty when none)."""
        for env in self.env_configs:
            if node_rank in env.node_ranks:
                return dict(env.env_vars)
        return {}

    def python_interpreter_for(self, node_rank: int) -> str | None:
        for env in self.env_configs:
            if node_rank in env.node_ranks:
                return env.python_interpreter_path
        return None


#: Rank spaces up to this many ranks are kept as plain lists (fastest to index); larger ones are computed
#: from runs of nodes, so a 100,000-node x 1,024-GPU cluster costs memory for its nodes, not its 10^8 GPUs.
MAX_LISTED_RANKS = 1 << 20


@dataclass(frozen=True, slots=True)
class _Run:
    """Consecutive ranks over nodes of one group that each contribute `units` ranks (1 in a node space)."""

    start: int
    count: int
    units: int
    node_ranks: tuple[int, ...]
    """The group's node ranks; this run covers node_ranks[node_offset:node_offset + count // units]."""
    node_offset: int
    hardware_type: str | None
    group: str


class _Column(Sequence):  # type: ignore[type-arg]
    """One attribute (node, local, hardware type or owning group) of every rank, computed on access."""

    __slots__ = ("_field", "_space")

    def __init__(self, space: RankSpace, field_index: int) -> None:
        self._space = space
        self._field = field_index

    def __len__(self) -> int:
        return len(self._space)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._space.unit(index)[self._field]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class RankSpace:
    """The resources that ranks count over for a selection of node groups, in rank order.

    For a hardware space, rank r is unit `local[r]` of type `hardware_type[r]` on node `node[r]`; for a node
    space (`is_node_space`), rank r is node `node[r]` and `local[r]` is -1. `group[r]` is the owning label.
    The four columns are lists for spaces up to MAX_LISTED_RANKS ranks, and computed per rank above that.
    """

    labels: tuple[str, ...]
    is_node_space: bool
    runs: tuple[_Run, ...] = field(repr=False)
    size: int = field(repr=False)

    def __len__(self) -> int:
        return self.size

    @cached_property
    def _starts(self) -> list[int]:
        return [run.start for run in self.runs]

    def unit(self, rank: int) -> tuple[int, int, str | None, str]:
        """(node, local, hardware type, group) of `rank`; negative ranks count from the end, like a list."""
        if rank < 0:
            rank += self.size
        if not 0 <= rank < self.size:
            raise IndexError(f"rank {rank} is out of range ({self.describe()})")
        run = self.runs[bisect.bisect_right(self._starts, rank) - 1]
        offset, local = divmod(rank - run.start, run.units)
        return (
            run.node_ranks[run.node_offset + offset],
            -1 if self.is_node_space else local,
            run.hardware_type,
            run.group,
        )

    def _column(self, field_index: int) -> Sequence:  # type: ignore[type-arg]
        if self.size > MAX_LISTED_RANKS:
            return _Column(self, field_index)
        return [self.unit(r)[field_index] for r in range(self.size)]

    @cached_property
    def node(self) -> Sequence[int]:
        return self._column(0)

    @cached_property
    def local(self) -> Sequence[int]:
        return self._column(1)

    @cached_property
    def hardware_type(self) -> Sequence[str | None]:
        return self._column(2)

    @cached_property
    def group(self) -> Sequence[str]:
        return self._column(3)

    @property
    def hardware_types(self) -> set[str | None]:
        """Every hardware type the space counts (one per group; None in a node space)."""
        return {run.hardware_type for run in self.runs}

    def describe(self) -> str:
        what = "node group" if len(self.labels) == 1 else "node groups"
        names = ",".join(self.labels)
        ranks = f"ranks 0-{len(self) - 1}" if len(self) else "no ranks"
        unit = "nodes" if self.is_node_space else "units"
        return f"{what} '{names}' has {ranks} ({len(self)} {unit})"


class _PerNode(Sequence):  # type: ignore[type-arg]
    """Every accelerator of each node as the strings CUDA_VISIBLE_DEVICES takes, made when first asked for."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self._nodes = nodes
        self._made: dict[int, tuple[str, ...]] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        rank = self._nodes[index].rank
        devices = self._made.get(rank)
        if devices is None:
            devices = self._made[rank] = RankTuple(str(i) for i in range(self._nodes[rank].num_accelerators))
        return devices

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


class Cluster:
    """Nodes ranked 0..N-1 and the node groups over them, the implicit `cluster` and `node` groups last."""

    def __init__(self, nodes: Sequence[Node], node_groups: Sequence[NodeGroup] = ()) -> None:
        if not nodes:
            raise CapacityError("a cluster needs at least one node")
        self.nodes: tuple[Node, ...] = tuple(nodes)
        if [n.rank for n in self.nodes] != list(range(len(self.nodes))):
            raise PlacementError("node ranks must be 0..N-1 in order")
        all_ranks = tuple(range(len(self.nodes)))
        has_gpus = any(n.num_accelerators > 0 for n in self.nodes)
        implicit = (
            NodeGroup(CLUSTER_GROUP, all_ranks, ACCELERATOR if has_gpus else None),
            NodeGroup(NODE_GROUP, all_ranks, None),
        )
        self._groups: dict[str, NodeGroup] = {}
        for group in (*node_groups, *implicit):
            self._check_group(group)
            self._groups[group.label] = group
        self._spaces: dict[tuple[tuple[str, ...], bool], RankSpace] = {}

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def node_groups(self) -> list[NodeGroup]:
        return list(self._groups.values())

    @property
    def num_accelerators(self) -> int:
        return sum(n.num_accelerators for n in self.nodes)

    def get_node_group(self, label: str) -> NodeGroup:
        group = self._groups.get(str(label))
        if group is None:
            raise PlacementError(f"unknown node group '{label}' (known: {', '.join(self._groups)})")
        return group

    @cached_property
    def visible_devices(self) -> Sequence[tuple[str, ...]]:
        """Per node, every accelerator as the strings CUDA_VISIBLE_DEVICES takes (made per node on first use)."""
        return _PerNode(self.nodes)

    def units_per_node(self, group: NodeGroup) -> list[int]:
        """How many resources of the group's type each of its nodes contributes, in node-rank order."""
        if group.hardware_type == ACCELERATOR:
            return [self.nodes[r].num_accelerators for r in group.node_ranks]
        if group.hardware_type is None:
            return [1] * len(group.node_ranks)
        return list(group.hardware_units)

    def rank_space(self, labels: Sequence[str], nodes_only: bool = False) -> RankSpace:
        """The concatenated rank space of the listed groups, in the order listed (cached).

        It counts hardware units when every group has a hardware type, else (or with `nodes_only`) nodes.
        """
        key = (tuple(labels), nodes_only)
        space = self._spaces.get(key)
        if space is None:
            space = self._spaces[key] = self._build_rank_space(key[0], nodes_only)
        return space

    def _build_rank_space(self, labels: tuple[str, ...], nodes_only: bool) -> RankSpace:
        groups = [self.get_node_group(label) for label in labels]
        if len(set(labels)) != len(labels):
            raise PlacementError(f"node group listed twice in '{','.join(labels)}'")
        is_node_space = nodes_only or any(g.hardware_type is None for g in groups)
        runs: list[_Run] = []
        size = 0
        for group in groups:
            per_node = [1] * len(group.node_ranks) if is_node_space else self.units_per_node(group)
            hw_type = None if is_node_space else group.hardware_type
            index = 0
            # Nodes in a row with the same unit count make one run (a uniform group is a single run).
            while index < len(per_node):
                units = per_node[index]
                last = index
                while last + 1 < len(per_node) and per_node[last + 1] == units:
                    last += 1
                if units:
                    count = units * (last - index + 1)
                    runs.append(_Run(size, count, units, group.node_ranks, index, hw_type, group.label))
                    size += count
                index = last + 1
        if len(groups) > 1:
            self._check_no_overlap(labels, groups, is_node_space)
        return RankSpace(labels, is_node_space, tuple(runs), size)

    def _check_no_overlap(self, labels: tuple[str, ...], groups: list[NodeGroup], is_node_space: bool) -> None:
        """Groups listed together must not count a resource twice: in a node space no node is shared; in a
        hardware space no node gives units of one type to two groups (both would count them from 0)."""
        taken: set[tuple[int, str | None]] = set()
        for group in groups:
            hw_type = None if is_node_space else group.hardware_type
            per_node = [1] * len(group.node_ranks) if is_node_space else self.units_per_node(group)
            mine = [(rank, hw_type) for rank, units in zip(group.node_ranks, per_node, strict=True) if units]
            for rank, _ in mine:
                if (rank, hw_type) in taken:
                    where = "a node placement" if is_node_space else f"{hw_type} unit 0"
                    raise PlacementError(
                        f"node groups '{','.join(labels)}' overlap on node {rank} ({where}); "
                        "list groups that share no nodes"
                    )
            taken.update(mine)

    def _check_group(self, group: NodeGroup) -> None:
        if group.label in self._groups:
            raise PlacementError(f"node group label '{group.label}' is used twice")
        for rank in group.node_ranks:
            if not 0 <= rank < self.num_nodes:
                raise PlacementError(
                    f"node group '{group.label}': node rank {rank} out of range (cluster has nodes "
                    f"0-{self.num_nodes - 1})"
                )

    @classmethod
    def from_config(cls, section: Mapping[str, object]) -> Cluster:
        """Build the cluster from a `cluster:` mapping as loaded from YAML."""
        if not isinstance(section, Mapping):
            raise PlacementError("'cluster' must be a mapping")
        check_known_keys(section, CLUSTER_FIELDS, "cluster")
        for key in ("num_nodes", "accelerators_per_node", "node_groups"):
            value = section.get(key)
            if isinstance(value, Unresolved):
                raise value.error(f"cluster.{key}")
        num_nodes = section.get("num_nodes")
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes <= 0:
            raise PlacementError(
                f"cluster.num_nodes must be an integer > 0, got {shown(num_nodes)}{not_a_number_hint(num_nodes)}"
            )
        if num_nodes > MAX_NODES:
            raise PlacementError(f"cluster.num_nodes is {num_nodes}; at most {MAX_NODES} nodes are supported")
        counts = _accelerator_counts(section.get("accelerators_per_node"), num_nodes)
        nodes = [Node(r, c, NV_GPU if c else NO_ACCEL) for r, c in enumerate(counts)]
        raw_groups = section.get("node_groups") or []
        if not isinstance(raw_groups, list):
            raise PlacementError("cluster.node_groups must be a list of node groups")
        groups = [_node_group_from_config(raw, nodes) for raw in raw_groups]
        return cls(nodes, groups)


def _accelerator_counts(value: object, num_nodes: int) -> list[int]:
    if value is None:
        return [DEFAULT_ACCELERATORS_PER_NODE] * num_nodes
    values = value if isinstance(value, list) else [value] * num_nodes
    if len(values) != num_nodes:
        raise PlacementError(
            f"cluster.accelerators_per_node lists {len(values)} counts for {num_nodes} nodes (give one per node)"
        )
    for count in values:
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_ACCELERATORS_PER_NODE:
            raise PlacementError(
                f"cluster.accelerators_per_node must hold integers from 0 to {MAX_ACCELERATORS_PER_NODE}, "
                f"got {shown(count)}{not_a_number_hint(count)}"
            )
    return list(values)


def _node_group_from_config(raw: object, nodes: Sequence[Node]) -> NodeGroup:
    if not isinstance(raw, Mapping):
        raise PlacementError(f"a node group must be a mapping, got {shown(raw)}")
    if "label" not in raw or raw["label"] is None:
        raise PlacementError(f"node group {dict(raw)} has no 'label'")
    label = str(raw["label"]).strip()
    if not label:
        raise PlacementError(f"node group {dict(raw)} has an empty label")
    where = f"node group '{label}'"
    if label in RESERVED_LABELS:
        raise PlacementError(f"{where}: the label is reserved (reserved: {', '.join(RESERVED_LABELS)})")
    if "hardware_type" in raw and "hardware" in raw:
        raise PlacementError(f"{where}: 'hardware_type' is derived from 'hardware.type'; remove it")
    check_known_keys(raw, _NODE_GROUP_FIELDS, f"cluster.node_groups, {where}")
    if "node_ranks" not in raw:
        raise PlacementError(f"{where}: 'node_ranks' is required")
    num_nodes = len(nodes)
    try:
        ranks = parse_rank_list(raw["node_ranks"], "node ranks") or list(range(num_nodes))
    except PlacementError as err:
        raise PlacementError(f"{where}: {err}") from None
    if len(set(ranks)) != len(ranks):
        raise PlacementError(f"{where}: node rank listed twice in '{raw['node_ranks']}'")
    for rank in ranks:
        if rank >= num_nodes:
            raise PlacementError(
                f"{where}: node rank {rank} out of range in '{raw['node_ranks']}' (cluster has nodes 0-{num_nodes - 1})"
            )
    ranks.sort()
    hardware = raw.get("hardware")
    ignore = raw.get("ignore_hardware", False)
    if not isinstance(ignore, bool):
        raise PlacementError(f"{where}: ignore_hardware must be true or false, got {shown(ignore)}")
    if hardware is not None and ignore:
        raise PlacementError(f"{where}: 'hardware' and 'ignore_hardware' cannot both be set")
    hardware_type: str | None
    units: tuple[int, ...] = ()
    configs: tuple[Mapping[str, object], ...] = ()
    if hardware is not None:
        hardware_type, units, configs = _hardware_from_config(where, hardware, ranks)
    elif ignore:
        hardware_type = None
    else:
        hardware_type = ACCELERATOR if any(nodes[r].num_accelerators for r in ranks) else None
    env_configs = _env_configs_from_config(where, raw.get("env_configs") or [], ranks)
    accelerator_type, memory_gb = _accelerator_from_config(where, raw, hardware_type)
    return NodeGroup(label, tuple(ranks), hardware_type, units, configs, env_configs, accelerator_type, memory_gb)


def _accelerator_from_config(
    where: str, raw: Mapping[str, object], hardware_type: str | None
) -> tuple[str | None, float | None]:
    """`accelerator_type` and `accelerator_memory_gb` of a node group (docs/autoplace.md): GPU groups only."""
    kind, memory = raw.get("accelerator_type"), raw.get("accelerator_memory_gb")
    if (kind is not None or memory is not None) and hardware_type != ACCELERATOR:
        raise PlacementError(f"{where}: accelerator_type and accelerator_memory_gb describe GPUs; the group has none")
    if kind is not None and (isinstance(kind, bool) or not str(kind).strip()):
        raise PlacementError(f"{where}: accelerator_type must be a name like a800, got {kind!r}")
    if memory is not None and (
        isinstance(memory, bool) or not isinstance(memory, int | float) or not 0 < memory < float("inf")
    ):
        raise PlacementError(
            f"{where}: accelerator_memory_gb must be a number of GB > 0, got {memory!r}{not_a_number_hint(memory)}"
        )
    return (None if kind is None else str(kind).strip()), (None if memory is None else float(memory))


def _hardware_from_config(
    where: str, hardware: object, ranks: list[int]
) -> tuple[str, tuple[int, ...], tuple[Mapping[str, object], ...]]:
    if not isinstance(hardware, Mapping):
        raise PlacementError(f"{where}: 'hardware' must be a mapping with 'type' and 'configs'")
    hw_type = str(hardware.get("type"))
    if hw_type not in ROBOT_TYPES:
        raise PlacementError(f"{where}: unknown hardware type '{hw_type}' (known: {', '.join(ROBOT_TYPES)})")
    configs = hardware.get("configs") or []
    if not isinstance(configs, list) or not all(isinstance(c, Mapping) for c in configs):
        raise PlacementError(f"{where}: hardware.configs must be a list of mappings")
    per_node = dict.fromkeys(ranks, 0)
    for config in configs:
        node_rank = config.get("node_rank")
        # Only a real int: a list would not hash, and True or 2.0 would pass as 1 or 2.
        if type(node_rank) is not int or node_rank not in per_node:
            raise PlacementError(
                f"{where}: hardware config {dict(config)} is on node_rank {shown(node_rank)}, "
                f"which is not in the group (nodes {','.join(map(str, ranks))})"
            )
        per_node[node_rank] += 1
    return hw_type, tuple(per_node[r] for r in ranks), tuple(configs)


def _env_configs_from_config(where: str, raw: object, ranks: list[int]) -> tuple[EnvConfig, ...]:
    if not isinstance(raw, list):
        raise PlacementError(f"{where}: env_configs must be a list")
    taken: dict[int, int] = {}
    keys: set[str] = set()
    result = []
    for index, entry in enumerate(raw):
        here = f"{where}: env_configs[{index}]"
        if not isinstance(entry, Mapping):
            raise PlacementError(f"{here} must be a mapping")
        unknown = [k for k in entry if k not in _ENV_CONFIG_FIELDS]
        if unknown:
            raise PlacementError(f"{here}: unknown field '{unknown[0]}' (allowed: {', '.join(_ENV_CONFIG_FIELDS)})")
        try:
            env_ranks = parse_rank_list(entry.get("node_ranks", "all"), "node ranks") or list(ranks)
        except PlacementError as err:
            raise PlacementError(f"{here}: {err}") from None
        for rank in env_ranks:
            if rank not in ranks:
                raise PlacementError(
                    f"{here}: node rank {rank} is not in the group (nodes {','.join(map(str, ranks))})"
                )
            if rank in taken:
                raise PlacementError(f"{here}: node rank {rank} is already configured by env_configs[{taken[rank]}]")
            taken[rank] = index
        variables = entry.get("env_vars") or []
        if not isinstance(variables, list):
            raise PlacementError(f"{here}: env_vars must be a list of one-key mappings like [{{KEY: value}}]")
        pairs = []
        for variable in variables:
            if not isinstance(variable, Mapping) or len(variable) != 1:
                raise PlacementError(
                    f"{here}: env_vars entry {shown(variable)} must be a one-key mapping like {{KEY: value}}"
                )
            ((key, value),) = variable.items()
            key = str(key)
            if not _ENV_NAME.fullmatch(key):
                raise PlacementError(
                    f"{here}: {quote(key)} is not an environment variable name (letters, digits and _, not "
                    "starting with a digit)"
                )
            if key in keys:
                raise PlacementError(f"{here}: variable '{key}' is set twice in the group")
            keys.add(key)
            pairs.append((key, "" if value is None else str(value)))
        interpreter = entry.get("python_interpreter_path")
        result.append(EnvConfig(tuple(env_ranks), tuple(pairs), None if interpreter is None else str(interpreter)))
    return tuple(result)


def check_known_keys(section: Mapping[object, object], known: Sequence[str], where: str) -> None:
    """Refuse a key of a section rlplace owns that it does not know, naming the closest known one: a typo
    such as `gpus_per_node` would otherwise be dropped in silence and the plan made from the default."""
    for key in section:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise PlacementError(f"{where}: unknown key {quote(str(key))}{hint} (known: {', '.join(known)})")
