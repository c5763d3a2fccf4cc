"""Component placements (docs/placement.md: the grammar, and "Modes"): a `cluster.component_placement` config -> strategies.

`ComponentPlacement` applies the grammar of `grammar.py` to a cluster's rank spaces and gives every component a
Flexible (hardware) or Node strategy; `ModelParallelComponentPlacement` then re-lays the reasoning components
(actor, rollout, inference, ...) as Packed strategies according to their model-parallel sizes.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Self

from placement_core.cluster import ACCELERATOR, CLUSTER_GROUP, Cluster, RankSpace
from placement_core.errors import CapacityError, PlacementError
from placement_core.grammar import MAX_PROCESSES, Part, PlacementEntry, parse_placement
from placement_core.jobconfig import (
    ModelParallelSettings,
    PlacementKind,
    default_placement_kind,
    placement_entries,
    read_cluster,
)
from placement_core.placement import Placement
from placement_core.strategies import (
    FlexiblePlacementStrategy,
    NodePlacementStrategy,
    PackedPlacementStrategy,
    PlacementStrategy,
)


class PlacementMode(enum.Enum):
    COLLOCATED = "collocated"
    DISAGGREGATED = "disaggregated"
    HYBRID = "hybrid"
    AUTO = "auto"


@dataclass
class _Entry:
    """One key of `component_placement`: the names that share it and what they were given."""

    key: str
    names: tuple[str, ...]
    labels: tuple[str, ...]
    text: str
    space: RankSpace
    hardware_ranks: list[int]
    strategy: PlacementStrategy

    @property
    def where(self) -> str:
        return f"component '{self.key}'"


class ComponentPlacement:
    """Parses `config['cluster']['component_placement']` against `cluster` (docs/placement.md, the grammar).

    Everything is checked here, at construction: a placement that parses also places.
    """

    def __init__(self, config: Mapping[str, object], cluster: Cluster) -> None:
        self._build(placement_entries(config), cluster)

    @classmethod
    def from_entries(cls, entries: Sequence[PlacementEntry], cluster: Cluster) -> ComponentPlacement:
        """The placement of typed entries (what the operator has), without a config mapping."""
        placement = cls.__new__(cls)
        placement._build(entries, cluster)
        return placement

    def _build(self, entries: Sequence[PlacementEntry], cluster: Cluster) -> None:
        if not entries:
            raise PlacementError("cluster.component_placement must be a non-empty mapping of components to placements")
        self._cluster = cluster
        self._entries: dict[str, _Entry] = {}
        for given in entries:
            entry = self._parse_entry(given)
            for name in entry.names:
                if name in self._entries:
                    raise PlacementError(
                        f"component '{name}' appears in two keys: '{self._entries[name].key}' and '{entry.key}'"
                    )
                self._entries[name] = entry
        for entry in {id(e): e for e in self._entries.values()}.values():
            self._check_places(entry, entry.strategy)
        self._mode = self._derive_mode()

    # -- public accessors --------------------------------------------------------------------------------

    @property
    def components(self) -> list[str]:
        return list(self._entries)

    @property
    def placement_mode(self) -> PlacementMode:
        return self._mode

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    def get_world_size(self, component_name: str) -> int:
        """Number of processes the component's strategy makes."""
        return self.get_strategy(component_name).num_processes(self._cluster)

    def get_hardware_ranks(self, component_name: str) -> list[int]:
        """The component's resource ranks (within its node groups), in part order."""
        return list(self._entry(component_name).hardware_ranks)

    def get_strategy(self, component_name: str) -> PlacementStrategy:
        return self._entry(component_name).strategy

    def get_node_groups(self, component_name: str) -> tuple[str, ...]:
        return self._entry(component_name).labels

    def get_placement(self, component_name: str, isolate_accelerator: bool = True) -> list[Placement]:
        return self.get_strategy(component_name).get_placement(self._cluster, isolate_accelerator)

    def get_units(self, component_name: str) -> set[tuple[int, int, str | None]]:
        """The physical resources (node, local rank, type) the component holds; for comparing components."""
        entry = self._entry(component_name)
        space = entry.space
        return {(space.node[r], space.local[r], space.hardware_type[r]) for r in entry.hardware_ranks}

    # -- parsing ---------------------------------------------------------------------------------------------

    def _entry(self, name: str) -> _Entry:
        entry = self._entries.get(name)
        if entry is None:
            raise PlacementError(f"unknown component '{name}' (known: {', '.join(self._entries)})")
        return entry

    def _parse_entry(self, given: PlacementEntry) -> _Entry:
        key_text, text = given.key, given.placement
        labels: Sequence[str] = given.node_groups or (CLUSTER_GROUP,)
        try:
            for label in labels:
                self._cluster.get_node_group(label)
            space = self._cluster.rank_space(labels)
            parts = parse_placement(text)
            hardware_ranks, per_process = _expand(parts, space)
        except PlacementError as err:
            raise type(err)(f"component '{key_text}': {err} (in '{key_text}: {text}')") from None
        strategy: PlacementStrategy
        if space.is_node_space:
            strategy = NodePlacementStrategy([ranks[0] for ranks in per_process], tuple(labels))
        else:
            strategy = FlexiblePlacementStrategy(per_process, tuple(labels))
        return _Entry(key_text, given.names, tuple(labels), text, space, hardware_ranks, strategy)

    def _check_places(self, entry: _Entry, strategy: PlacementStrategy, name: str | None = None) -> None:
        """Place once to check; `name` narrows the message to one component of a shared key."""
        where = entry.where if name is None else f"component '{name}'"
        try:
            strategy.num_processes(self._cluster)
        except PlacementError as err:
            raise type(err)(f"{where}: {err} (in '{entry.key}: {entry.text}')") from None

    def _derive_mode(self) -> PlacementMode:
        units = [self.get_units(name) for name in self._entries]
        if all(u == units[0] for u in units):
            return PlacementMode.COLLOCATED
        if sum(len(u) for u in units) == len(set().union(*units)):
            return PlacementMode.DISAGGREGATED
        return PlacementMode.HYBRID


