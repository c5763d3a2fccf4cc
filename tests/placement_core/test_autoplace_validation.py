"""The collocated block is validated from the sizes alone (issue 20, "Speed"): the arithmetic must say exactly
what `ModelParallelComponentPlacement` says when it builds the placement."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from placement_core.autoplace.inputs import COLLOCATED_BLOCK, accepts_placement, collocated_fits, gpus_per_node
from placement_core.cluster import NO_ACCEL, NV_GPU, Cluster, Node
from placement_core.jobconfig import Job, ModelParallelSettings, ParallelSizes

SIZES = st.sampled_from([1, 2, 3, 4, 6, 8])


@settings(max_examples=600, deadline=None)
@given(
    counts=st.lists(st.sampled_from([0, 1, 2, 3, 4, 6, 8]), min_size=1, max_size=5),
    actor_tp=SIZES,
    actor_pp=st.sampled_from([1, 2]),
    rollout_tp=SIZES,
    rollout_pp=st.sampled_from([1, 2]),
)
def test_collocated_fits_equals_building_the_placement(
    counts: list[int], actor_tp: int, actor_pp: int, rollout_tp: int, rollout_pp: int
) -> None:
    if not any(counts):
        counts = [*counts[:-1], 2]
    cluster = Cluster([Node(r, c, NV_GPU if c else NO_ACCEL) for r, c in enumerate(counts)])
    sizes = ModelParallelSettings(
        actor=ParallelSizes(tp=actor_tp, pp=actor_pp), rollout=ParallelSizes(tp=rollout_tp, pp=rollout_pp)
    )
    built = accepts_placement(Job(cluster, model_parallel=sizes), COLLOCATED_BLOCK)
    assert collocated_fits(gpus_per_node(cluster), sizes) == built


def test_a_rollout_engine_across_two_nodes_is_refused() -> None:
    sizes = ModelParallelSettings(rollout=ParallelSizes(tp=4))
    assert collocated_fits([4, 4], sizes)
    assert not collocated_fits([2, 4, 2], sizes)  # 8 GPUs, but the second block straddles nodes 1 and 2
