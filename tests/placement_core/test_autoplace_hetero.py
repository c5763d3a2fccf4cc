"""Auto placement over node groups of different GPUs (issue 24; docs/autoplace.md, "Node groups of different GPUs").

The search is held equal to a brute-force enumeration of the same space on random mixed clusters, never places
a component where it does not fit, and its answers are placements the model-parallel class accepts.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from placement_core.autoplace import autotune, hetero
from placement_core.autoplace.cost import CostModel
from placement_core.autoplace.hetero import (
    DEFAULT_BANDWIDTH_GB_S,
    cost_table,
    read_hetero,
    search_hetero,
    wants_hetero,
)
from placement_core.autoplace.inputs import collocated_fits
from placement_core.cli import app
from placement_core.components import ModelParallelComponentPlacement
from placement_core.errors import PlacementError
from placement_core.grammar import parse_placement_entries
from placement_core.jobconfig import read_job


def mixed_config(groups, profile, *, actor_tp=1, rollout_tp=1, rbs=8, gs=2, nmb=1, mrr=8, recompute=True):
    """A reasoning config over node groups given as (label, GPUs per node for each node, memory GB)."""
    counts, node_groups = [], []
    for label, per_node, memory in groups:
        first = len(counts)
        counts.extend(per_node)
        group = {"label": label, "node_ranks": f"{first}-{len(counts) - 1}"}
        if memory is not None:
            group["accelerator_memory_gb"] = memory
        node_groups.append(group)
    return {
        "runner": {"task_type": "reasoning"},
        "cluster": {"num_nodes": len(counts), "accelerators_per_node": counts, "node_groups": node_groups},
        "actor": {"model": {"tensor_model_parallel_size": actor_tp}},
        "rollout": {"tensor_parallel_size": rollout_tp, "max_running_requests": mrr},
        "algorithm": {"group_size": gs, "n_minibatches": nmb, "recompute_logprobs": recompute},
        "data": {"rollout_batch_size": rbs},
        "profile_data": profile,
    }


# -- brute force --------------------------------------------------------------------------------------------


def brute_force(config, model):
    """The best total over every point of the space, enumerated naively (None when the space is empty)."""
    job = read_job(config)
    task = read_hetero(job, model)
    rbs = task.base.rollout_batch_size
    k, pools = len(task.chain), task.pools
    memory = {name: job.profile.get(f"{name}_memory_gb") for name in task.chain}
    best = math.inf
    # collocated on all GPUs of one group
    for p, pool in enumerate(pools):
        need = [memory[n] or 0 for n in task.chain if n != "inference"]
        need = max(need) if task.offload else sum(need)
        if pool.memory_gb is not None and need > pool.memory_gb:
            continue
        if not collocated_fits(pool.node_gpus, job.model_parallel):
            continue
        costs = [task.options[i][p].cost for i in range(k)]
        values = [c(pool.gpus) if c is not None else None for c in costs]
        if None in values:
            continue
        levels = config["profile_data"].get("network_levels")
        whole = brute_link(config, {(p, g) for g in range(pool.gpus)}, tuple(levels.values()) if levels else ())
        collectives = sum(gb / task.bandwidth_gb_s[whole] for gb in task.collective_gb if gb and pool.gpus > 1)
        best = min(best, sum(v * rbs for v in values) + task.sync_seconds("same_node") + collectives)
    # disaggregated: every assignment of components to groups, every GPU count, budgets per group
    tables = [[cost_table(task, i, p) for p in range(len(pools))] for i in range(k)]
    rollout, actor = task.chain.index("rollout"), task.chain.index("actor")
    for assign in itertools.product(range(len(pools)), repeat=k):
        ranges = [range(1, pools[p].gpus + 1) for p in assign]
        for counts in itertools.product(*ranges):
            used = {}
            for p, g in zip(assign, counts, strict=True):
                used[p] = used.get(p, 0) + g
            if any(used[p] > pools[p].gpus for p in used):
                continue
            values = [float(tables[i][p][g]) for i, (p, g) in enumerate(zip(assign, counts, strict=True))]
            if not all(math.isfinite(v) for v in values):
                continue
            levels = config["profile_data"].get("network_levels")
            sizes = tuple(levels.values()) if levels else ()
            gpus = component_gpus(config, assign, counts)
            sync_gpus = gpus[rollout] | gpus[actor]
            if assign[rollout] == assign[actor]:
                low, high = min(g for _, g in sync_gpus), max(g for _, g in sync_gpus)
                sync_gpus |= {(assign[actor], g) for g in range(low, high + 1)}
            link = brute_link(config, sync_gpus, sizes)
            collectives = sum(
                task.collective_gb[i] / task.bandwidth_gb_s[brute_link(config, gpus[i], sizes)]
                for i in range(k)
                if task.collective_gb[i] and counts[i] > 1
            )
            total = sum(values) + max(values) * (rbs - 1) + task.sync_seconds(link) + collectives
            best = min(best, total)
    return best if math.isfinite(best) else None


def group_ranks(group) -> list[int]:
    """A group's node ranks from `0-3` or `0,2,4`."""
    ranks = []
    for part in str(group["node_ranks"]).split(","):
        first, _, last = part.partition("-")
        ranks.extend(range(int(first), int(last or first) + 1))
    return ranks


