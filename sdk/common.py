"""Types shared by workflows, activities and clients."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import IntEnum
from typing import Any

from ostinato.sdk.search_attributes import (
    SearchAttributeIndexedValueType,
    SearchAttributeKey,
    SearchAttributePair,
    SearchAttributes,
    SearchAttributeUpdate,
    SearchAttributeValues,
    TypedSearchAttributes,
)

__all__ = [
    "RetryPolicy",
    "SearchAttributeIndexedValueType",
    "SearchAttributeKey",
    "SearchAttributePair",
    "SearchAttributeUpdate",
    "SearchAttributeValues",
    "SearchAttributes",
    "TypedSearchAttributes",
    "WorkflowIDConflictPolicy",
    "WorkflowIDReusePolicy",
]


def to_ms(value: timedelta | None) -> int | None:
    return None if value is None else int(value.total_seconds() * 1000)


@dataclass(frozen=True)
class RetryPolicy:
    """How an activity (or a workflow) is retried. Defaults follow Temporal: 1 s, doubling, at most 100 s apart,
    attempts unlimited."""

    initial_interval: timedelta = timedelta(seconds=1)
    backoff_coefficient: float = 2.0
    maximum_interval: timedelta | None = None
    maximum_attempts: int = 0
    non_retryable_error_types: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.initial_interval <= timedelta(0):
            raise ValueError("initial_interval must be positive")
        if self.backoff_coefficient < 1:
            raise ValueError("backoff_coefficient must be at least 1")
        if self.maximum_attempts < 0:
            raise ValueError("maximum_attempts must not be negative (0 means unlimited)")

    def to_record(self) -> dict[str, Any]:
        return {
            "initial_interval_ms": to_ms(self.initial_interval),
            "backoff_coefficient": float(self.backoff_coefficient),
            "maximum_interval_ms": to_ms(self.maximum_interval),
            "maximum_attempts": self.maximum_attempts,
            "non_retryable_error_types": list(self.non_retryable_error_types),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> RetryPolicy | None:
        if record is None:
            return None
        maximum = record.get("maximum_interval_ms")
        return cls(initial_interval=timedelta(milliseconds=record["initial_interval_ms"] or 1000),
                   backoff_coefficient=record["backoff_coefficient"],
                   maximum_interval=None if maximum is None else timedelta(milliseconds=maximum),
                   maximum_attempts=record["maximum_attempts"],
                   non_retryable_error_types=tuple(record["non_retryable_error_types"]))


class WorkflowIDReusePolicy(IntEnum):
    """Whether a start may reuse the id of a closed run (`Client.start_workflow(id_reuse_policy=...)`). Members and
    values are Temporal's; the wire carries the member's name."""

    ALLOW_DUPLICATE = 1
    ALLOW_DUPLICATE_FAILED_ONLY = 2
    REJECT_DUPLICATE = 3
    TERMINATE_IF_RUNNING = 4


class WorkflowIDConflictPolicy(IntEnum):
    """What a start does when a run with the id is still running (`Client.start_workflow(id_conflict_policy=...)`).
    Members and values are Temporal's; the wire carries the member's name."""

    UNSPECIFIED = 0
    FAIL = 1
    USE_EXISTING = 2
    TERMINATE_EXISTING = 3
