"""configfile.py: what a strict, bounded read of a job config accepts (the refusals are in test_cli_bad_input)."""

from __future__ import annotations

import pytest

from placement_core.configfile import read_config_bytes
from placement_core.errors import PlacementError


def read(text: str) -> dict:
    return read_config_bytes(text.encode(), "config file 'job.yaml'")


def test_interpolations_resolve_with_omegaconf(monkeypatch):
    monkeypatch.setenv("RLPLACE_TEST_NODES", "2")
    config = read(
        "actor:\n  model:\n    tensor_model_parallel_size: 4\n"
        "critic:\n  model:\n    tensor_model_parallel_size: ${actor.model.tensor_model_parallel_size}\n"
        "    pipeline_model_parallel_size: ${.tensor_model_parallel_size}\n"
        "cluster:\n  num_nodes: ${oc.decode:${oc.env:RLPLACE_TEST_NODES}}\n  note: 'gpus-${cluster.num_nodes}'\n"
        "  literal: '\\${not.a.key}'\n"
    )
    assert config["critic"]["model"] == {"tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 4}
    assert config["cluster"] == {"num_nodes": 2, "note": "gpus-2", "literal": "${not.a.key}"}


def test_text_without_interpolation_is_left_alone():
    """Backslashes and braces mean nothing special unless the text holds `${`."""
    assert read("a: 'x\\\\y {z} $HOME'\n") == {"a": "x\\\\y {z} $HOME"}


def test_merge_keys_and_distinct_key_types_are_fine():
    config = read("base: &base {a: 1, b: 2}\nderived:\n  <<: *base\n  b: 3\nkeys: {1: int, '1': text}\n")
    assert config["derived"] == {"a": 1, "b": 3}
    assert config["keys"] == {1: "int", "1": "text"}


def test_same_int_key_written_two_ways_is_a_duplicate():
    with pytest.raises(PlacementError, match="key '0x1' is given twice"):
        read("keys: {1: a, 0x1: b}\n")