def _expand(parts: list[Part], space: RankSpace) -> tuple[list[int], list[list[int]]]:
    """Resource ranks in part order, and each process's resource ranks (the grammar's rules, docs/placement.md)."""
    size = len(space)
    resources: list[int] = []
    per_process: list[list[int]] = []
    next_process = 0
    previous: tuple[int, int] | None = None
    for index, part in enumerate(parts):
        if part.resources is None:
            if size == 0:
                raise CapacityError(f"'all' selects nothing: {space.describe()}")
            start, end = 0, size - 1
        else:
            start, end = part.resources.start, part.resources.end
            if end >= size:
                raise CapacityError(f"resource rank {end} is out of range in '{part.text}' ({space.describe()})")
        if previous is not None and start <= previous[1]:
            if start >= previous[0]:
                raise PlacementError(f"resource rank {start} is used twice in '{part.text}'")
            raise PlacementError(f"part '{part.text}' comes after higher resource ranks; list parts in ascending order")
        previous = (start, end)
        count = end - start + 1
        if part.processes is None:
            first, processes = next_process, count
        else:
            first, processes = part.processes.start, len(part.processes)
            if index == 0 and first != 0:
                raise PlacementError(f"process ranks must start at 0, '{part.text}' starts at {first}")
            if first < next_process:
                raise PlacementError(f"process rank {first} is used twice in '{part.text}'")
            if first > next_process:
                raise PlacementError(
                    f"process ranks must be continuous: '{part.text}' starts at {first}, expected {next_process}"
                )
        if next_process + processes > MAX_PROCESSES:
            raise PlacementError(f"more than {MAX_PROCESSES} processes in '{part.text}'")
        if count % processes and processes % count:
            raise PlacementError(
                f"{count} resources and {processes} processes in '{part.text}': one count must divide the other"
            )
        if space.is_node_space and count > processes:
            raise PlacementError(
                f"process would span {count // processes} nodes in '{part.text}' "
                f"({space.describe()}); a node placement gives each process one node"
            )
        ranks = range(start, end + 1)
        resources.extend(ranks)
        if count >= processes:
            k = count // processes
            per_process.extend(list(ranks[i * k : (i + 1) * k]) for i in range(processes))
        else:
            m = processes // count
            per_process.extend([r] for r in ranks for _ in range(m))
        next_process = first + processes
    return resources, per_process


