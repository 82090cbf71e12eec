"""Retry policy arithmetic: whether a failed attempt is retried, and after how long."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Record = dict[str, Any]

DEFAULT_ACTIVITY_RETRY: Record = {
    "initial_interval_ms": 1000,
    "backoff_coefficient": 2.0,
    "maximum_interval_ms": None,
    "maximum_attempts": 0,
    "non_retryable_error_types": [],
}


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry_state: str  # IN_PROGRESS when retried, otherwise why not
    delay_ms: int = 0


def with_defaults(policy: Record | None) -> Record:
    """A complete policy: Temporal's activity defaults for what the caller left out."""
    merged = {**DEFAULT_ACTIVITY_RETRY, **(policy or {})}
    if merged["initial_interval_ms"] <= 0:
        merged["initial_interval_ms"] = DEFAULT_ACTIVITY_RETRY["initial_interval_ms"]
    if merged["backoff_coefficient"] < 1:
        merged["backoff_coefficient"] = DEFAULT_ACTIVITY_RETRY["backoff_coefficient"]
    return merged


def backoff_ms(policy: Record, attempt: int) -> int:
    """Delay before attempt `attempt + 1`: initial * coefficient^(attempt - 1), capped at the maximum interval."""
    initial = policy["initial_interval_ms"]
    cap = policy["maximum_interval_ms"] or 100 * initial
    return int(min(initial * policy["backoff_coefficient"] ** (attempt - 1), cap))


def decide_retry(policy: Record | None, attempt: int, failure: Record | None, now_ms: int,
                 deadline_ms: int | None) -> RetryDecision:
    """Retry `attempt` (just failed with `failure`) under `policy`, unless something rules it out.

    `deadline_ms` is the schedule-to-close (or execution) deadline: a retry that could only start after it is
    not made. A failure may ask for its own delay (`next_retry_delay_ms`), which replaces the backoff.
    """
    if policy is None:
        return RetryDecision("RETRY_POLICY_NOT_SET")
    failure = failure or {}
    if failure.get("non_retryable") or failure.get("type", "") in policy["non_retryable_error_types"]:
        return RetryDecision("NON_RETRYABLE_FAILURE")
    if failure.get("kind") in ("CANCELED", "TERMINATED"):
        return RetryDecision("NON_RETRYABLE_FAILURE")
    if policy["maximum_attempts"] and attempt >= policy["maximum_attempts"]:
        return RetryDecision("MAXIMUM_ATTEMPTS_REACHED")
    asked = failure.get("next_retry_delay_ms")
    delay = asked if asked is not None and asked >= 0 else backoff_ms(policy, attempt)
    if deadline_ms is not None and now_ms + delay >= deadline_ms:
        return RetryDecision("TIMEOUT")
    return RetryDecision("IN_PROGRESS", delay)