def component_gpus(config, assign, counts) -> list[set[tuple[int, int]]]:
    """Each component's GPUs as (group, GPU index in the group): its range from the group's GPU 0 in chain order."""
    start, out = {}, []
    for p, g in zip(assign, counts, strict=True):
        offset = start.get(p, 0)
        out.append({(p, gpu) for gpu in range(offset, offset + g)})
        start[p] = offset + g
    return out


def brute_link(config, gpus, sizes) -> str:
    """The slowest link among GPUs given as (group, GPU index), from the GPUs themselves: each group's GPUs in
    node order; their global node ranks; with `sizes` (nodes per domain, widest first) the domains by
    rank // size and the narrowest one they all share, else by node and group."""
    per_node = config["cluster"]["accelerators_per_node"]
    owner = [
        [rank for rank in group_ranks(group) for _ in range(per_node[rank])]
        for group in config["cluster"]["node_groups"]
    ]
    ranks = {owner[p][g] for p, g in gpus}
    if len(ranks) == 1:
        return "same_node"
    if not sizes:
        return "across_groups" if len({p for p, _ in gpus}) > 1 else "across_nodes"
    paths = {tuple(rank // size for size in sizes) for rank in ranks}
    shared = 0
    while shared < len(sizes) and len({path[shared] for path in paths}) == 1:
        shared += 1
    return "same_rack" if shared == len(sizes) else "same_block" if shared else "across_blocks"


def memory_ok(config, result) -> bool:
    """From the config alone: no component on a group whose GPUs are smaller than it needs."""
    profile = config["profile_data"]
    memory = {g["label"]: g.get("accelerator_memory_gb") for g in config["cluster"]["node_groups"]}
    if result.mode == "collocated":
        (value,) = result.component_placement.values()
        need = [profile.get(f"{n}_memory_gb") or 0 for n in ("rollout", "actor")]
        need = max(need) if profile.get("collocated_offload") else sum(need)
        have = memory[value["node_group"]]
        return have is None or need <= have
    for name, choice in result.components.items():
        need, have = profile.get(f"{name}_memory_gb"), memory[choice.node_group]
        if need is not None and have is not None and need > have:
            return False
    return True


TYPES = ("a800", "4090", "h20")


@st.composite
def scenarios(draw):
    n_types = draw(st.integers(2, 3))
    groups = []
    for label in TYPES[:n_types]:
        per_node = draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=2))
        memory = draw(st.sampled_from([16, 24, 48, 80]))
        groups.append((label, per_node, memory))
    recompute = draw(st.booleans())
    chain = ("rollout", "inference", "actor") if recompute else ("rollout", "actor")
    profile: dict[str, object] = {}
    for name in chain:
        if draw(st.booleans()):
            measured = draw(st.lists(st.sampled_from(TYPES[:n_types]), min_size=1, max_size=n_types, unique=True))
            profile[f"{name}_cost_by_type"] = {t: draw(st.integers(1, 200)) for t in measured}
        if f"{name}_cost_by_type" not in profile or draw(st.booleans()):
            profile[f"{name}_cost"] = draw(st.integers(1, 200))
        # tight and loose memory limits
        memory = draw(st.sampled_from([None, 8, 14, 20, 30, 40, 60]))
        if memory is not None:
            profile[f"{name}_memory_gb"] = memory
    if draw(st.booleans()):
        profile["model_size_gb"] = draw(st.sampled_from([1, 7, 14, 70, 1000]))
    if draw(st.booleans()):
        profile["sync_bandwidth_gb_s"] = {"across_groups": draw(st.sampled_from([1, 10, 50]))}
    if draw(st.booleans()):
        profile["collocated_offload"] = True
    if draw(st.booleans()):
        # where the nodes sit: racks of 1-2 nodes, blocks of 2-4 (counted from node rank 0)
        profile["network_levels"] = {"block": draw(st.sampled_from([2, 4])), "rack": draw(st.sampled_from([1, 2]))}
    config = mixed_config(
        groups,
        profile,
        actor_tp=draw(st.sampled_from([1, 2])),
        rollout_tp=draw(st.sampled_from([1, 2])),
        rbs=draw(st.sampled_from([2, 4, 8])),
        gs=draw(st.sampled_from([1, 2, 4])),
        nmb=draw(st.sampled_from([1, 2])),
        mrr=draw(st.sampled_from([1, 4, 16])),
        recompute=recompute,
    )
    for group in config["cluster"]["node_groups"]:
        group["accelerator_type"] = group["label"]  # distinct types: the node-group search always answers
    return config, draw(st.sampled_from(list(CostModel)))


