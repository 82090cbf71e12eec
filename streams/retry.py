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


MAX_INTERVAL_MS = 2**63 - 1  # the largest Avro long
# Past this many steps every coefficient > 1 has grown past any cap: (1 + 2**-52) ** 2**60 is about e**256, while
# a cap is at most 2**63 (about e**44) times the initial interval. Clamping keeps the exponent a float exactly.
_ENOUGH_STEPS = 2**60


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry_state: str  # IN_PROGRESS when retried, otherwise why not
    delay_ms: int = 0


def with_defaults(policy: Record | None) -> Record:
    """A complete policy: Temporal's activity defaults for what the caller left out."""
    merged = {**DEFAULT_ACTIVITY_RETRY, **(policy or {})}
    if merged["initial_interval_ms"] <= 0:
        merged["initial_interval_ms"] = DEFAULT_ACTIVITY_RETRY["initial_interval_ms"]
    if not merged["backoff_coefficient"] >= 1:  # below 1, and NaN
        merged["backoff_coefficient"] = DEFAULT_ACTIVITY_RETRY["backoff_coefficient"]
    return merged


def backoff_ms(policy: Record, attempt: int) -> int:
    """Delay before attempt `attempt + 1`: initial * coefficient^(attempt - 1), capped at the maximum interval
    (100 x initial when the policy has none)."""
    return exponential_backoff_ms(policy["initial_interval_ms"], policy["backoff_coefficient"],
                                  policy["maximum_interval_ms"], attempt)


def exponential_backoff_ms(initial_ms: int, coefficient: float, maximum_ms: int | None, attempt: int) -> int:
    """initial * coefficient^(attempt - 1), capped at `maximum_ms` (100 x initial when None or not positive).

    Defined for every attempt (however large), every interval an Avro long holds and every coefficient >= 1
    (infinity included): the growth is computed in floating point and an overflow means "past the cap", so it
    never raises and never builds a huge integer. The cap is at most the largest Avro long. A non-positive
    initial interval or a coefficient below 1 (or NaN) counts as the default, as `with_defaults` makes it.
    """
    initial = initial_ms if initial_ms > 0 else DEFAULT_ACTIVITY_RETRY["initial_interval_ms"]
    cap = maximum_ms if maximum_ms is not None and maximum_ms > 0 else min(100 * initial, MAX_INTERVAL_MS)
    factor = float(coefficient)
    if not factor >= 1:
        factor = DEFAULT_ACTIVITY_RETRY["backoff_coefficient"]
    steps = min(max(attempt - 1, 0), _ENOUGH_STEPS)
    if factor == 1 or steps == 0:
        return min(initial, cap)
    try:
        grown = initial * factor ** steps  # a float; infinity when the product overflows
    except OverflowError:  # the power alone overflowed: far past any cap
        return cap
    return cap if grown >= cap else int(grown)


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
