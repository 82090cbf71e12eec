"""Failure records the core itself writes (timeouts, bad commands), complete so they encode and compare alike."""

from __future__ import annotations

from typing import Any

Record = dict[str, Any]


def failure(message: str, kind: str = "SERVER", **fields: Any) -> Record:
    return {
        "message": message, "kind": kind, "type": "", "source": "ostinato", "stack_trace": "", "non_retryable": False,
        "details": [], "next_retry_delay_ms": None, "timeout_type": None, "last_heartbeat_details": [],
        "encoded_attributes": None, "activity_failure_info": None, "child_workflow_failure_info": None,
        "cause": None, **fields,
    }


def timeout_failure(timeout_type: str, last_heartbeat_details: list[Record] | None = None) -> Record:
    return failure(f"activity {timeout_type.lower().replace('_', '-')} timeout", "TIMEOUT",
                   timeout_type=timeout_type, last_heartbeat_details=last_heartbeat_details or [])
