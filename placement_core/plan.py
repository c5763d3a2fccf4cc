"""The plan: every process of every component, where it runs, what it sees, and its environment.

One typed, immutable `Plan` is what `rlplace plan` prints, what the operator stores in the job's ConfigMap,
and what the Ray launcher starts processes from: the plan a worker starts from is exactly the plan a person
inspected. `Plan.to_json` / `Plan.from_json` are its only serialised form (gzip included, for large plans).
"""

from __future__ import annotations

import gzip
import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from placement_core.cluster import ACCELERATOR
from placement_core.components import ComponentPlacement
from placement_core.errors import PlacementError
from placement_core.placement import Placement, RankTuple, placement_env

#: The first bytes of a gzip stream: `from_json` accepts the plan compressed or not.
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class ProcessPlan:
    """One process: its Placement, the Kubernetes/config name of its node, and its whole environment."""

    placement: Placement
    node_name: str
    """The node's name (its Kubernetes name in the operator, `node-<rank>` offline)."""
    hardware_type: str | None
    """What `local_hardware_ranks` count: `Accelerator` (GPUs), a robot type, or None (whole nodes)."""
    env: Mapping[str, str]
    """The node group's variables for this node, then the placement's own (RANK, CUDA_VISIBLE_DEVICES, ...)."""

    @property
    def rank(self) -> int:
        return self.placement.rank

    @property
    def node_rank(self) -> int:
        """The global (cluster) node rank."""
        return self.placement.cluster_node_rank

    @property
    def held_gpus(self) -> tuple[int, ...]:
        """Local GPUs the process holds: its hardware ranks on GPU groups; none for robots and node placements
        (such a process may see every GPU of its node but holds none of them)."""
        return self.placement.local_hardware_ranks if self.hardware_type == ACCELERATOR else ()


class OnLoss(StrEnum):
    """What losing a process of a component costs the job (docs/replace.md)."""

    RESTART_JOB = "RestartJob"
    """The whole job restarts from its last checkpoint: ranks that hold one state together (a trainer)."""
    REPLACE = "Replace"
    """The lost ranks are started again while the job runs, and the driver goes on with the others meanwhile:
    replicas independent from one iteration to the next (rollout, env, reward)."""


@dataclass(frozen=True, slots=True)
class ComponentPlan:
    """One component: its strategy, the node groups its ranks count over, and its processes in rank order."""

    name: str
    strategy: str
    """flexible, packed or node."""
    node_groups: tuple[str, ...]
    hardware_ranks: tuple[int, ...]
    """Its resource ranks within its node groups, in part order."""
    processes: tuple[ProcessPlan, ...]
    on_loss: OnLoss = OnLoss.RESTART_JOB

    @property
    def world_size(self) -> int:
        return len(self.processes)

    @property
    def master_addr(self) -> str:
        """MASTER_ADDR: the node of rank 0."""
        return self.processes[0].node_name


@dataclass(frozen=True, slots=True)
class Plan:
    """A whole job's placement: its mode and its components, in the order the config lists them."""

    mode: str
    components: tuple[ComponentPlan, ...]

    def component(self, name: str) -> ComponentPlan:
        for component in self.components:
            if component.name == name:
                return component
        raise PlacementError(f"unknown component '{name}' (known: {', '.join(self.names)})")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.components)

    def moved(self, node_from: str, node_to: str) -> Plan:
        """The plan with the processes of node `node_from` on node `node_to` instead, same ranks, GPUs and node rank
        (a lost node of a Replace component's replaced by a healthy one of its group: docs/replace.md). A
        component whose rank 0 was there gets the new node as MASTER_ADDR."""
        components = []
        for component in self.components:
            master_moves = component.master_addr == node_from
            processes = tuple(
                replace(
                    p,
                    node_name=node_to if p.node_name == node_from else p.node_name,
                    env=MappingProxyType({**p.env, "MASTER_ADDR": node_to}) if master_moves else p.env,
                )
                for p in component.processes
            )
            components.append(replace(component, processes=processes))
        return replace(self, components=tuple(components))

    def with_on_loss(self, on_loss: Mapping[str, OnLoss]) -> Plan:
        """The plan with these components' OnLoss (the others keep theirs)."""
        for name in on_loss:
            self.component(name)
        components = tuple(replace(c, on_loss=on_loss.get(c.name, c.on_loss)) for c in self.components)
        return replace(self, components=components)

    def processes(self) -> Iterator[tuple[ComponentPlan, ProcessPlan]]:
        """Every process of every component, component by component in rank order."""
        for component in self.components:
            for process in component.processes:
                yield component, process

    # -- the one serialised form -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "components": {
                c.name: {
                    "world_size": c.world_size,
                    "strategy": c.strategy,
                    "node_groups": list(c.node_groups),
                    "hardware_ranks": list(c.hardware_ranks),
                    # Only when not the default, so a plan without replacement reads as before.
                    **({"on_loss": str(c.on_loss)} if c.on_loss != OnLoss.RESTART_JOB else {}),
                    "processes": [
                        {
                            **p.placement.to_dict(),
                            "node_name": p.node_name,
                            "hardware_type": p.hardware_type,
                            "env": dict(p.env),
                        }
                        for p in c.processes
                    ],
                }
                for c in self.components
            },
        }

    def to_json(self, indent: int | None = None) -> str:
        separators = None if indent else (",", ":")
        return json.dumps(self.to_dict(), indent=indent, separators=separators, ensure_ascii=False)

    def to_gzip(self) -> bytes:
        """The compact JSON, gzipped (deterministic: no timestamp), for plans too large to store as text."""
        return gzip.compress(self.to_json().encode(), mtime=0)

    @classmethod
    def from_json(cls, data: str | bytes) -> Plan:
        """A plan back from `to_json` or `to_gzip` output; anything else is a one-line PlacementError."""
        if isinstance(data, bytes):
            if data[:2] == _GZIP_MAGIC:
                try:
                    data = gzip.decompress(data)
                except (OSError, EOFError) as err:
                    raise PlacementError(f"the plan is not valid gzip: {err}") from None
            try:
                data = data.decode()
            except UnicodeDecodeError as err:
                raise PlacementError(f"the plan is not UTF-8 text: {err.reason} at byte {err.start}") from None
        try:
            raw = json.loads(data)
        except json.JSONDecodeError as err:
            raise PlacementError(f"the plan is not valid JSON: {err.msg} at line {err.lineno}") from None
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: object) -> Plan:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("components"), Mapping) or not raw["components"]:
            raise PlacementError("the plan has no 'components' mapping (expected `rlplace plan --format json` output)")
        mode = raw.get("mode")
        if not isinstance(mode, str):
            raise PlacementError(f"the plan's 'mode' must be a string, got {_quote(mode)}")
        return cls(mode, tuple(_component_from_dict(str(name), c) for name, c in raw["components"].items()))