def autotune_matching_brute_force(config, model):
    """autotune's answer, held to the brute force's best total (refused exactly where the space is empty)."""
    expected = brute_force(config, model)
    if expected is None:
        with pytest.raises(PlacementError):
            autotune(read_job(config), model)
        return None
    result = autotune(read_job(config), model)
    assert result.total_cost == pytest.approx(expected, rel=1e-9)
    return result


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_search_equals_brute_force_on_mixed_clusters(scenario):
    config, model = scenario
    result = autotune_matching_brute_force(config, model)
    if result is None:
        return
    assert memory_ok(config, result)
    # what the block says is a placement the framework accepts, as `rlplace plan` reads it
    job = read_job(config)
    entries = parse_placement_entries(result.component_placement)
    ModelParallelComponentPlacement.from_entries(entries, job.cluster, job.model_parallel)


@st.composite
def racked_scenarios(draw):
    """One or two groups of 3-4 nodes in racks and blocks, where keeping rollout and actor within the first rack
    or block changes the link the weights cross."""
    groups = [
        (label, draw(st.lists(st.sampled_from([1, 2]), min_size=3, max_size=4)), 80)
        for label in TYPES[: draw(st.integers(1, 2))]
    ]
    profile = {
        "actor_cost": draw(st.integers(1, 200)),
        "rollout_cost": draw(st.integers(1, 200)),
        "model_size_gb": draw(st.sampled_from([1, 14, 70, 400])),
        "network_levels": {"block": draw(st.sampled_from([2, 4, 8])), "rack": draw(st.sampled_from([1, 2]))},
    }
    if draw(st.booleans()):
        profile["sync_bandwidth_gb_s"] = {"same_rack": draw(st.sampled_from([12.5, 50])), "across_blocks": 1}
    config = mixed_config(
        groups, profile, rbs=draw(st.sampled_from([2, 4, 8])), gs=2, mrr=draw(st.sampled_from([1, 4])), recompute=False
    )
    for group in config["cluster"]["node_groups"]:
        group["accelerator_type"] = group["label"]
    return config, draw(st.sampled_from(list(CostModel)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(racked_scenarios())
def test_search_equals_brute_force_where_racks_and_blocks_price_the_weight_sync(scenario):
    """With the nodes' network levels known, the search still finds the brute force's best total: it tries each
    group kept within its first node, rack and block, where the sync crosses a nearer link."""
    config, model = scenario
    expected = brute_force(config, model)
    assert expected is not None
    assert autotune(read_job(config), model).total_cost == pytest.approx(expected, rel=1e-9)


@st.composite
def interleaved_scenarios(draw):
    """One or two groups of 2-3 nodes whose ranks may interleave (a rack holding nodes of both groups), racks
    and blocks counted by rank, and the collectives of the actor (sometimes of the others too) priced: the
    position of each range decides its links, not only its size."""
    sizes = [draw(st.integers(2, 4)) for _ in range(draw(st.integers(1, 2)))]
    ranks = list(range(sum(sizes)))
    if draw(st.booleans()):
        ranks = draw(st.permutations(ranks))
    groups, taken = [], 0
    per_node = draw(st.lists(st.sampled_from([1, 2]), min_size=len(ranks), max_size=len(ranks)))
    for label, size in zip(TYPES, sizes, strict=False):
        groups.append((label, sorted(ranks[taken : taken + size])))
        taken += size
    recompute = draw(st.booleans())
    profile: dict[str, object] = {"actor_cost": draw(st.integers(1, 50)), "rollout_cost": draw(st.integers(1, 50))}
    if recompute:
        profile["inference_cost"] = draw(st.integers(1, 50))
    for name in ("rollout", "inference", "actor") if recompute else ("rollout", "actor"):
        if name == "actor" or draw(st.booleans()):
            profile[f"{name}_collective_gb"] = draw(st.sampled_from([10, 100, 400, 1000]))
    if draw(st.booleans()):
        # sometimes none priced at all: the weight sync alone, searched with each group's caps combined
        for name in ("rollout", "inference", "actor"):
            profile.pop(f"{name}_collective_gb", None)
        profile["model_size_gb"] = draw(st.sampled_from([14, 70, 400]))
    elif draw(st.booleans()):
        profile["model_size_gb"] = draw(st.sampled_from([1, 14, 70, 400]))
    if draw(st.integers(0, 3)):
        profile["network_levels"] = {"block": draw(st.sampled_from([2, 4])), "rack": draw(st.sampled_from([1, 2]))}
    config = {
        "runner": {"task_type": "reasoning"},
        "cluster": {
            "num_nodes": len(ranks),
            "accelerators_per_node": per_node,
            "node_groups": [
                {"label": label, "node_ranks": ",".join(map(str, members)), "accelerator_type": label}
                for label, members in groups
            ],
        },
        "actor": {"model": {"tensor_model_parallel_size": 1}},
        "rollout": {"tensor_parallel_size": 1, "max_running_requests": draw(st.sampled_from([1, 4]))},
        "algorithm": {"group_size": 2, "n_minibatches": 1, "recompute_logprobs": recompute},
        "data": {"rollout_batch_size": draw(st.sampled_from([2, 4, 8]))},
        "profile_data": profile,
    }
    return config, draw(st.sampled_from(list(CostModel)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_scenarios())
def test_search_equals_brute_force_where_each_ranges_position_prices_its_traffic(scenario):
    """With collectives priced each point's links depend on where its ranges lie, and with interleaved groups the
    weight sync may need both groups kept within their first racks at once: the search still finds the brute
    force's best total."""
    autotune_matching_brute_force(*scenario)


def test_a_placement_within_one_rack_wins_over_a_faster_looking_one_across_racks() -> None:
    """Four 8-GPU nodes, racks of two: without levels the actor takes 16 GPUs (ranks 2-17, three nodes, the sync
    priced across nodes); with them those 16 GPUs span two racks and the sync crosses the spine (3.125 GB/s for
    100 GB), so the actor takes 8 GPUs within the first rack, and `rlplace autotune` says so."""
    profile = {"actor_cost": 30, "rollout_cost": 100, "model_size_gb": 100}
    blind = mixed_config([("a800", [8, 8, 8, 8], 80)], profile, rbs=64, gs=2, mrr=64, recompute=False)
    assert autotune(read_job(blind)).component_placement["actor"]["placement"] == "2-17"
    racked = mixed_config(
        [("a800", [8, 8, 8, 8], 80)], profile | {"network_levels": {"rack": 2}}, rbs=64, gs=2, mrr=64, recompute=False
    )
    result = autotune(read_job(racked))
    assert result.component_placement["actor"]["placement"] == "2-9"
    assert (result.sync_link, result.sync_cost) == ("same_rack", 4.0)


def test_autotune_prints_the_weight_sync_by_the_network_level(tmp_path) -> None:
    profile = {"actor_cost": 30, "rollout_cost": 100, "model_size_gb": 100, "network_levels": {"rack": 2}}
    path = tmp_path / "job.yaml"
    path.write_text(
        yaml.safe_dump(mixed_config([("a800", [8, 8, 8, 8], 80)], profile, rbs=64, gs=2, mrr=64, recompute=False))
    )
    out = invoke("autotune", path)
    assert out.exit_code == 0, out.stderr
    assert "weight sync: 4.00 s per iteration (100 GB within one rack at 25 GB/s), included above" in out.stdout
    bad = tmp_path / "bad.yaml"
    profile["network_levels"] = {"rack": 2, "block": 8}
    bad.write_text(yaml.safe_dump(mixed_config([("a800", [8, 8], 80)], profile, recompute=False), sort_keys=False))
    refused = invoke("autotune", bad)
    assert refused.exit_code != 0 and "list them widest first" in refused.stderr, refused.stderr


def test_the_actors_collectives_give_it_a_node_of_its_own() -> None:
    """Four 8-GPU nodes in racks of two. Without collectives the actor takes 16 GPUs after the rollout's 2. With
    100 GB per GPU of its own collectives the actor on 16 GPUs pays the rack's price (4 s), on 8 GPUs inside one
    node NVLink's (1 s): it takes node 1 whole, after a rollout on node 0, which only an exact search over the
    positions finds (searching each group within its first node, rack or block gives 2-9, 0.3% slower)."""
    profile = {"actor_cost": 30, "rollout_cost": 100, "network_levels": {"rack": 2}}
    plain = mixed_config([("a800", [8, 8, 8, 8], 80)], profile, rbs=64, gs=2, mrr=64, recompute=False)
    assert autotune(read_job(plain)).component_placement["actor"]["placement"] == "2-17"
    priced = mixed_config(
        [("a800", [8, 8, 8, 8], 80)], profile | {"actor_collective_gb": 100}, rbs=64, gs=2, mrr=64, recompute=False
    )
    result = autotune(read_job(priced))
    assert result.component_placement["rollout,reward"]["placement"] == "0-7"
    assert result.component_placement["actor"]["placement"] == "8-15"
    assert (result.collective_costs, result.collective_links["actor"]) == ({"actor": 1.0}, "same_node")
    assert result.total_cost == pytest.approx(brute_force(priced, CostModel.scaling), rel=1e-9)
    assert result.to_json()["collectives"] == {"actor": {"seconds": 1.0, "link": "same_node"}}


def test_autotune_prints_the_collectives_term(tmp_path) -> None:
    profile = {"actor_cost": 100, "rollout_cost": 100, "actor_collective_gb": 400, "network_levels": {"rack": 2}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(mixed_config([("a800", [8] * 4, 80)], profile, rbs=64, mrr=1, recompute=False)))
    out = invoke("autotune", path)
    assert out.exit_code == 0, out.stderr
    block = yaml.safe_load(out.stdout.split("\n\n", 1)[1])["cluster"]["component_placement"]
    assert block["actor"] == {"node_group": "a800", "placement": "16-31"}
    assert "actor collectives: 16.00 s per iteration (400 GB per GPU, within one rack, at 25 GB/s)" in out.stdout
    explained = invoke("autotune", path, "--explain")
    assert "actor collectives 16 s (same rack)" in explained.stdout


@pytest.mark.parametrize("exhaustive", [True, False])
def test_two_groups_are_kept_within_one_rack_at_once(monkeypatch, exhaustive) -> None:
    """a800 nodes 0 and 2, h20 nodes 1 and 3, racks of two: rack 0 holds one node of each. 1,000 GB of weights
    cross the spine at 3.125 GB/s (320 s) and a rack at 25 (40 s): rollout and actor each keep to their group's
    node in rack 0. Found by pricing every point, and also where the space is too large for that (the limit set
    to 0 here) by keeping both groups within their first rack at the same time, which the output then says."""
    if not exhaustive:
        monkeypatch.setattr(hetero, "PRICED_POINTS_LIMIT", 0)
    config = {
        "runner": {"task_type": "reasoning"},
        "cluster": {
            "num_nodes": 4,
            "accelerators_per_node": [8, 8, 8, 8],
            "node_groups": [
                {"label": "a800", "node_ranks": "0,2", "accelerator_type": "a800"},
                {"label": "h20", "node_ranks": "1,3", "accelerator_type": "h20"},
            ],
        },
        "actor": {"model": {"tensor_model_parallel_size": 1}},
        "rollout": {"tensor_parallel_size": 1, "max_running_requests": 1},
        "algorithm": {"group_size": 2, "n_minibatches": 1, "recompute_logprobs": False},
        "data": {"rollout_batch_size": 64},
        "profile_data": {
            "actor_cost_by_type": {"h20": 100},
            "rollout_cost_by_type": {"a800": 100},
            "model_size_gb": 1000,
            "network_levels": {"rack": 2},
        },
    }
    result = autotune(read_job(config))
    assert result.component_placement == {
        "rollout,reward": {"node_group": "a800", "placement": "0-7"},
        "actor": {"node_group": "h20", "placement": "0-7"},
    }
    assert result.sync_link == "same_rack"
    assert result.total_cost == pytest.approx(brute_force(config, CostModel.scaling), rel=1e-9)
    fell_back = [note for note in result.hetero.notes if note.startswith("network: ")]
    assert bool(fell_back) != exhaustive, result.hetero.notes


# -- cases with a known answer ------------------------------------------------------------------------------


def seven_b(groups, **profile):
    base = {
        "actor_cost_by_type": {"a800": 100, "4090": 60},
        "inference_cost_by_type": {"a800": 20, "4090": 12},
        "rollout_cost_by_type": {"a800": 60, "4090": 40},
        "actor_memory_gb": 56,  # 7B with Adam in bf16: ~112 GB of state over tp 2
        "rollout_memory_gb": 18,
        "inference_memory_gb": 8,
        "model_size_gb": 14,
    }
    return mixed_config(groups, base | profile, actor_tp=2, rbs=64, gs=8, nmb=4, mrr=64)


def test_a_7b_actor_never_goes_on_24_gb_gpus():
    # The 4090s are even priced faster and there are more of them: still no actor (and no collocation) there.
    config = seven_b([("a800", [8], 80), ("4090", [8, 8], 24)])
    result = autotune(read_job(config))
    assert result.mode == "disaggregated"
    assert result.components["actor"].node_group == "a800"
    for mode, schedule in result.schedules.items():
        if schedule is not None:
            assert dict(zip(schedule.names, schedule.node_groups, strict=True))["actor"] == "a800", mode


def test_a_7b_actor_on_24_gb_gpus_alone_is_refused():
    config = seven_b([("4090", [8, 8], 24)])
    with pytest.raises(PlacementError, match=r"no valid placement .* GPU memory holds it"):
        autotune(read_job(config))


def test_rollout_moves_to_the_slower_type_when_that_shortens_the_iteration():
    profile = {
        "actor_cost_by_type": {"a800": 80},
        "inference_cost_by_type": {"a800": 20},
        "rollout_cost_by_type": {"a800": 60, "4090": 120},  # the 4090s generate at half the speed
    }
    both = mixed_config([("a800", [8], 80), ("4090", [8], 24)], profile, rbs=64, gs=8, nmb=4, mrr=64)
    alone = mixed_config([("a800", [8], 80)], profile, rbs=64, gs=8, nmb=4, mrr=64)
    result, a800_only = autotune(read_job(both)), autotune(read_job(alone))
    assert result.components["rollout"].node_group == "4090"
    assert result.components["actor"].node_group == "a800"
    assert result.total_cost < a800_only.total_cost
    # and on equal terms, with 4090s as slow as that, it would not move: it stays where it is fastest.
    slower = both | {"profile_data": profile | {"rollout_cost_by_type": {"a800": 60, "4090": 2000}}}
    assert autotune(read_job(slower)).components["rollout"].node_group == "a800"


def test_weight_sync_is_priced_by_the_link():
    profile = {"actor_cost": 10, "rollout_cost": 10, "model_size_gb": 10}
    config = mixed_config([("a800", [4, 4], 80)], profile, recompute=False, rbs=4, gs=1)
    result = autotune(read_job(config))
    task = read_hetero(read_job(config), CostModel.scaling)
    expected = {"same_node": 10 / 100, "across_nodes": 10 / 12.5, "across_groups": 10 / 3.125}
    assert {link: task.sync_seconds(link) for link in expected} == pytest.approx(expected)
    assert result.sync_cost == pytest.approx(expected[result.sync_link])
    overridden = config | {"profile_data": profile | {"sync_bandwidth_gb_s": {"same_node": 1000}}}
    assert read_hetero(read_job(overridden), CostModel.scaling).sync_seconds("same_node") == pytest.approx(0.01)


def test_a_same_node_split_wins_when_the_sync_dominates():
    # 2 nodes x 4 GPUs; rollout + actor cannot share GPUs (50 + 40 GB > 80 GB). Spread over both nodes they
    # are fastest (25 s) but 1,000 GB of weights then cross nodes (80 s); packed into node 0: 50 s + 10 s.
    profile = {
        "actor_cost": 10,
        "rollout_cost": 10,
        "actor_memory_gb": 50,
        "rollout_memory_gb": 40,
        "model_size_gb": 1000,
    }
    config = mixed_config([("a800", [4, 4], 80)], profile, recompute=False, rbs=4, gs=1, mrr=1)
    result = autotune(read_job(config), "linear")
    assert result.sync_link == "same_node"
    assert result.total_cost == pytest.approx(60)
    assert result.component_placement == {
        "rollout,reward": {"node_group": "a800", "placement": "0-1"},
        "actor": {"node_group": "a800", "placement": "2-3"},
    }


def test_homogeneous_jobs_keep_todays_search():
    costs = {"actor_cost": 1, "inference_cost": 1, "rollout_cost": 1}
    assert not wants_hetero(read_job(mixed_config([("a800", [8], None), ("4090", [8], None)], costs)))
    # groups that all look alike are one type: today's search, today's answer
    same = mixed_config([("a800", [8], 80), ("a800b", [8], 80)], costs)
    for group in same["cluster"]["node_groups"]:
        group["accelerator_type"] = "a800"
    assert not wants_hetero(read_job(same))
    assert wants_hetero(read_job(mixed_config([("a800", [8], 80), ("4090", [8], 24)], costs)))
    assert wants_hetero(read_job(mixed_config([("a800", [8], None)], costs | {"model_size_gb": 14})))


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"actor_cost": 1, "rollout_cost": 1, "actor_memory_gb": "lots"}, "actor_memory_gb must be a number"),
        ({"actor_cost": 1}, "missing rollout_cost or rollout_cost_by_type"),
        ({"actor_cost": 1, "rollout_cost_by_type": {"A800": 3}}, "missing rollout_cost or rollout_cost_by_type"),
        ({"actor_cost": 1, "rollout_cost_by_type": {"a800": -3}}, "rollout_cost_by_type.a800 must be a finite"),
        ({"actor_cost": 1, "rollout_cost": 1, "sync_bandwidth_gb_s": {"nvlink": 3}}, "unknown link 'nvlink'"),
        (
            {"actor_cost": 1, "rollout_cost": 1, "sync_bandwidth_gb_s": {"same_node": 1}},
            "same_node .* must be at least across_nodes",
        ),
        ({"actor_cost": 1, "rollout_cost": 1, "collocated_offload": "yes"}, "collocated_offload must be true"),
        ({"actor_cost": 1, "rollout_cost": 1, "actor_collective_gb": 0}, "actor_collective_gb must be a number"),
    ],
)
def test_bad_per_type_input_is_one_line(profile, message):
    config = mixed_config([("a800", [8], 80), ("4090", [8], 24)], profile, recompute=False)
    with pytest.raises(PlacementError, match=message):
        autotune(read_job(config))


