"""Property tests: valid random placements keep the Placement invariants of docs/placement.md; any input gives a placement or a PlacementError."""

from collections import Counter

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from placement_core import (
    Cluster,
    ComponentPlacement,
    FlexiblePlacementStrategy,
    ModelParallelComponentPlacement,
    NodePlacementStrategy,
    PackedPlacementStrategy,
    PlacementError,
)
from placement_core.components import component_placement
from placement_core.plan import build_plan

VALID = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- valid configs, built so that every process stays on one node ------------------------------------------------


@st.composite
def gpu_cluster(draw):
    counts = draw(st.lists(st.integers(0, 8), min_size=1, max_size=4))
    if not any(counts):
        counts[0] = draw(st.integers(1, 8))
    return {"num_nodes": len(counts), "accelerators_per_node": counts}


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def valid_placement(draw, counts):
    """A placement string over the cluster group: parts inside one node each, ascending, processes continuous.

    Returns (text, expected rank lists per process).
    """
    texts, expected = [], []
    next_process = 0
    offset = 0
    for count in counts:
        node_ranks = list(range(offset, offset + count))
        offset += count
        if not count or not draw(st.booleans()):
            continue
        lo = draw(st.integers(0, count - 1))
        hi = draw(st.integers(lo, count - 1))
        resources = node_ranks[lo : hi + 1]
        n = len(resources)
        # Either k resources per process (k divides n) or m processes per resource.
        per_process = draw(st.sampled_from(_divisors(n)))
        processes = n // per_process if draw(st.booleans()) else n * draw(st.integers(1, 3))
        if processes == n and draw(st.booleans()):
            process_text = ""
        else:
            process_text = f":{next_process}-{next_process + processes - 1}"
        resource_text = str(resources[0]) if n == 1 else f"{resources[0]}-{resources[-1]}"
        texts.append(f"{resource_text}{process_text}")
        if processes <= n:
            k = n // processes
            expected.extend(resources[i * k : (i + 1) * k] for i in range(processes))
        else:
            m = processes // n
            expected.extend([r] for r in resources for _ in range(m))
        next_process += processes
    if not texts:  # at least one part: the first GPU of the first node with GPUs
        first = next(sum(counts[:i]) for i, c in enumerate(counts) if c)
        texts.append(str(first))
        expected.append([first])
    separator = draw(st.sampled_from([",", ", ", " , "]))
    return separator.join(texts), expected


@st.composite
def valid_job(draw):
    cluster = draw(gpu_cluster())
    counts = cluster["accelerators_per_node"]
    components = {}
    expected = {}
    for name in draw(st.lists(st.sampled_from(["actor", "rollout", "env", "reward"]), min_size=1, unique=True)):
        text, ranks = draw(valid_placement(counts))
        components[name] = text
        expected[name] = ranks
    return {"cluster": {**cluster, "component_placement": components}}, expected


def _check_invariants(cluster, strategy, placements, isolate):
    assert [p.rank for p in placements] == list(range(len(placements)))
    per_node = Counter(p.cluster_node_rank for p in placements)
    local_ranks = {}
    first_seen = {}
    for p in placements:
        node = cluster.nodes[p.cluster_node_rank]
        assert p.local_world_size == per_node[p.cluster_node_rank]
        local_ranks.setdefault(p.cluster_node_rank, []).append(p.local_rank)
        first_seen.setdefault(p.cluster_node_rank, len(first_seen))
        assert p.placement_node_rank == first_seen[p.cluster_node_rank]
        assert p.isolate_accelerator is isolate
        assert type(p.local_accelerator_rank) is int
        all_gpus = [str(i) for i in range(node.num_accelerators)]
        if isolate and strategy.kind != "node":
            assert list(p.visible_accelerators) == [str(r) for r in p.local_hardware_ranks]
            assert p.local_accelerator_rank == p.local_hardware_ranks[0]
        else:
            assert list(p.visible_accelerators) == all_gpus
            assert p.local_accelerator_rank == (0 if all_gpus else -1)
        assert all(0 <= r < node.num_accelerators for r in list(p.local_hardware_ranks))
    for ranks in local_ranks.values():
        assert ranks == list(range(len(ranks)))


