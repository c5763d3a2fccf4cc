"""The driver's checkpoint helper: atomic saves that survive a writer killed mid-write, the last K kept, and the
attempt and directory read from the contract's variables."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from placement_core import contract
from placement_core.launcher.checkpoint import LAST_STEP_FILE, CheckpointError, CheckpointStore, attempt


def test_names_the_operator_will_set() -> None:
    assert contract.ATTEMPT_ENV == "RLPLACE_ATTEMPT"
    assert contract.CHECKPOINT_DIR_ENV == "RLPLACE_CHECKPOINT_DIR"


def test_save_then_latest_gives_step_state_blobs_and_attempt(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, attempt_number=2)
    assert store.latest() is None
    store.save(5, {"lr": 0.5, "seen": [1, 2]}, blobs={"weights": b"\x00\x01" * 1000})
    last = store.latest()
    assert last is not None
    assert (last.step, last.attempt, dict(last.state), last.blob_names) == (
        5,
        2,
        {"lr": 0.5, "seen": [1, 2]},
        ("weights",),
    )
    assert last.blob("weights") == b"\x00\x01" * 1000
    with pytest.raises(CheckpointError, match=r"^checkpoint of step 5 has no blob 'optim' \(it has: weights\)$"):
        last.blob("optim")
    assert sorted(os.listdir(tmp_path)) == ["step-00000005"]


def test_only_the_newest_k_are_kept(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for step in (2, 4, 6, 8):
        store.save(step, {"step": step})
    assert store.steps() == [6, 8]
    assert store.latest().state == {"step": 8}


def test_a_later_attempt_saving_the_same_step_replaces_it(tmp_path: Path) -> None:
    CheckpointStore(tmp_path, attempt_number=1).save(4, {"v": "first"})
    CheckpointStore(tmp_path, attempt_number=2).save(4, {"v": "second"})
    last = CheckpointStore(tmp_path).latest()
    assert (last.step, last.attempt, last.state) == (4, 2, {"v": "second"})


def test_an_unreadable_newest_checkpoint_falls_back_to_the_one_before(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(3, {"v": 3})
    store.save(6, {"v": 6})
    (tmp_path / "step-00000006" / "state.json").write_text('{"step": 6, "sta')
    assert store.latest().step == 3
    with pytest.raises(CheckpointError, match=r"^no readable checkpoint of step 6 in '"):
        store.load(6)


@pytest.mark.parametrize(
    ("state", "blobs", "message"),
    [
        ({"x": object()}, {}, r"^checkpoint state of step 1 is not JSON: Object of type object"),
        ({"x": float("nan")}, {}, r"^checkpoint state of step 1 is not JSON: Out of range float"),
        ({}, {"../evil": b""}, r"^bad blob name '../evil'"),
        ({}, {"state.json": b""}, r"^bad blob name 'state.json'"),
    ],
)
def test_bad_values_are_refused_before_anything_is_written(tmp_path: Path, state, blobs, message) -> None:
    store = CheckpointStore(tmp_path)
    with pytest.raises(CheckpointError, match=message):
        store.save(1, state, blobs)
    assert os.listdir(tmp_path) == []


def test_attempt_and_directory_come_from_the_contract_variables(tmp_path: Path) -> None:
    assert attempt({}) == 1
    assert attempt({"RLPLACE_ATTEMPT": "3"}) == 3
    for bad in ("0", "-1", "two"):
        with pytest.raises(CheckpointError, match=rf"^\$RLPLACE_ATTEMPT must be a positive integer, got '{bad}'$"):
            attempt({"RLPLACE_ATTEMPT": bad})
    assert CheckpointStore.from_env(environ={}) is None
    store = CheckpointStore.from_env(environ={"RLPLACE_CHECKPOINT_DIR": str(tmp_path / "ck"), "RLPLACE_ATTEMPT": "2"})
    assert (store.directory, store.attempt) == (tmp_path / "ck", 2)


def test_an_unusable_directory_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointError, match=r"^cannot use checkpoint directory '.*/file/ck': Not a directory$"):
        CheckpointStore(tmp_path / "file" / "ck")


def test_last_step_is_recorded_across_attempts(tmp_path: Path) -> None:
    assert CheckpointStore(tmp_path).last_step() is None
    CheckpointStore(tmp_path).record_step(7)
    assert CheckpointStore(tmp_path, attempt_number=2).last_step() == 7
    assert sorted(os.listdir(tmp_path)) == [LAST_STEP_FILE]


# -- a writer killed mid-write ----------------------------------------------------------------------------

KILLED_WRITER = """
import os, sys
from placement_core.launcher import checkpoint
store = checkpoint.CheckpointStore(sys.argv[1], attempt_number=1)
store.save(2, {"v": 2}, blobs={"weights": b"old" * 10})
where = sys.argv[2]
if where == "blob":
    real = checkpoint._write_synced
    def half_then_die(path, data):
        with open(path, "wb") as file:
            file.write(data[: len(data) // 2])
        os._exit(9)
    checkpoint._write_synced = half_then_die
elif where == "rename":
    os.rename = lambda *args: os._exit(9)
store.save(4, {"v": 4}, blobs={"weights": b"new" * 1000})
"""


@pytest.mark.parametrize("where", ["blob", "rename"])
def test_a_writer_killed_mid_write_leaves_the_previous_checkpoint_whole(tmp_path: Path, where: str) -> None:
    """A real process dies (os._exit, no clean-up) while writing step 4's blob, or just before the rename that
    publishes it: the store still shows step 2 intact, and the next save clears the debris."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KILLED_WRITER), str(tmp_path), where], capture_output=True, text=True
    )
    assert done.returncode == 9, done.stderr
    leftovers = sorted(name for name in os.listdir(tmp_path) if name.startswith(".tmp-"))
    assert len(leftovers) == 1
    store = CheckpointStore(tmp_path, attempt_number=2)
    last = store.latest()
    assert (last.step, last.state, last.blob("weights")) == (2, {"v": 2}, b"old" * 10)
    store.save(4, {"v": 4})
    assert sorted(os.listdir(tmp_path)) == ["step-00000002", "step-00000004"]
