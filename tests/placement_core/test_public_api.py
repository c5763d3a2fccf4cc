"""placement_core/__init__.py: the import line of the issue, and the docstring's three-line usage."""


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
    for strategy in (FlexiblePlacementStrategy, PackedPlacementStrategy, NodePlacementStrategy):
        assert callable(strategy.get_placement)
    assert Placement.__dataclass_fields__
    assert Cluster.from_config


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