class HybridComponentPlacement(ComponentPlacement):
    """Any components on any resources (embodied tasks); the mode is always HYBRID."""

    @property
    def placement_mode(self) -> PlacementMode:
        return PlacementMode.HYBRID


_MODEL_COMPONENTS = ("actor", "rollout", "inference", "critic", "critic_inference")
_REQUIRED = ("actor", "rollout", "reward")


class _PackedLayout(ComponentPlacement):
    """A placement whose final strategies are Packed ones laid out from model-parallel settings (the reasoning
    and evaluation classes): the parsed entries are checked, then `_lay_out` replaces some of their strategies.
    Accessors follow the final strategies; a component that got none keeps its parsed one."""

    @classmethod
    def from_entries(
        cls, entries: Sequence[PlacementEntry], cluster: Cluster, settings: ModelParallelSettings | None = None
    ) -> Self:
        """The placement of typed entries and settings (what the operator has), without a config mapping."""
        placement = cls.__new__(cls)
        placement._build(entries, cluster)
        placement._lay_out(settings or ModelParallelSettings())
        return placement

    def _build(self, entries: Sequence[PlacementEntry], cluster: Cluster) -> None:
        self._strategies: dict[str, PlacementStrategy] = {}  # until they are built, accessors use the parsed ones
        super()._build(entries, cluster)

    def _lay_out(self, settings: ModelParallelSettings) -> None:
        raise NotImplementedError

    def _packed(
        self, name: str, per_process: int, stride: int = 1, first: int | None = None, last: int | None = None
    ) -> PackedPlacementStrategy:
        """`name`'s GPUs (from `first` to `last`; default its parsed range) packed `per_process` at a time."""
        entry = self._entries[name]
        start = entry.hardware_ranks[0] if first is None else first
        end = entry.hardware_ranks[-1] if last is None else last
        try:
            return PackedPlacementStrategy(start, end, per_process, stride, entry.labels)
        except PlacementError as err:
            raise type(err)(f"component '{name}': {err} (in '{entry.key}: {entry.text}')") from None

    def get_strategy(self, component_name: str) -> PlacementStrategy:
        self._entry(component_name)
        strategy = self._strategies.get(component_name)
        return strategy if strategy is not None else super().get_strategy(component_name)

    def get_hardware_ranks(self, component_name: str) -> list[int]:
        strategy = self.get_strategy(component_name)
        if isinstance(strategy, PackedPlacementStrategy):
            return list(range(strategy.start_hardware_rank, strategy.end_hardware_rank + 1))
        return super().get_hardware_ranks(component_name)