# -- building ---------------------------------------------------------------------------------------------


def build_plan(placement: ComponentPlacement, isolate_accelerator: bool = True) -> Plan:
    """The plan of a parsed placement: every process with its node, hardware type and environment."""
    cluster = placement.cluster
    components = []
    for name in placement.components:
        processes = placement.get_placement(name, isolate_accelerator)
        on_nodes = placement.get_strategy(name).kind == "node"
        world_size = len(processes)
        master = cluster.nodes[processes[0].cluster_node_rank].display_name
        planned = []
        for p in processes:
            group = cluster.get_node_group(p.node_group_label)
            env = group.env_for(p.cluster_node_rank)
            env.update(placement_env(p, world_size, master))
            planned.append(
                ProcessPlan(
                    placement=p,
                    node_name=cluster.nodes[p.cluster_node_rank].display_name,
                    hardware_type=None if on_nodes else group.hardware_type,
                    env=MappingProxyType(env),
                )
            )
        components.append(
            ComponentPlan(
                name=name,
                strategy=placement.get_strategy(name).kind,
                node_groups=tuple(placement.get_node_groups(name)),
                hardware_ranks=tuple(placement.get_hardware_ranks(name)),
                processes=tuple(planned),
            )
        )
    return Plan(placement.placement_mode.value, tuple(components))


# -- reading ----------------------------------------------------------------------------------------------

#: Placement fields and the JSON types they must have (lists of these for the tuple fields).
_PLACEMENT_TYPES: dict[str, type] = {
    "rank": int,
    "cluster_node_rank": int,
    "placement_node_rank": int,
    "local_accelerator_rank": int,
    "accelerator_type": str,
    "local_rank": int,
    "local_world_size": int,
    "visible_accelerators": str,
    "isolate_accelerator": bool,
    "local_hardware_ranks": int,
    "node_group_label": str,
}
assert tuple(_PLACEMENT_TYPES) == Placement._fields
_LIST_FIELDS = {"visible_accelerators", "local_hardware_ranks"}


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _typed(where: str, value: object, kind: type) -> bool:
    # bool is an int in Python; a JSON true is never a rank.
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def _component_from_dict(name: str, raw: object) -> ComponentPlan:
    where = f"the plan's component '{name}'"
    if not isinstance(raw, Mapping):
        raise PlacementError(f"{where} must be a mapping, got {_quote(raw)}")
    entries = raw.get("processes")
    if not isinstance(entries, list) or not entries:
        raise PlacementError(f"{where} lists no processes")
    strategy = raw.get("strategy")
    groups = raw.get("node_groups")
    ranks = raw.get("hardware_ranks")
    if not isinstance(strategy, str):
        raise PlacementError(f"{where}: 'strategy' must be a string, got {_quote(strategy)}")
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise PlacementError(f"{where}: 'node_groups' must be a list of labels, got {_quote(groups)}")
    if not isinstance(ranks, list) or not all(_typed(where, r, int) for r in ranks):
        raise PlacementError(f"{where}: 'hardware_ranks' must be a list of integers, got {_quote(ranks)}")
    on_loss = raw.get("on_loss", OnLoss.RESTART_JOB)
    if on_loss not in tuple(OnLoss):
        raise PlacementError(f"{where}: 'on_loss' must be one of {', '.join(OnLoss)}, got {_quote(on_loss)}")
    processes = tuple(_process_from_dict(where, index, entry) for index, entry in enumerate(entries))
    return ComponentPlan(name, strategy, tuple(groups), tuple(ranks), processes, OnLoss(on_loss))


