"""What every rlplace resource model shares: the API group and version, the camelCase base model, CEL rules
beside the fields they guard, and the wire form. The models are the source of truth: `crdgen` turns them into the
CRDs (descriptions become `kubectl explain` text, `json_schema_extra` carries CEL rules), and the operator parses
live objects with them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

GROUP = "rlplace.io"
VERSION = "v1alpha1"


def cel(rule: str, message: str, *more: tuple[str, str]) -> dict[str, Any]:
    """CEL validation rules (each a rule and its message) for the CRD, set beside the field or model they guard
    (`json_schema_extra`). crdgen drops a field's regex `pattern` when it has a rule, so `kubectl apply` shows
    the message."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in ((rule, message), *more)]}


class CamelModel(BaseModel):
    """Base of every resource model: camelCase on the wire, unknown fields refused, docstrings as descriptions."""

    model_config = ConfigDict(
        populate_by_name=True, extra="forbid", use_attribute_docstrings=True, alias_generator=to_camel
    )


def dump(model: BaseModel) -> dict[str, Any]:
    """Wire form: camelCase, no nulls."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)