class ModelParallelComponentPlacement(_PackedLayout):
    """Reasoning tasks: actor, rollout, reward (+ inference, critic, critic_inference) laid out by their
    model-parallel sizes as collocated, disaggregated or auto-scheduled (docs/placement.md, "Modes")."""

    def __init__(self, config: Mapping[str, object], cluster: Cluster) -> None:
        self._build(placement_entries(config), cluster)
        self._lay_out(ModelParallelSettings.from_config(config, self.components))

    def _lay_out(self, settings: ModelParallelSettings) -> None:
        """Check the model-parallel rules and replace the parsed strategies by the Packed ones."""
        self.settings = settings
        missing = [name for name in _REQUIRED if name not in self._entries]
        if missing:
            raise PlacementError(
                f"model-parallel placement needs components actor, rollout and reward; missing: {', '.join(missing)}"
            )
        present = [name for name in _MODEL_COMPONENTS if name in self._entries]
        for name in present:
            self._check_gpu_range(name)
        self._mode = self._model_parallel_mode(present)
        s = self.settings
        for name, tp in (("actor", s.actor.tp), ("rollout", s.rollout.tp)):
            if tp > self._gpu_count(name):
                raise PlacementError(
                    f"component '{name}': tensor parallel size {tp} is larger than its {self._gpu_count(name)} GPUs "
                    f"{self._quote(name)}"
                )
        self._strategies = self._model_parallel_strategies(present)
        for name, strategy in self._strategies.items():
            self._check_places(self._entries[name], strategy, name)

    # -- accessors that follow the final strategies ---------------------------------------------------------

    @property
    def placement_mode(self) -> PlacementMode:
        return self._mode

    def get_units(self, component_name: str) -> set[tuple[int, int, str | None]]:
        """The physical GPUs of the final strategy (in auto mode the actor holds every GPU, and a rollout with
        use_pre_process_policy the actor's too)."""
        strategy = self.get_strategy(component_name)
        if not isinstance(strategy, PackedPlacementStrategy):
            return super().get_units(component_name)
        space = self._cluster.rank_space(strategy.node_group_labels)
        return {
            (space.node[r], space.local[r], space.hardware_type[r]) for r in self.get_hardware_ranks(component_name)
        }

    def _gpus(self, name: str) -> int:
        return len(self.get_hardware_ranks(name)) if name in self._entries else 0

    @property
    def is_collocated(self) -> bool:
        return self._mode is PlacementMode.COLLOCATED

    @property
    def is_disaggregated(self) -> bool:
        return self._mode is PlacementMode.DISAGGREGATED

    @property
    def is_auto(self) -> bool:
        return self._mode is PlacementMode.AUTO

    @property
    def has_dedicated_inference(self) -> bool:
        return "inference" in self._entries

    @property
    def actor_world_size(self) -> int:
        return self._gpus("actor")

    @property
    def rollout_world_size(self) -> int:
        return self._gpus("rollout")

    @property
    def inference_world_size(self) -> int:
        return self._gpus("inference")

    @property
    def actor_dp_size(self) -> int:
        return self.actor_world_size // self.settings.actor.training_parallel

    @property
    def rollout_dp_size(self) -> int:
        return self.rollout_world_size // self.settings.rollout.model_parallel

    @property
    def inference_dp_size(self) -> int:
        return self.inference_world_size // self.settings.inference.training_parallel

    # -- checks ----------------------------------------------------------------------------------------------

    def _gpu_count(self, name: str) -> int:
        return len(self._entries[name].hardware_ranks)

    def _check_gpu_range(self, name: str) -> None:
        entry = self._entries[name]
        if entry.space.is_node_space or entry.space.hardware_types != {ACCELERATOR}:
            raise PlacementError(f"component '{name}': model-parallel components must be placed on GPUs")
        if not _continuous(entry.hardware_ranks):
            raise PlacementError(f"component '{name}': its GPUs must be one continuous range, got '{entry.text}'")

    def _model_parallel_mode(self, present: list[str]) -> PlacementMode:
        s = self.settings
        units = {name: self.get_units(name) for name in present}
        disjoint = sum(len(u) for u in units.values()) == len(set().union(*units.values()))
        if s.auto_scheduler and "critic" not in self._entries:
            self._check_auto_order(disjoint)
            return PlacementMode.AUTO
        if units["actor"] == units["rollout"]:
            if "inference" in self._entries:
                raise PlacementError(
                    "collocated mode (actor and rollout on the same GPUs) allows no inference component"
                )
            return PlacementMode.COLLOCATED
        if disjoint:
            if "inference" in self._entries:
                gpus = self._gpu_count("inference")
                if s.inference.tp > gpus:
                    raise PlacementError(
                        f"component 'inference': tensor parallel size {s.inference.tp} is larger than its {gpus} GPUs "
                        f"{self._quote('inference')}"
                    )
                if not s.recompute_logprobs:
                    raise PlacementError(
                        "an inference component needs algorithm.recompute_logprobs: true (it recomputes log-probs)"
                    )
            return PlacementMode.DISAGGREGATED
        raise PlacementError(
            "actor and rollout must be on the same GPUs (collocated mode) or actor, rollout, inference, critic and "
            f"critic_inference on disjoint GPUs (disaggregated mode); got {self._describe(present)}"
        )

    def _quote(self, name: str) -> str:
        entry = self._entries[name]
        return f"(in '{entry.key}: {entry.text}')"

    def _describe(self, names: list[str]) -> str:
        return ", ".join(f"{name}: {self._entries[name].text}" for name in names)

    def _check_auto_order(self, disjoint: bool) -> None:
        chain = [name for name in ("actor", "rollout", "inference") if name in self._entries]
        total = len(self._cluster.rank_space((CLUSTER_GROUP,)))
        expected = 0
        for name in chain:
            ranks = self._entries[name].hardware_ranks
            if self._entries[name].labels != (CLUSTER_GROUP,) or ranks[0] != expected:
                break
            expected = ranks[-1] + 1
        else:
            if disjoint and expected == total:
                return
        raise PlacementError(
            "cluster.auto_scheduler needs actor, rollout and inference on disjoint GPU ranges in that order, from "
            f"GPU 0 to the last GPU ({total - 1}); got {self._describe(chain)}"
        )

    # -- strategies ------------------------------------------------------------------------------------------

    def _model_parallel_strategies(self, present: list[str]) -> dict[str, PlacementStrategy]:
        s = self.settings
        strategies: dict[str, PlacementStrategy] = {}
        if self._mode is PlacementMode.COLLOCATED:
            stride = 1
            if s.actor.tp > s.rollout.tp:
                if s.actor.tp % s.rollout.tp:
                    raise PlacementError(
                        f"collocated mode needs the rollout tensor parallel size ({s.rollout.tp}) to divide the "
                        f"actor's ({s.actor.tp})"
                    )
                stride = s.actor.tp // s.rollout.tp
            strategies["rollout"] = self._packed("rollout", s.rollout.tp, stride)
        else:
            mp = s.rollout.model_parallel
            start = None
            if self._mode is PlacementMode.AUTO and s.use_pre_process_policy:
                start = self._entries["actor"].hardware_ranks[0]
            gpus = (
                self._entries["rollout"].hardware_ranks[-1]
                + 1
                - (start if start is not None else self._entries["rollout"].hardware_ranks[0])
            )
            if gpus % mp:
                raise PlacementError(
                    f"component 'rollout': {gpus} GPUs are not a multiple of tensor*pipeline parallel size {mp} "
                    f"{self._quote('rollout')}"
                )
            strategies["rollout"] = self._packed("rollout", mp, first=start)
        for name in (*present, "reward"):
            if name in strategies:
                continue
            if name == "actor" and self._mode is PlacementMode.AUTO:
                total = len(self._cluster.rank_space((CLUSTER_GROUP,)))
                strategies[name] = PackedPlacementStrategy(0, total - 1, 1, 1, (CLUSTER_GROUP,))
            elif name != "reward" or self._packs_as_gpus(self._entries[name]):
                strategies[name] = self._packed(name, 1)
        return strategies

    @staticmethod
    def _packs_as_gpus(entry: _Entry) -> bool:
        """Reward is unconstrained: only a continuous range of GPUs becomes one GPU per process; a reward on CPU
        nodes (node placement) or on scattered GPUs keeps the placement it was given."""
        return not entry.space.is_node_space and _continuous(entry.hardware_ranks)