@VALID
@given(valid_job(), st.booleans())
def test_valid_placements_keep_the_invariants(job, isolate):
    config, expected = job
    cluster = Cluster.from_config(config["cluster"])
    placed = ComponentPlacement(config, cluster)
    space = cluster.rank_space(["cluster"])
    for name, rank_lists in expected.items():
        strategy = placed.get_strategy(name)
        assert isinstance(strategy, FlexiblePlacementStrategy)
        assert strategy.hardware_ranks_list == rank_lists
        assert placed.get_world_size(name) == len(rank_lists)
        assert placed.get_hardware_ranks(name) == sorted({r for ranks in rank_lists for r in ranks})
        placements = placed.get_placement(name, isolate)
        assert len(placements) == len(rank_lists)
        for p, ranks in zip(placements, rank_lists, strict=True):
            # Every rank of the process is on the process's node, and its local ranks are the real assignment.
            assert {space.node[r] for r in ranks} == {p.cluster_node_rank}
            assert p.local_hardware_ranks == tuple(space.local[r] for r in ranks)
        _check_invariants(cluster, strategy, placements, isolate)
    build_plan(placed, isolate_accelerator=isolate)


@st.composite
def composite_groups(draw):
    """A GPU cluster split into groups g0, g1, ... over disjoint nodes, and an order to list them in."""
    cluster = draw(gpu_cluster())
    n = cluster["num_nodes"]
    owner = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    labels = sorted(set(owner))
    groups = [{"label": f"g{label}", "node_ranks": [r for r in range(n) if owner[r] == label]} for label in labels]
    order = draw(st.permutations([g["label"] for g in groups]))
    return {**cluster, "node_groups": groups}, list(order)


@VALID
@given(composite_groups(), st.booleans(), st.booleans())
def test_composite_groups_concatenate_in_listed_order(cluster_and_order, isolate, as_list):
    cluster_config, order = cluster_and_order
    cluster = Cluster.from_config(cluster_config)
    expected = [
        (node.rank, local, label)
        for label in order
        for node in cluster.nodes
        if node.rank in cluster.get_node_group(label).node_ranks
        for local in range(node.num_accelerators)
    ]
    node_group = order if as_list else ",".join(order)
    config = {
        "cluster": {**cluster_config, "component_placement": {"a": {"node_group": node_group, "placement": "all"}}}
    }
    placed = ComponentPlacement(config, cluster)
    placements = placed.get_placement("a", isolate)
    if placed.get_strategy("a").kind == "node":  # a listed group without GPUs: one process per node
        assert any(not cluster.get_node_group(label).hardware_type for label in order)
        return
    assert [(p.cluster_node_rank, p.local_hardware_ranks[0], p.node_group_label) for p in placements] == expected
    _check_invariants(cluster, placed.get_strategy("a"), placements, isolate)


