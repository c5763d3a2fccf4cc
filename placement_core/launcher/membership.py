"""Which ranks of a replaceable worker group are live: the bookkeeping behind `WorkerGroup.live_ranks`,
`take_joined` and `wait_for_change` (docs/driver.md, "Replacing lost replicas").

A component whose plan says `OnLoss.REPLACE` (rollout, env, reward: replicas independent from one iteration to
the next) loses a rank without stopping the job: the driver goes on with the live ranks while the launcher
starts the lost one again. The driver's thread marks ranks lost (it is the one that sees a call fail) and the
group's replacement thread marks them joined; both go through one `Ledger`, under one lock, so that a driver
reading a snapshot never sees a rank both live and lost. A group resized in place (`WorkerGroup.resize`: the
operator changed the component's replicas) has its new ranks *starting* until the same thread starts them, and its
removed ranks gone from every list. Pure Python (no Ray), so it is tested on its own.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Membership:
    """A snapshot of a group's ranks: `version` grows by one on every change (a rank lost, a rank joined, the
    group resized)."""

    version: int
    live: tuple[int, ...]
    """The ranks that answer calls, in rank order."""
    lost: tuple[int, ...]
    """The ranks that died and are not running again yet (being replaced, or given up on), in rank order."""
    starting: tuple[int, ...] = ()
    """The ranks a resize added that have not joined yet, in rank order."""


class Ledger:
    """The live and lost ranks of one group, changed from the driver's thread and the replacement thread.

    `take_joined` hands each rank started again to the driver once (it syncs the current weights into it before
    using it); `wait_for_change` is an event on the version, so a change made between two waits is not missed.
    """

    def __init__(self, world_size: int) -> None:
        self._world_size = world_size
        self._lost: dict[int, float] = {}
        """Lost rank -> when it was marked lost (time.monotonic), for the `replaced: ... after N s` line."""
        self._new: dict[int, float] = {}
        """Rank a resize added -> when (time.monotonic): started like a lost rank, but never ran."""
        self._given_up: set[int] = set()
        self._joined: list[int] = []
        self._version = 0
        self._waited_version = 0
        self._changed = threading.Condition()

    def snapshot(self) -> Membership:
        with self._changed:
            live = tuple(r for r in range(self._world_size) if r not in self._lost and r not in self._new)
            return Membership(self._version, live, tuple(sorted(self._lost)), tuple(sorted(self._new)))

    def is_live(self, rank: int) -> bool:
        with self._changed:
            return 0 <= rank < self._world_size and rank not in self._lost and rank not in self._new

    def lose(self, rank: int) -> bool:
        """Mark a live rank lost; False when it was not live (already lost: two calls saw the same death)."""
        with self._changed:
            if rank in self._lost or rank in self._new or not 0 <= rank < self._world_size:
                return False
            self._lost[rank] = time.monotonic()
            # A rank that joined and died before the driver took it must not be handed out as live.
            self._joined = [r for r in self._joined if r != rank]
            self._bump()
            return True

    def join(self, rank: int) -> float:
        """Mark a lost or starting rank live (started and verified); the seconds it was lost or starting."""
        with self._changed:
            since = self._lost.pop(rank) if rank in self._lost else self._new.pop(rank)
            self._given_up.discard(rank)
            self._joined.append(rank)
            self._bump()
            return time.monotonic() - since

    def give_up(self, rank: int) -> None:
        """A lost rank the replacement stops trying (its binding check failed): it stays lost."""
        with self._changed:
            self._given_up.add(rank)

    def is_new(self, rank: int) -> bool:
        """Whether `rank` is one a resize added that has not joined yet."""
        with self._changed:
            return rank in self._new

    def to_replace(self) -> list[int]:
        """The lost ranks still to start again and the starting ones, in rank order."""
        with self._changed:
            return sorted(r for r in (*self._lost, *self._new) if r not in self._given_up)

    def resize(self, world_size: int) -> tuple[range, range]:
        """The group has `world_size` ranks from now on: ranks added are starting, ranks beyond it are gone (not
        live, lost, starting nor to be handed out). Returns (the ranks added, the ranks removed)."""
        with self._changed:
            old = self._world_size
            added, removed = range(old, max(old, world_size)), range(world_size, max(old, world_size))
            now = time.monotonic()
            for rank in added:
                self._new[rank] = now
            for rank in removed:
                self._lost.pop(rank, None)
                self._new.pop(rank, None)
                self._given_up.discard(rank)
            self._joined = [r for r in self._joined if r < world_size]
            self._world_size = world_size
            if added or removed:
                self._bump()
            return added, removed

    def take_joined(self) -> list[int]:
        """The ranks that joined since the last call, in the order they joined; each is returned once."""
        with self._changed:
            joined, self._joined = self._joined, []
            return joined

    def wait_for_change(self, timeout: float | None) -> bool:
        """True once the membership changed since the last `wait_for_change` (at once when it already has),
        False when `timeout` seconds passed without a change."""
        with self._changed:
            changed = self._changed.wait_for(lambda: self._version != self._waited_version, timeout)
            self._waited_version = self._version
            return changed

    def _bump(self) -> None:
        self._version += 1
        self._changed.notify_all()