def test_memory_without_group_memory_is_refused():
    config = mixed_config([("a800", [8], None)], {"actor_cost": 1, "rollout_cost": 1, "actor_memory_gb": 5})
    config["profile_data"]["rollout_cost"] = 1
    config["algorithm"]["recompute_logprobs"] = False
    with pytest.raises(PlacementError, match="node group 'a800' has no accelerator_memory_gb"):
        autotune(read_job(config))


def test_search_scales_to_three_types_quickly():
    # not a timing test: the benchmark measures; this only runs a mid-size input through the whole path
    groups = [("a800", [8] * 4, 80), ("4090", [8] * 4, 24), ("h20", [8] * 4, 96)]
    profile = {
        "actor_cost_by_type": {"a800": 100, "h20": 140},
        "rollout_cost_by_type": {"a800": 60, "4090": 110, "h20": 80},
        "inference_cost": 20,
        "actor_memory_gb": 40,
    }
    config = mixed_config(groups, profile, actor_tp=2, rbs=512, gs=16, nmb=4, mrr=128)
    schedules = search_hetero(read_hetero(read_job(config), CostModel.scaling))
    assert schedules["disaggregated"] is not None


# -- the CLI ----------------------------------------------------------------------------------------------


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_autotune_block_is_what_plan_accepts(tmp_path):
    config = seven_b([("a800", [8, 8], 80), ("4090", [8, 8], 24)])
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = invoke("autotune", path)
    assert out.exit_code == 0, out.stderr
    assert "node_group: a800" in out.stdout
    block = yaml.safe_load(out.stdout.split("\n\n", 1)[1])
    config["cluster"] = block["cluster"]
    pasted = tmp_path / "pasted.yaml"
    pasted.write_text(yaml.safe_dump(config, sort_keys=False))
    plan = invoke("plan", pasted)
    assert plan.exit_code == 0, plan.stderr
    explained = invoke("autotune", path, "--explain")
    assert "DOES NOT FIT" in explained.stdout
    assert "weight sync" in explained.stdout


