"""grammar.py: placement strings, rank lists, keys and node group labels as text (docs/placement.md, the grammar), no cluster."""

import pytest

from placement_core.errors import PlacementError
from placement_core.grammar import (
    RankRange,
    parse_component_key,
    parse_labels,
    parse_placement,
    parse_range,
    parse_rank_list,
)


def test_worked_example_parts():
    parts = parse_placement("0-1:0-3,3-5,7-10:7-14")
    assert [(p.resources, p.processes) for p in parts] == [
        (RankRange(0, 1), RankRange(0, 3)),
        (RankRange(3, 5), None),
        (RankRange(7, 10), RankRange(7, 14)),
    ]
    assert [p.text for p in parts] == ["0-1:0-3", "3-5", "7-10:7-14"]


@pytest.mark.parametrize("text", ["all", "ALL", "All", " all "])
def test_all_in_any_letter_case_is_every_resource(text):
    (part,) = parse_placement(text)
    assert part.resources is None
    assert part.processes is None


def test_all_with_process_ranks():
    (part,) = parse_placement("all:0-15")
    assert part.resources is None
    assert part.processes == RankRange(0, 15)


def test_whitespace_around_parts_and_colon_is_stripped():
    parts = parse_placement(" 0 - 1 : 0 - 3 ,  4 ")
    assert [(p.resources, p.processes) for p in parts] == [(RankRange(0, 1), RankRange(0, 3)), (RankRange(4, 4), None)]


def test_empty_parts_are_skipped():
    assert [p.text for p in parse_placement("0-1,,2,")] == ["0-1", "2"]


def test_single_rank():
    (part,) = parse_placement("5")
    assert part.resources == RankRange(5, 5)
    assert len(part.resources) == 1
    assert str(part.resources) == "5"
    assert list(RankRange(2, 4)) == [2, 3, 4]
    assert str(RankRange(2, 4)) == "2-4"


def test_two_colons_is_an_error():
    with pytest.raises(PlacementError, match=r"part '0-1:0-3:4' has more than one ':'"):
        parse_placement("0-1:0-3:4")


@pytest.mark.parametrize("text", ["a-b", "0-1-2", "-1", "1.5", "x", "0-", "1e3", "٣"])
def test_malformed_resource_ranks(text):
    with pytest.raises(PlacementError, match=rf"malformed resource ranks '{text}' \(expected N or N-M\)"):
        parse_placement(text)


@pytest.mark.parametrize("text", ["0-1:a", "0-1:0-1-2", "0-1:-1", "0-1:1.5"])
def test_malformed_process_ranks(text):
    bad = text.split(":")[1]
    with pytest.raises(PlacementError, match=rf"malformed process ranks '{bad}'"):
        parse_placement(text)


def test_reversed_range_names_the_text_and_the_fix():
    with pytest.raises(PlacementError, match=r"reversed range '3-1' in resource ranks \(write 1-3\)"):
        parse_placement("3-1")
    with pytest.raises(PlacementError, match=r"reversed range '3-0' in process ranks"):
        parse_placement("0-3:3-0")


def test_all_as_process_ranks_is_an_error():
    with pytest.raises(PlacementError, match=r"'all' is not allowed as process ranks in '0-3:all'"):
        parse_placement("0-3:all")


@pytest.mark.parametrize("text", ["", " ", ",", " , ,"])
def test_empty_placement(text):
    with pytest.raises(PlacementError, match="empty placement"):
        parse_placement(text)


def test_parse_range():
    assert parse_range("3") == RankRange(3, 3)
    assert parse_range(" 2 - 7 ") == RankRange(2, 7)
    with pytest.raises(PlacementError, match="malformed rank range ''"):
        parse_range("")


def test_rank_lists():
    assert parse_rank_list("0-1,3", "node ranks") == [0, 1, 3]
    assert parse_rank_list(2, "node ranks") == [2]
    assert parse_rank_list([0, "2-3"], "node ranks") == [0, 2, 3]
    assert parse_rank_list("all", "node ranks") == []
    assert parse_rank_list("ALL", "node ranks") == []


@pytest.mark.parametrize("value", [-1, None, True, "", "0,x", 1.5, []])
def test_bad_rank_lists(value):
    with pytest.raises(PlacementError):
        parse_rank_list(value, "node ranks")


def test_all_inside_a_list_is_an_error():
    with pytest.raises(PlacementError, match="'all'"):
        parse_rank_list([0, "all"], "node ranks")


def test_component_keys():
    assert parse_component_key("actor,rollout") == ["actor", "rollout"]
    assert parse_component_key(" actor , rollout ") == ["actor", "rollout"]
    assert parse_component_key(3) == ["3"]
    with pytest.raises(PlacementError, match=r"empty component name in key 'actor,'"):
        parse_component_key("actor,")
    with pytest.raises(PlacementError, match=r"component 'actor' appears twice in key 'actor,actor'"):
        parse_component_key("actor,actor")


def test_node_group_labels_string_or_list():
    assert parse_labels("a800") == ["a800"]
    assert parse_labels("a800, 4090") == ["a800", "4090"]
    assert parse_labels(["a800", 4090]) == ["a800", "4090"]
    assert parse_labels(4090) == ["4090"]
    for bad in ("", "a800,", [], ["a800", " "]):
        with pytest.raises(PlacementError, match="empty node group label"):
            parse_labels(bad)
