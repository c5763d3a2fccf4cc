"""Placeholder until H-21b's diagnosis module is merged (same interface): finds no cause."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placement_core.plan import Plan


@dataclass(frozen=True)
class Cause:
    reason: str
    message: str
    permanent: bool


def provisioning_failure(pods: Sequence[Mapping], events: Sequence[Mapping], now: datetime.datetime) -> Cause | None:
    return None


def lost_process(
    pods: Sequence[Mapping],
    events: Sequence[Mapping],
    nodes: Mapping[str, Mapping],
    plan: Plan | None,
    driver_log_tail: str,
) -> Cause | None:
    return None
