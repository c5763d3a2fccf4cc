"""rlplace placement core: exact per-process placement of RL components on heterogeneous GPU clusters.

    from placement_core import Cluster, ComponentPlacement
    cluster = Cluster.from_config(config["cluster"])
    placement = ComponentPlacement(config, cluster)
    placement.get_strategy("actor").get_placement(cluster)

The grammar is in `grammar.py`, the cluster model in `cluster.py`, the strategies in `strategies.py`, the
component placements in `components.py`, and the plan as data in `plan.py`.
"""

from placement_core.cluster import Cluster, Node, NodeGroup
from placement_core.components import (
    ComponentPlacement,
    HybridComponentPlacement,
    ModelParallelComponentPlacement,
    ModelParallelEvalComponentPlacement,
    MultiAgentComponentPlacement,
    MultiAgentEvalComponentPlacement,
    MultiAgentModelParallelComponentPlacement,
    MultiAgentModelParallelEvalComponentPlacement,
    PlacementMode,
)
from placement_core.errors import CapacityError, PlacementError
from placement_core.placement import Placement
from placement_core.strategies import (
    FlexiblePlacementStrategy,
    NodePlacementStrategy,
    PackedPlacementStrategy,
    PlacementStrategy,
)

__all__ = [
    "CapacityError",
    "Cluster",
    "ComponentPlacement",
    "FlexiblePlacementStrategy",
    "HybridComponentPlacement",
    "ModelParallelComponentPlacement",
    "ModelParallelEvalComponentPlacement",
    "MultiAgentComponentPlacement",
    "MultiAgentEvalComponentPlacement",
    "MultiAgentModelParallelComponentPlacement",
    "MultiAgentModelParallelEvalComponentPlacement",
    "Node",
    "NodeGroup",
    "NodePlacementStrategy",
    "PackedPlacementStrategy",
    "Placement",
    "PlacementError",
    "PlacementMode",
    "PlacementStrategy",
]
