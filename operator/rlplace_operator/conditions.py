"""metav1.Condition lists: set one condition, keeping lastTransitionTime when its status did not change."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[dict] | None,
    type_: str,
    status: bool,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> list[dict]:
    """A new list with `type_` set; the other conditions are kept in order."""
    value = "True" if status else "False"
    result = [dict(c) for c in conditions or []]
    for condition in result:
        if condition.get("type") == type_:
            if condition.get("status") != value:
                condition["lastTransitionTime"] = now()
            condition.update(status=value, reason=reason, message=message)
            if generation is not None:
                condition["observedGeneration"] = generation
            return result
    new = {"type": type_, "status": value, "reason": reason, "message": message, "lastTransitionTime": now()}
    if generation is not None:
        new["observedGeneration"] = generation
    result.append(new)
    return result


def is_true(conditions: Sequence[dict] | None, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions or [])
