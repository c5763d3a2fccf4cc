"""Status merge patches and conditions, with plain data."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlplace_operator.api.conditions import MAX_MESSAGE_CHARS, apply_merge_patch, merge_patch, set_condition


def test_merge_patch_removes_emptied_fields_and_sends_only_changes() -> None:
    before = {"hardwareType": "Accelerator", "totalUnits": 16, "placement": {"mode": "a", "components": [1]}}
    after = {"totalUnits": 0, "placement": {"mode": "a"}}
    assert merge_patch(before, after) == {"hardwareType": None, "totalUnits": 0, "placement": {"components": None}}
    assert merge_patch(after, after) == {}
    assert merge_patch({}, {"phase": "Running"}) == {"phase": "Running"}


# Status-like documents: nested maps of scalars and lists, no nulls (a null is how a merge patch deletes).
_leaves = st.one_of(st.integers(0, 3), st.sampled_from(["x", "y"]), st.lists(st.integers(0, 3), max_size=2))
_documents = st.recursive(
    st.dictionaries(st.sampled_from("abc"), _leaves, max_size=3),
    lambda inner: st.dictionaries(st.sampled_from("abc"), st.one_of(_leaves, inner), max_size=3),
    max_leaves=6,
)


# The unit phase runs while three local clusters start: generation may be slow, never wrong.
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents, _documents)
def test_applying_the_merge_patch_from_before_to_after_gives_after(before: dict, after: dict) -> None:
    assert apply_merge_patch(before, merge_patch(before, after)) == after


def test_a_merge_patch_made_again_on_a_changed_document_keeps_the_other_writers_fields() -> None:
    before = {"phase": "Provisioning", "progress": {"iteration": 3}, "appliedPlacement": ["all"]}
    ours = merge_patch(before, {**before, "phase": "Running", "appliedPlacement": ["0-3", "4-7"]})
    theirs = {**before, "progress": {"iteration": 4}}
    assert apply_merge_patch(theirs, ours) == {
        "phase": "Running",
        "progress": {"iteration": 4},
        "appliedPlacement": ["0-3", "4-7"],
    }


def test_set_condition_keeps_transition_time_and_cuts_long_messages() -> None:
    first = set_condition([], "Placed", True, "Placed", "ok", 1)
    again = set_condition(first, "Placed", True, "Placed", "x" * 5000, 2)
    assert again[0]["lastTransitionTime"] == first[0]["lastTransitionTime"]
    assert len(again[0]["message"]) == MAX_MESSAGE_CHARS and again[0]["observedGeneration"] == 2
