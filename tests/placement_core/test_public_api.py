"""placement_core/__init__.py: the documented import line, and the docstring's three-line usage."""

import pytest


def test_issue_import_line():
    from placement_core import (
        Cluster,
        ComponentPlacement,
        FlexiblePlacementStrategy,
        HybridComponentPlacement,
        ModelParallelComponentPlacement,
        NodePlacementStrategy,
        PackedPlacementStrategy,
        Placement,
        PlacementError,
        PlacementMode,
    )

    assert issubclass(HybridComponentPlacement, ComponentPlacement)
    assert issubclass(ModelParallelComponentPlacement, ComponentPlacement)
    assert issubclass(PlacementError, ValueError)
    assert {m.value for m in PlacementMode} == {"collocated", "disaggregated", "hybrid", "auto"}
    # Each strategy, called as the placement interface documents it, places on a 2 x 4-GPU cluster.
    cluster = Cluster.from_config({"num_nodes": 2, "accelerators_per_node": 4})
    flexible = FlexiblePlacementStrategy([[0, 1], [5]]).get_placement(cluster)
    assert [(p.cluster_node_rank, p.visible_accelerators) for p in flexible] == [(0, ("0", "1")), (1, ("1",))]
    packed = PackedPlacementStrategy(0, 7, 2, 2).get_placement(cluster)
    assert [p.local_hardware_ranks for p in packed] == [(0, 2), (1, 3), (0, 2), (1, 3)]
    node = NodePlacementStrategy([1]).get_placement(cluster)
    assert [(p.cluster_node_rank, p.local_accelerator_rank, p.node_group_label) for p in node] == [(1, 0, "cluster")]
    # The records are Placements and cannot be changed (their fields, in order, are checked in test_strategies.py).
    assert all(isinstance(p, Placement) for p in (*flexible, *packed, *node))
    with pytest.raises(AttributeError):
        flexible[0].rank = 1  # type: ignore[misc]


def test_module_docstring_usage():
    from placement_core import Cluster, ComponentPlacement

    config = {"cluster": {"num_nodes": 1, "component_placement": {"actor": "0-3"}}}
    cluster = Cluster.from_config(config["cluster"])
    placement = ComponentPlacement(config, cluster)
    assert len(placement.get_strategy("actor").get_placement(cluster)) == 4


def test_public_names_are_exported():
    import placement_core

    for name in placement_core.__all__:
        assert hasattr(placement_core, name)


def test_core_does_not_import_kubernetes_or_ray():
    import subprocess
    import sys

    code = (
        "import sys, placement_core, placement_core.plan, placement_core.cli.plan; "
        "bad = [m for m in ('kubernetes', 'kopf', 'ray') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
