"""Status merge patches and conditions, with plain data."""

from __future__ import annotations

from rlplace_operator.conditions import MAX_MESSAGE_CHARS, merge_patch, set_condition


def test_merge_patch_removes_emptied_fields_and_sends_only_changes() -> None:
    before = {"hardwareType": "Accelerator", "totalUnits": 16, "placement": {"mode": "a", "components": [1]}}
    after = {"totalUnits": 0, "placement": {"mode": "a"}}
    assert merge_patch(before, after) == {"hardwareType": None, "totalUnits": 0, "placement": {"components": None}}
    assert merge_patch(after, after) == {}
    assert merge_patch({}, {"phase": "Running"}) == {"phase": "Running"}


def test_set_condition_keeps_transition_time_and_cuts_long_messages() -> None:
    first = set_condition([], "Placed", True, "Placed", "ok", 1)
    again = set_condition(first, "Placed", True, "Placed", "x" * 5000, 2)
    assert again[0]["lastTransitionTime"] == first[0]["lastTransitionTime"]
    assert len(again[0]["message"]) == MAX_MESSAGE_CHARS and again[0]["observedGeneration"] == 2