@VALID
@given(gpu_cluster(), st.integers(1, 4), st.integers(1, 4), st.booleans(), st.data())
def test_packed_invariants(cluster_config, n, stride, isolate, data):
    cluster = Cluster.from_config(cluster_config)
    gpu_node = [node.rank for node in cluster.nodes for _ in range(node.num_accelerators)]
    # Ranks around the cluster's size, so that both placements that fit and ones that do not are common.
    start = data.draw(st.integers(0, len(gpu_node)), label="start")
    end = data.draw(st.integers(max(0, start - 1), len(gpu_node) + 1), label="end")
    # When the strategy must place, worked out independently of it: the ranks exist, divide into blocks, and
    # every process (s, s+stride, ..., s+(n-1)*stride) stays on one node.
    block = n * stride
    fits = start <= end < len(gpu_node) and (end - start + 1) % block == 0
    if fits:
        firsts = [b + j for b in range(start, end + 1, block) for j in range(stride)]
        fits = all(gpu_node[s] == gpu_node[s + (n - 1) * stride] for s in firsts)
    try:
        strategy = PackedPlacementStrategy(start, end, n, stride)
        placements = strategy.get_placement(cluster, isolate)
    except PlacementError as err:
        assert not fits, f"refused a packed placement that fits: {err}"
        event("refused")
        return
    assert fits, "placed a packed placement that does not fit"
    event("placed")
    assert len(placements) == (end - start + 1) // n
    space = cluster.rank_space(["cluster"])
    used = []
    for p in placements:
        assert len(p.local_hardware_ranks) == n
        assert all(
            b - a == stride for a, b in zip(p.local_hardware_ranks, list(p.local_hardware_ranks)[1:], strict=False)
        )
        used.extend(
            next(i for i in range(len(space)) if space.node[i] == p.cluster_node_rank and space.local[i] == r)
            for r in p.local_hardware_ranks
        )
    assert sorted(used) == list(range(start, end + 1))
    _check_invariants(cluster, strategy, placements, isolate)


@VALID
@given(gpu_cluster(), st.lists(st.integers(0, 3), min_size=1, max_size=12), st.booleans())
def test_node_invariants(cluster_config, node_ranks, isolate):
    cluster = Cluster.from_config(cluster_config)
    strategy = NodePlacementStrategy(node_ranks)
    try:
        placements = strategy.get_placement(cluster, isolate)
    except PlacementError:
        assert max(node_ranks) >= cluster.num_nodes
        return
    assert [p.cluster_node_rank for p in placements] == sorted(node_ranks)
    assert all(p.local_hardware_ranks == () for p in placements)
    _check_invariants(cluster, strategy, placements, isolate)


# -- anything in: a placement or a PlacementError, never another exception --------------------------------------


def mostly(plausible, wild):
    """Draw from `plausible` four times in five, so that many examples get past the first check."""
    return st.integers(0, 4).flatmap(lambda i: plausible if i else wild)


