"""Kubernetes-style object metadata and conditions shared by every FlexInfer kind."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ApiModel(BaseModel):
    """Base of every API type: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
    )


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC (API timestamps are RFC 3339 UTC)."""
    return datetime.now(UTC)


class ObjectMeta(ApiModel):
    """The subset of metav1.ObjectMeta that FlexInfer objects carry."""

    name: str = Field(min_length=1, max_length=253)
    namespace: str = Field(default="default", min_length=1, max_length=63)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    finalizers: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _dns_subdomain(cls, value: str) -> str:
        if not _DNS_SUBDOMAIN.match(value):
            raise ValueError(
                "must be a lowercase RFC 1123 subdomain: a-z, 0-9, '-' and '.', "
                "starting and ending with a letter or digit"
            )
        return value

    @field_validator("namespace")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError("must be a lowercase RFC 1123 label: a-z, 0-9 and '-'")
        return value


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(ApiModel):
    """A metav1.Condition: one observed aspect of an object's state."""

    type: str = Field(min_length=1, max_length=316)
    status: ConditionStatus
    reason: str = Field(default="", max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: datetime = Field(default_factory=utcnow)
    observed_generation: int | None = None


def set_condition(conditions: list[Condition], new: Condition) -> list[Condition]:
    """Return ``conditions`` with ``new`` merged in, keeping the transition time if unchanged."""
    out: list[Condition] = []
    replaced = False
    for cond in conditions:
        if cond.type != new.type:
            out.append(cond)
            continue
        replaced = True
        if cond.status == new.status:
            new = new.model_copy(update={"last_transition_time": cond.last_transition_time})
        out.append(new)
    if not replaced:
        out.append(new)
    return out