def _process_from_dict(component: str, index: int, raw: object) -> ProcessPlan:
    where = f"{component}, process {index}"
    if not isinstance(raw, Mapping):
        raise PlacementError(f"{where} must be a mapping, got {_quote(raw)}")
    values: dict[str, Any] = {}
    for key, kind in _PLACEMENT_TYPES.items():
        if key not in raw:
            raise PlacementError(f"{where} has no '{key}'")
        value = raw[key]
        if key in _LIST_FIELDS:
            if not isinstance(value, list) or not all(_typed(where, v, kind) for v in value):
                raise PlacementError(f"{where}: '{key}' must be a list of {kind.__name__}, got {_quote(value)}")
            value = RankTuple(value)
        elif not _typed(where, value, kind):
            raise PlacementError(f"{where}: '{key}' must be {kind.__name__}, got {_quote(value)}")
        values[key] = value
    if values["rank"] != index:
        raise PlacementError(f"{where} has rank {values['rank']}; ranks must be 0, 1, ... in order")
    node_name, hardware_type, env = raw.get("node_name"), raw.get("hardware_type"), raw.get("env")
    if not isinstance(node_name, str):
        raise PlacementError(f"{where}: 'node_name' must be a string, got {_quote(node_name)}")
    if hardware_type is not None and not isinstance(hardware_type, str):
        raise PlacementError(f"{where}: 'hardware_type' must be a string or null, got {_quote(hardware_type)}")
    if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
        raise PlacementError(f"{where}: 'env' must map variable names to strings, got {_quote(env)}")
    return ProcessPlan(Placement(**values), node_name, hardware_type, MappingProxyType(dict(env)))


#: Names `shared_with` and `shares_with` list at most, per process or component: with thousands of components
#: on the same GPUs, full lists would grow with the square of the component count (20,000 components on
#: `0-7` are 400 million names).
MAX_SHARING_LISTED = 100


def _holders(plan: Plan) -> dict[tuple[int, str | None, int], dict[str, None]]:
    """Per hardware unit (node, hardware type, local rank): the components with a process on it, in order."""
    holders: dict[tuple[int, str | None, int], dict[str, None]] = {}
    for component, process in plan.processes():
        for unit in process.placement.local_hardware_ranks:
            holders.setdefault((process.node_rank, process.hardware_type, unit), {})[component.name] = None
    return holders


def _others(units: list[dict[str, None]], name: str, order: Mapping[str, int], limit: int) -> tuple[str, ...]:
    """The components other than `name` holding any of `units`, the first `limit` in config order. A unit's
    holders are in config order, and a name among the first `limit` of the union has fewer than `limit`
    others before it in any unit that holds it, so each unit's first `limit + 1` holders suffice: the work
    is linear in the units whatever the component count."""
    found: set[str] = set()
    for holders in units:
        found.update(itertools.islice(holders, limit + 1))
    found.discard(name)
    return tuple(sorted(found, key=order.__getitem__)[:limit])


def shared_with(plan: Plan, limit: int = MAX_SHARING_LISTED) -> dict[tuple[str, int], tuple[str, ...]]:
    """Per process (component, rank): the other components that have a process on one of its hardware units
    (the same GPU or robot of the same node), at most `limit` of them (MAX_SHARING_LISTED). Linear in the
    number of processes and units."""
    holders = _holders(plan)
    order = {name: index for index, name in enumerate(plan.names)}
    return {
        (component.name, process.rank): _others(
            [holders[(process.node_rank, process.hardware_type, u)] for u in process.placement.local_hardware_ranks],
            component.name,
            order,
            limit,
        )
        for component, process in plan.processes()
    }


def shares_with(plan: Plan, limit: int = MAX_SHARING_LISTED) -> dict[str, tuple[str, ...]]:
    """Per component: the other components holding at least one of its hardware units, at most `limit`."""
    holders = _holders(plan)
    order = {name: index for index, name in enumerate(plan.names)}
    return {
        component.name: _others(
            list(
                {
                    id(h): h
                    for p in component.processes
                    for h in (holders[(p.node_rank, p.hardware_type, u)] for u in p.placement.local_hardware_ranks)
                }.values()
            ),
            component.name,
            order,
            limit,
        )
        for component in plan.components
    }