SMALL = st.integers(0, 9).map(str)
RANGE = st.one_of(SMALL, st.tuples(SMALL, SMALL).map("-".join))
PART = st.tuples(st.one_of(RANGE, st.sampled_from(["all", "ALL"])), st.none() | RANGE).map(
    lambda p: p[0] if p[1] is None else f"{p[0]}:{p[1]}"
)
#: Mostly near-valid placement strings (so that many place), plus arbitrary text and values.
PLACEMENT_TEXT = st.one_of(
    st.lists(PART, min_size=1, max_size=3).map(",".join),
    st.lists(PART, min_size=1, max_size=3).map(" , ".join),
    st.text(alphabet="0123456789-:, \tallALL", max_size=24),
    st.text(max_size=12),
    st.integers(-3, 40),
    st.floats(allow_nan=True),
    st.none(),
    st.booleans(),
    st.lists(st.integers(0, 9), max_size=3),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet="0123456789-,:all aFrnkcpu", max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["type", "configs", "node_rank", "node_ranks", "env_vars", "A"]), inner, max_size=3
        ),
    ),
    max_leaves=6,
)
NODE_RANKS = mostly(
    st.sampled_from(["0", "1", "2", "0-1", "1-2", "0-2", "all", "0,2", 0, 1, 2])
    | st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True),
    SCALARS,
)
HARDWARE = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["Franka", "DualFranka", "GimArm", "DOSW1", "Turtle2", "Panda", None]),
        "configs": st.lists(st.fixed_dictionaries({"node_rank": st.integers(0, 2) | SCALARS}), max_size=3) | VALUES,
    }
)
ENV_CONFIG = st.fixed_dictionaries(
    {},
    optional={
        "node_ranks": NODE_RANKS,
        "env_vars": st.lists(st.dictionaries(st.sampled_from(["A", "B", "C"]), SCALARS, max_size=2), max_size=3)
        | VALUES,
        "python_interpreter_path": SCALARS,
    },
)
PLAUSIBLE_GROUP = st.fixed_dictionaries(
    {"label": st.sampled_from(["a800", "4090", "robot", "cpu"]), "node_ranks": NODE_RANKS},
    optional={
        "hardware": HARDWARE,
        "ignore_hardware": st.booleans(),
        "env_configs": st.lists(ENV_CONFIG, max_size=2),
    },
)
NODE_GROUP = st.one_of(
    PLAUSIBLE_GROUP,
    st.fixed_dictionaries(
        {"label": st.sampled_from(["a800", "4090", "robot", "cpu", "cluster", "", 7])},
        optional={
            "node_ranks": NODE_RANKS,
            "hardware": HARDWARE | VALUES,
            "ignore_hardware": SCALARS,
            "env_configs": st.lists(ENV_CONFIG | VALUES, max_size=2) | VALUES,
            "hardware_type": SCALARS,
            "extra": SCALARS,
        },
    ),
    VALUES,
)
NODE_GROUPS = mostly(
    st.lists(PLAUSIBLE_GROUP, max_size=3, unique_by=lambda group: group["label"]),
    st.lists(NODE_GROUP, max_size=3) | VALUES,
)
CLUSTER = st.integers(1, 4).flatmap(
    lambda n: st.fixed_dictionaries(
        {"num_nodes": mostly(st.just(n), SCALARS)},
        optional={
            "accelerators_per_node": mostly(
                st.integers(0, 8) | st.lists(st.integers(0, 8), min_size=n, max_size=n),
                st.lists(st.integers(-1, 8), max_size=4) | SCALARS,
            ),
            "node_groups": NODE_GROUPS,
        },
    )
)
NODE_GROUP_VALUE = st.one_of(
    st.sampled_from(["a800", "4090", "a800,4090", "4090,a800", "robot", "cpu", "node", "cluster", "4090,robot"]),
    st.lists(st.sampled_from(["a800", "4090", "robot", "cpu", 4090]), min_size=1, max_size=2),
    st.sampled_from(["x", "", "a800,a800"]),
    VALUES,
)
COMPONENT_VALUE = st.one_of(
    PLACEMENT_TEXT,
    st.fixed_dictionaries({"placement": PLACEMENT_TEXT}, optional={"node_group": NODE_GROUP_VALUE}),
    st.dictionaries(st.sampled_from(["placement", "node_group", "other"]), VALUES, max_size=2),
    VALUES,
)
COMPONENT_NAMES = st.sampled_from(["actor", "rollout", "actor,rollout", "inference", "reward", "env", "agent", "a,", 3])
COMPONENTS = st.one_of(
    st.dictionaries(
        COMPONENT_NAMES,
        st.fixed_dictionaries(
            {"placement": st.sampled_from(["0", "1", "all", "0-1", "0:0-1", "0-1:0", "0-3:0-1", "2-5"])},
            optional={"node_group": NODE_GROUP_VALUE},
        ),
        min_size=1,
        max_size=2,
    ),
    st.dictionaries(COMPONENT_NAMES, COMPONENT_VALUE, min_size=1, max_size=4),
)


def _kind(err):
    """The error's message without the quoted input, to group hypothesis statistics."""
    return str(err).split("'")[0][:40]


def _use(placed):
    """Touch everything a caller would: strategies, placements, the plan."""
    for name in placed.components:
        placed.get_world_size(name)
        placed.get_hardware_ranks(name)
        placed.get_placement(name, isolate_accelerator=False)
    build_plan(placed)


def _place_or_refuse(config: dict, kind: str = "hybrid") -> None:
    """A placement that is used in every way, or a PlacementError; any other exception fails the test."""
    try:
        placed = component_placement(config, kind=kind)
    except PlacementError as err:
        event(f"error: {_kind(err)}")
        return
    event("placed")
    _use(placed)


@FUZZ
@given(PLACEMENT_TEXT, st.sampled_from([(1, 8), (2, 8), (3, [8, 0, 4])]))
def test_any_placement_text(text, shape):
    num_nodes, accelerators = shape
    config = {
        "cluster": {"num_nodes": num_nodes, "accelerators_per_node": accelerators, "component_placement": {"a": text}}
    }
    _place_or_refuse(config)