class MultiAgentComponentPlacement(ModelParallelComponentPlacement):
    """Multi-agent reasoning (the reference's wideseek-style training): always collocated. Actor and reward are
    on the same GPUs, every `rollout*` component is inside the actor's GPUs, components other than actor,
    rollout, reward and inference (a judge, a planner) must not overlap one another, and each is packed like the
    rollout (its tensor-parallel groups and stride)."""

    def _model_parallel_mode(self, present: list[str]) -> PlacementMode:
        if "inference" in self._entries:
            raise PlacementError("collocated mode (actor and rollout on the same GPUs) allows no inference component")
        return PlacementMode.COLLOCATED

    def _lay_out(self, settings: ModelParallelSettings) -> None:
        super()._lay_out(settings)
        check_multi_agent(self, self._entries)
        rollout = self._strategies["rollout"]
        assert isinstance(rollout, PackedPlacementStrategy)
        for name in _extra_components(self._entries):
            self._strategies[name] = self._packed(name, rollout.num_hardware_per_process, rollout.stride)
            self._check_places(self._entries[name], self._strategies[name], name)


class ModelParallelEvalComponentPlacement(_PackedLayout):
    """Evaluation runs (`runner.task_type: reasoning_eval`): rollout and reward, always collocated. The
    rollout is packed in groups of its tensor parallel size over its continuous GPU range; the reward gets one
    process per GPU over its range. Other components keep the placement they were given."""

    def __init__(self, config: Mapping[str, object], cluster: Cluster) -> None:
        self._build(placement_entries(config), cluster)
        self._lay_out(ModelParallelSettings.from_config(config))

    def _lay_out(self, settings: ModelParallelSettings) -> None:
        self.settings = settings
        missing = [name for name in ("rollout", "reward") if name not in self._entries]
        if missing:
            raise PlacementError(
                f"evaluation placement needs components rollout and reward; missing: {', '.join(missing)}"
            )
        rollout = self._entries["rollout"]
        if rollout.space.is_node_space or rollout.space.hardware_types != {ACCELERATOR}:
            raise PlacementError("component 'rollout': model-parallel components must be placed on GPUs")
        if not _continuous(rollout.hardware_ranks):
            raise PlacementError(f"component 'rollout': its GPUs must be one continuous range, got '{rollout.text}'")
        tp = settings.rollout.tp
        if tp > len(rollout.hardware_ranks):
            raise PlacementError(
                f"component 'rollout': tensor parallel size {tp} is larger than its {len(rollout.hardware_ranks)} "
                f"GPUs (in '{rollout.key}: {rollout.text}')"
            )
        self._strategies["rollout"] = self._packed("rollout", tp)
        reward = self._entries["reward"]
        first, last = reward.hardware_ranks[0], reward.hardware_ranks[-1]
        self._strategies["reward"] = self._packed("reward", 1, first=first, last=last)
        for name, strategy in self._strategies.items():
            self._check_places(self._entries[name], strategy, name)

    @property
    def placement_mode(self) -> PlacementMode:
        return PlacementMode.COLLOCATED

    @property
    def rollout_world_size(self) -> int:
        return len(self.get_hardware_ranks("rollout"))

    @property
    def rollout_dp_size(self) -> int:
        return self.rollout_world_size // self.settings.rollout.model_parallel


