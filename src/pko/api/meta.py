"""Shared wire types: the model base class, object metadata and the standard status Condition.

Why: every CRD model serialises the same way (camelCase wire names through aliases, ``by_alias=True,
exclude_none=True``) and must survive a read-modify-write without losing fields it does not model, so the base
class keeps unknown keys. ``Condition`` carries the exact validation of ``metav1.Condition`` because it is part of
the CRD schemas.

Must never: hold defaults that the API server would not apply, or reorder/normalise values (a round trip through
the model must give back the same JSON).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic
from pydantic.alias_generators import to_camel

from pko.api.schema import Format, ListType, MaxLength, Minimum, MinLength, Pattern

# metav1.Time on the wire: an RFC 3339 string, kept verbatim.
Time = Annotated[str, Format("date-time")]
Int32 = Annotated[int, Format("int32")]


class Wire(pydantic.BaseModel):
    """Base of all API models: camelCase aliases, construction by field name, unknown keys kept."""

    model_config = pydantic.ConfigDict(
        alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, extra="allow",
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the API server sees."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)



class OwnerReference(Wire):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(Wire):
    """Object metadata as the API server returns it (rendered as a bare object in CRD schemas)."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    owner_references: list[OwnerReference] | None = None
    managed_fields: list[dict[str, Any]] | None = None


class ObjectMetaApply(Wire):
    """ObjectMetaApplyConfiguration: the metadata part of an apply configuration (workspace/update templates)."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    owner_references: list[OwnerReference] | None = None



class EmbeddedObjectMeta(Wire):
    """Labels and annotations for an embedded object (pod template, service template)."""

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(Wire):
    """One aspect of an object's current state (metav1.Condition)."""

    type: Annotated[str, MaxLength(316), Pattern(
        r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
    )]
    status: ConditionStatus
    observed_generation: Annotated[int, Minimum(0)] | None = None
    last_transition_time: Time
    reason: Annotated[str, MinLength(1), MaxLength(1024), Pattern(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    message: Annotated[str, MaxLength(32768)]


Conditions = Annotated[list[Condition], ListType("map", ("type",))]