@FUZZ
@given(NODE_GROUPS, COMPONENTS)
def test_any_node_groups(groups, components):
    config = {
        "cluster": {
            "num_nodes": 3,
            "accelerators_per_node": [8, 8, 0],
            "node_groups": groups,
            "component_placement": components,
        }
    }
    _place_or_refuse(config)


@FUZZ
@given(CLUSTER, COMPONENTS)
def test_any_cluster(cluster, components):
    _place_or_refuse({"cluster": {**cluster, "component_placement": components}})


@FUZZ
@given(
    st.one_of(
        st.sampled_from(
            [
                {"actor,rollout,reward": "all"},
                {"actor,rollout": "0-7", "reward": "0-7"},
                {"actor": "0-7", "rollout": "0-7", "reward": "8-15"},
                {"actor": "0-7", "rollout": "8-15", "reward": "0-15"},
                {"actor": "0-3", "rollout": "4-11", "inference": "12-15", "reward": "0"},
                {"actor": "0-1", "rollout": "2-13", "inference": "14-15", "reward": "all"},
                {"actor": "0-3", "rollout": "4-7", "critic": "8-11", "critic_inference": "12-15", "reward": "0,3"},
                {"actor,rollout,critic": "0-15", "reward": "0"},
            ]
        ),
        st.fixed_dictionaries(
            {"actor": RANGE, "rollout": RANGE, "reward": PART},
            optional={"inference": RANGE, "critic": RANGE},
        ),
        st.dictionaries(
            st.sampled_from(
                ["actor", "rollout", "actor,rollout", "inference", "reward", "critic", "actor,rollout,reward"]
            ),
            st.text(alphabet="0123456789-:,", min_size=1, max_size=8) | st.sampled_from(["all", "0-7", "0-3", "8-15"]),
            min_size=1,
            max_size=5,
        ),
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "actor_tp": st.integers(0, 8) | SCALARS,
            "rollout_tp": st.sampled_from([1, 2, 3, 4, 8]) | SCALARS,
            "rollout_pp": st.sampled_from([1, 2]),
            "inference_tp": st.sampled_from([1, 2, 4]),
            "recompute": st.booleans() | SCALARS,
            "auto": st.booleans(),
            "pre_process": st.booleans(),
        },
    ),
)
def test_any_model_parallel_job(components, sizes):
    config = {
        "cluster": {
            "num_nodes": 2,
            "accelerators_per_node": 8,
            "component_placement": components,
            "auto_scheduler": sizes.get("auto"),
            "use_pre_process_policy": sizes.get("pre_process"),
        },
        "actor": {"model": {"tensor_model_parallel_size": sizes.get("actor_tp")}},
        "rollout": {
            "tensor_parallel_size": sizes.get("rollout_tp"),
            "pipeline_parallel_size": sizes.get("rollout_pp"),
        },
        "inference": {"model": {"tensor_model_parallel_size": sizes.get("inference_tp")}},
        "algorithm": {"recompute_logprobs": sizes.get("recompute")},
    }
    try:
        placed = ModelParallelComponentPlacement(config, Cluster.from_config(config["cluster"]))
    except PlacementError as err:
        event(f"error: {_kind(err)}")
        return
    event("placed")
    _use(placed)
    for name in placed.components:
        strategy = placed.get_strategy(name)
        _check_invariants(placed.cluster, strategy, placed.get_placement(name), True)
    rollout = placed.get_strategy("rollout")
    assert placed.get_world_size("rollout") * rollout.num_hardware_per_process == placed.rollout_world_size
    if placed.is_collocated:
        # Only TP sizes a collocated rollout process (docs/placement.md, "Modes"), so rollout_dp_size (GPUs // tp*pp) may be smaller.
        assert rollout.num_hardware_per_process == placed.settings.rollout.tp
    else:
        assert placed.get_world_size("rollout") == placed.rollout_dp_size >= 1