class MultiAgentEvalComponentPlacement(ModelParallelEvalComponentPlacement):
    """Multi-agent evaluation: ModelParallelEval, with MultiAgent's rule for extra components (packed like the
    rollout, not overlapping one another)."""

    def _lay_out(self, settings: ModelParallelSettings) -> None:
        super()._lay_out(settings)
        rollout = self._strategies["rollout"]
        assert isinstance(rollout, PackedPlacementStrategy)
        _check_exclusive(self, _extra_components(self._entries))
        for name in _extra_components(self._entries):
            self._strategies[name] = self._packed(name, rollout.num_hardware_per_process, rollout.stride)
            self._check_places(self._entries[name], self._strategies[name], name)


#: The reference framework's names for the multi-agent classes, for code written against it.
MultiAgentModelParallelComponentPlacement = MultiAgentComponentPlacement
MultiAgentModelParallelEvalComponentPlacement = MultiAgentEvalComponentPlacement

#: Components a multi-agent placement shares over the actor's GPUs; any other is an extra (a judge, a planner).
_SHARED_MULTI_AGENT = ("actor", "rollout", "reward", "inference")


def _extra_components(entries: Mapping[str, _Entry]) -> list[str]:
    return [name for name in entries if name not in _SHARED_MULTI_AGENT]


