"""Saving a driver's step and state in the job's checkpoint directory, and loading the last one on a new attempt.

    from placement_core.launcher.checkpoint import CheckpointStore, attempt
    store = CheckpointStore.from_env()              # $RLPLACE_CHECKPOINT_DIR, or None when unset
    last = store.latest() if store else None
    start = last.step + 1 if last else 1
    for step in range(start, steps + 1):
        ...
        store.save(step, {"lr": lr}, blobs={"optimizer": raw_bytes})

A checkpoint is a directory `step-<NNNNNNNN>` holding `state.json` (the step, the attempt that wrote it, the
JSON state and the names of the blobs) and one file per bytes blob. It is written under a temporary name and
renamed into place once every file is flushed to disk, so a checkpoint either exists whole or not at all: a
driver killed mid-write leaves only a temporary directory, which `latest()` ignores and the next `save()`
removes. The last `keep` checkpoints are kept. One driver writes a directory at a time (the operator runs one
attempt at a time); the store takes no lock.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_core.contract import ATTEMPT_ENV, CHECKPOINT_DIR_ENV
from placement_core.errors import LaunchError

STATE_FILE = "state.json"
#: The last step any attempt completed (`record_step`), kept beside the checkpoints.
LAST_STEP_FILE = "last-step.json"
_CHECKPOINT = re.compile(r"^step-(\d{8,})$")
_TEMPORARY_PREFIX = ".tmp-"
_BLOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class CheckpointError(LaunchError):
    """A checkpoint directory that cannot be used, or a bad value to save; the message is one line."""


def attempt(environ: Mapping[str, str] | None = None) -> int:
    """The attempt number from $RLPLACE_ATTEMPT (1 when unset); anything but a positive integer is an error."""
    raw = (os.environ if environ is None else environ).get(ATTEMPT_ENV)
    if raw is None or raw == "":
        return 1
    if not raw.isdigit() or int(raw) < 1:
        raise CheckpointError(f"${ATTEMPT_ENV} must be a positive integer, got '{raw}'")
    return int(raw)


@dataclass(frozen=True)
class Checkpoint:
    """One saved checkpoint: the last step it covers, the attempt that wrote it, its state and its blobs."""

    step: int
    """The number of steps completed when it was saved (resume at `step + 1`)."""
    attempt: int
    state: Mapping[str, Any]
    blob_names: tuple[str, ...]
    path: Path

    def blob(self, name: str) -> bytes:
        """The bytes saved under `name`."""
        if name not in self.blob_names:
            known = ", ".join(self.blob_names) or "none"
            raise CheckpointError(f"checkpoint of step {self.step} has no blob '{name}' (it has: {known})")
        try:
            return (self.path / name).read_bytes()
        except OSError as err:
            raise CheckpointError(f"cannot read blob '{name}' of step {self.step}: {err.strerror}") from None


class CheckpointStore:
    """The checkpoints in one directory (see the module docstring for the layout and the guarantees)."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 3, attempt_number: int = 1) -> None:
        if keep < 1:
            raise CheckpointError(f"keep must be at least 1, got {keep}")
        self.directory = Path(directory)
        self.keep = keep
        self.attempt = attempt_number
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CheckpointError(f"cannot use checkpoint directory '{self.directory}': {err.strerror}") from None

    @classmethod
    def from_env(cls, keep: int = 3, environ: Mapping[str, str] | None = None) -> CheckpointStore | None:
        """The store at $RLPLACE_CHECKPOINT_DIR for attempt $RLPLACE_ATTEMPT; None when the directory is unset."""
        env = os.environ if environ is None else environ
        directory = env.get(CHECKPOINT_DIR_ENV)
        if not directory:
            return None
        return cls(directory, keep, attempt(env))

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints, oldest first."""
        try:
            names = os.listdir(self.directory)
        except OSError as err:
            raise CheckpointError(f"cannot list checkpoint directory '{self.directory}': {err.strerror}") from None
        found = (_CHECKPOINT.match(name) for name in names)
        return sorted(int(match.group(1)) for match in found if match)

    def latest(self) -> Checkpoint | None:
        """The newest readable checkpoint, or None. One whose state cannot be read (a disk error, a file
        edited by hand) is skipped for the one before it, so a resume never fails on the newest alone."""
        for step in reversed(self.steps()):
            loaded = self._load(step)
            if loaded is not None:
                return loaded
        return None

    def load(self, step: int) -> Checkpoint:
        loaded = self._load(step)
        if loaded is None:
            raise CheckpointError(f"no readable checkpoint of step {step} in '{self.directory}'")
        return loaded

    def save(self, step: int, state: Mapping[str, Any], blobs: Mapping[str, bytes] | None = None) -> Checkpoint:
        """Write the checkpoint of `step` (steps completed) with its JSON state and bytes blobs, atomically;
        then drop all but the newest `keep` and any temporary directory a killed writer left."""
        if step < 0:
            raise CheckpointError(f"step must be 0 or more, got {step}")
        blobs = dict(blobs or {})
        for name in blobs:
            if not _BLOB_NAME.match(name) or name == STATE_FILE:
                raise CheckpointError(f"bad blob name '{name}' (letters, digits, '_.-'; not '{STATE_FILE}')")
        record = {"step": step, "attempt": self.attempt, "state": state, "blobs": sorted(blobs)}
        try:
            text = json.dumps(record, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"checkpoint state of step {step} is not JSON: {err}") from None
        self._remove_temporaries()
        temporary = self.directory / f"{_TEMPORARY_PREFIX}{_name(step)}-{uuid.uuid4().hex[:8]}"
        final = self.directory / _name(step)
        try:
            temporary.mkdir()
            for name, data in blobs.items():
                _write_synced(temporary / name, data)
            _write_synced(temporary / STATE_FILE, text.encode())
            _sync_directory(temporary)
            if final.exists():  # the same step saved again by a later attempt: the newer write wins
                shutil.rmtree(final)
            os.rename(temporary, final)
            _sync_directory(self.directory)
        except OSError as err:
            shutil.rmtree(temporary, ignore_errors=True)
            raise CheckpointError(f"cannot write checkpoint of step {step} in '{self.directory}': {err}") from None
        self._prune()
        return Checkpoint(step, self.attempt, json.loads(text)["state"], tuple(sorted(blobs)), final)

    def record_step(self, step: int) -> None:
        """Note that `step` is done (cheap, atomic, no fsync: losing the last note in a machine crash only
        under-counts repeated steps); a later attempt reads it with `last_step` to say how many it repeats."""
        temporary = self.directory / f"{_TEMPORARY_PREFIX}{LAST_STEP_FILE}-{uuid.uuid4().hex[:8]}"
        try:
            temporary.write_text(json.dumps({"step": step, "attempt": self.attempt}))
            os.replace(temporary, self.directory / LAST_STEP_FILE)
        except OSError as err:
            temporary.unlink(missing_ok=True)
            raise CheckpointError(f"cannot record step {step} in '{self.directory}': {err.strerror}") from None

    def last_step(self) -> int | None:
        """The last step `record_step` noted (by any attempt), or None."""
        try:
            return int(json.loads((self.directory / LAST_STEP_FILE).read_text())["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _load(self, step: int) -> Checkpoint | None:
        path = self.directory / _name(step)
        try:
            record = json.loads((path / STATE_FILE).read_text())
            names = tuple(str(name) for name in record["blobs"])
            if record["step"] != step or not all((path / name).is_file() for name in names):
                return None
            return Checkpoint(step, int(record["attempt"]), record["state"], names, path)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _prune(self) -> None:
        for step in self.steps()[: -self.keep]:
            shutil.rmtree(self.directory / _name(step), ignore_errors=True)

    def _remove_temporaries(self) -> None:
        for name in os.listdir(self.directory):
            if name.startswith(_TEMPORARY_PREFIX):
                shutil.rmtree(self.directory / name, ignore_errors=True)


def _name(step: int) -> str:
    return f"step-{step:08d}"


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def _sync_directory(path: Path) -> None:
    """Make a rename or a new file in `path` durable (a crash after it cannot undo it)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