def test_single_cost_on_different_groups_states_the_assumption(tmp_path):
    config = mixed_config(
        [("a800", [8], 80), ("4090", [8], 24)], {"actor_cost": 50, "rollout_cost": 40}, recompute=False
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = invoke("autotune", path)
    assert out.exit_code == 0, out.stderr
    assert "# assumption: rollout, actor take the same time on every GPU type (a800, 4090)" in out.stdout
    data = invoke("autotune", path, "--format", "json")
    assert "same time on every GPU type" in data.stdout
    config["profile_data"]["rollout_cost_by_type"] = {"A800": 10}  # a typo, or a type this cluster lacks
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = invoke("autotune", path)
    assert "# no node group here has type A800 (types: a800, 4090): those costs are not used" in out.stdout


def test_default_bandwidths_are_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "autoplace.md").read_text()
    for link, value in DEFAULT_BANDWIDTH_GB_S.items():
        assert f"`{link}`" in doc and f"{value:g} GB/s" in doc


def test_write_puts_the_node_group_block_in_the_config(tmp_path):
    config = seven_b([("a800", [8, 8], 80), ("4090", [8, 8], 24)])
    path = tmp_path / "job.yaml"
    path.write_text("# my job\n" + yaml.safe_dump(config, sort_keys=False))
    out = invoke("autotune", path, "--write")
    assert out.exit_code == 0, out.stderr
    written = yaml.safe_load(path.read_text())
    assert written["cluster"]["component_placement"]["actor"] == {"node_group": "a800", "placement": "0-15"}
    assert path.read_text().startswith("# my job\n")
    plan = invoke("plan", path)
    assert plan.exit_code == 0, plan.stderr