def check_multi_agent(placement: ComponentPlacement, entries: Mapping[str, _Entry]) -> None:
    """The reference's multi-agent rules: actor and reward on the same GPUs, every `rollout*` component inside
    the actor's GPUs, extra components not overlapping one another."""
    actor = placement.get_units("actor")
    if placement.get_units("reward") != actor:
        raise PlacementError(
            "multi-agent placement needs actor and reward on the same GPUs; got "
            f"actor: {entries['actor'].text}, reward: {entries['reward'].text}"
        )
    for name in entries:
        if name.startswith("rollout") and not placement.get_units(name) <= actor:
            raise PlacementError(
                f"multi-agent placement needs every rollout component inside the actor's GPUs; component '{name}' "
                f"({entries[name].text}) is not inside actor's ({entries['actor'].text})"
            )
    _check_exclusive(placement, _extra_components(entries))


def _check_exclusive(placement: ComponentPlacement, names: list[str]) -> None:
    taken: dict[tuple[int, int, str | None], str] = {}
    for name in names:
        for unit in placement.get_units(name):
            other = taken.setdefault(unit, name)
            if other != name:
                raise PlacementError(
                    f"components '{other}' and '{name}' both hold GPU {unit[1]} of node {unit[0]}; extra components "
                    "of a multi-agent placement must not overlap"
                )


def _continuous(ranks: list[int]) -> bool:
    return ranks == list(range(ranks[0], ranks[0] + len(ranks)))


def component_placement(
    config: Mapping[str, object], cluster: Cluster | None = None, kind: PlacementKind | None = None
) -> ComponentPlacement:
    """Parse a whole job config with the placement class its task needs; the cluster comes from its
    `cluster:` section unless given."""
    if cluster is None:
        cluster = read_cluster(config)
    kind = kind or default_placement_kind(config)
    return PLACEMENT_CLASSES[kind](config, cluster)


#: The class of each `--placement` kind (docs/placement.md, "Placement classes").
PLACEMENT_CLASSES: dict[PlacementKind, type[ComponentPlacement]] = {
    "hybrid": HybridComponentPlacement,
    "model-parallel": ModelParallelComponentPlacement,
    "model-parallel-eval": ModelParallelEvalComponentPlacement,
    "multi-agent": MultiAgentComponentPlacement,
    "multi-agent-eval": MultiAgentEvalComponentPlacement,
}


def sharing_groups(held: Mapping[str, AbstractSet[Hashable]]) -> list[list[str]]:
    """Components joined when what they hold (GPUs, units) overlaps, transitively: they take turns on it. In the
    given order within and across groups."""
    groups: list[tuple[list[str], set[Hashable]]] = []
    for name, units in held.items():
        joined = [group for group in groups if group[1] & units]
        members = [member for group in joined for member in group[0]] + [name]
        union = set(units).union(*(group[1] for group in joined))
        groups = [group for group in groups if group not in joined] + [(members, union)]
    order = list(held)
    return sorted((sorted(members, key=order.index) for members, _ in groups), key=lambda g: order.index(g[0]))