def test_cost_refuses_per_type_jobs_in_one_line(tmp_path):
    config = seven_b([("a800", [8], 80), ("4090", [8], 24)])
    config["cluster"]["component_placement"] = {"actor,rollout,reward": {"node_group": "a800", "placement": "all"}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = invoke("cost", path)
    assert out.exit_code == 2
    assert out.stderr.startswith("error: rlplace cost prices placements under the single-type model")
    assert out.stderr.count("\n") == 1


def test_ties_between_equal_groups_are_broken_the_same_way_every_time():
    # two identical groups listed "zeta" first: equal totals go to fewer GPU sets, smaller counts, then labels
    profile = {"actor_cost": 10, "rollout_cost": 10, "model_size_gb": 1}
    config = mixed_config([("zeta", [4], 80), ("alpha", [4], 80)], profile, recompute=False, rbs=4, gs=1)
    results = {json.dumps(autotune(read_job(config)).to_json(), sort_keys=True) for _ in range(3)}
    assert len(results) == 1
    result = autotune(read_job(config))
    # rollout on one GPU and actor on four: alpha/zeta and zeta/alpha tie, and the labels in chain order decide
    assert result.component_placement == {
        "rollout,reward": {"node_group": "alpha", "placement": "0-0"},
        "actor": {"node_group": "zeta", "placement": "0-3"},
    }
    assert result.schedules["collocated"].node_groups == ("alpha", "alpha")


def test_every_key_the_model_reads_passes_the_config_readers_unknown_key_check() -> None:
    """The config reader refuses unknown profile_data keys: each key the GPU-aware model reads must pass it."""
    from placement_core.autoplace.hetero import profile_keys
    from placement_core.jobconfig import check_profile_keys

    check_profile_keys(dict.fromkeys(profile_keys(), 1))
