"""Retry policy arithmetic (`streams/retry.py`): defaults, backoff, and every reason a retry is or is not made."""

from __future__ import annotations

from typing import Any

import pytest

from ostinato.streams.retry import DEFAULT_ACTIVITY_RETRY, RetryDecision, backoff_ms, decide_retry, with_defaults

Record = dict[str, Any]
NOW = 1_000_000


def policy(**overrides: Any) -> Record:
    return with_defaults(overrides)


def failure(**fields: Any) -> Record:
    return {"message": "boom", "kind": "APPLICATION", "type": "", "non_retryable": False,
            "next_retry_delay_ms": None, **fields}


# -- with_defaults ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "expected"), [
    pytest.param(None, DEFAULT_ACTIVITY_RETRY, id="no policy gets Temporal's activity defaults"),
    pytest.param({}, DEFAULT_ACTIVITY_RETRY, id="empty policy gets the defaults"),
    pytest.param({"maximum_attempts": 5}, {**DEFAULT_ACTIVITY_RETRY, "maximum_attempts": 5},
                 id="given fields are kept, the rest defaulted"),
    pytest.param({"initial_interval_ms": 0}, DEFAULT_ACTIVITY_RETRY, id="zero initial interval becomes 1s"),
    pytest.param({"initial_interval_ms": -5}, DEFAULT_ACTIVITY_RETRY, id="negative initial interval becomes 1s"),
    pytest.param({"backoff_coefficient": 0.5}, DEFAULT_ACTIVITY_RETRY, id="coefficient below 1 becomes 2"),
    pytest.param({"backoff_coefficient": 1.0}, {**DEFAULT_ACTIVITY_RETRY, "backoff_coefficient": 1.0},
                 id="coefficient of exactly 1 is kept (constant backoff)"),
    pytest.param({"initial_interval_ms": 250, "backoff_coefficient": 3.0, "maximum_interval_ms": 900,
                  "non_retryable_error_types": ["Bad"]},
                 {"initial_interval_ms": 250, "backoff_coefficient": 3.0, "maximum_interval_ms": 900,
                  "maximum_attempts": 0, "non_retryable_error_types": ["Bad"]}, id="a full policy is unchanged"),
])
def test_with_defaults(given: Record | None, expected: Record) -> None:
    assert with_defaults(given) == expected


def test_with_defaults_does_not_change_its_argument_or_the_defaults() -> None:
    given = {"initial_interval_ms": 0}
    with_defaults(given)
    assert given == {"initial_interval_ms": 0}
    assert DEFAULT_ACTIVITY_RETRY["initial_interval_ms"] == 1000


# -- backoff_ms ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("pol", "attempt", "expected"), [
    pytest.param(policy(), 1, 1_000, id="first retry waits the initial interval"),
    pytest.param(policy(), 2, 2_000, id="then doubles"),
    pytest.param(policy(), 5, 16_000, id="initial times coefficient to the attempt minus one"),
    pytest.param(policy(initial_interval_ms=300, backoff_coefficient=1.5), 3, 675, id="custom coefficient"),
    pytest.param(policy(backoff_coefficient=1.0), 9, 1_000, id="coefficient 1 is constant"),
    pytest.param(policy(maximum_interval_ms=5_000), 4, 5_000, id="capped by the maximum interval"),
    pytest.param(policy(maximum_interval_ms=5_000), 3, 4_000, id="under the maximum interval uncapped"),
    pytest.param(policy(), 7, 64_000, id="no maximum: below 100x initial uncapped"),
    pytest.param(policy(), 8, 100_000, id="no maximum: capped at 100x initial"),
    pytest.param(policy(initial_interval_ms=50), 30, 5_000, id="100x cap scales with the initial interval"),
    pytest.param(policy(initial_interval_ms=333, backoff_coefficient=1.1), 2, 366, id="rounded down to whole ms"),
])
def test_backoff_ms(pol: Record, attempt: int, expected: int) -> None:
    assert backoff_ms(pol, attempt) == expected


# -- decide_retry ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("pol", "attempt", "fail", "deadline", "expected"), [
    pytest.param(None, 1, failure(), None, RetryDecision("RETRY_POLICY_NOT_SET"), id="no policy: not retried"),
    pytest.param(policy(), 1, failure(), None, RetryDecision("IN_PROGRESS", 1_000), id="retried after initial"),
    pytest.param(policy(), 3, failure(), None, RetryDecision("IN_PROGRESS", 4_000), id="retried with backoff"),
    pytest.param(policy(), 1, None, None, RetryDecision("IN_PROGRESS", 1_000), id="no failure record is retryable"),
    pytest.param(policy(initial_interval_ms=10, backoff_coefficient=10.0, maximum_interval_ms=500), 3, failure(),
                 None, RetryDecision("IN_PROGRESS", 500), id="delay capped by maximum interval"),
    pytest.param(policy(maximum_attempts=3), 2, failure(), None, RetryDecision("IN_PROGRESS", 2_000),
                 id="below maximum attempts: retried"),
    pytest.param(policy(maximum_attempts=3), 3, failure(), None, RetryDecision("MAXIMUM_ATTEMPTS_REACHED"),
                 id="at maximum attempts: not retried"),
    pytest.param(policy(maximum_attempts=1), 1, failure(), None, RetryDecision("MAXIMUM_ATTEMPTS_REACHED"),
                 id="maximum attempts 1 means no retry"),
    pytest.param(policy(maximum_attempts=0), 500, failure(), None, RetryDecision("IN_PROGRESS", 100_000),
                 id="maximum attempts 0 is unlimited"),
    pytest.param(policy(non_retryable_error_types=["CardDeclined"]), 1, failure(type="CardDeclined"), None,
                 RetryDecision("NON_RETRYABLE_FAILURE"), id="non-retryable error type"),
    pytest.param(policy(non_retryable_error_types=["CardDeclined"]), 1, failure(type="Timeout"), None,
                 RetryDecision("IN_PROGRESS", 1_000), id="other error types still retried"),
    pytest.param(policy(), 1, failure(non_retryable=True), None, RetryDecision("NON_RETRYABLE_FAILURE"),
                 id="failure marked non-retryable"),
    pytest.param(policy(), 1, failure(kind="CANCELED"), None, RetryDecision("NON_RETRYABLE_FAILURE"),
                 id="canceled is never retried"),
    pytest.param(policy(), 1, failure(kind="TERMINATED"), None, RetryDecision("NON_RETRYABLE_FAILURE"),
                 id="terminated is never retried"),
    pytest.param(policy(maximum_attempts=1), 1, failure(non_retryable=True), None,
                 RetryDecision("NON_RETRYABLE_FAILURE"), id="non-retryable wins over maximum attempts"),
    pytest.param(policy(), 4, failure(next_retry_delay_ms=7_500), None, RetryDecision("IN_PROGRESS", 7_500),
                 id="next_retry_delay_ms replaces the backoff"),
    pytest.param(policy(maximum_interval_ms=1_000), 1, failure(next_retry_delay_ms=60_000), None,
                 RetryDecision("IN_PROGRESS", 60_000), id="next_retry_delay_ms is not capped by maximum interval"),
    pytest.param(policy(), 2, failure(next_retry_delay_ms=0), None, RetryDecision("IN_PROGRESS", 0),
                 id="next_retry_delay_ms zero retries at once"),
    pytest.param(policy(), 2, failure(next_retry_delay_ms=-1), None, RetryDecision("IN_PROGRESS", 2_000),
                 id="negative next_retry_delay_ms is ignored"),
    pytest.param(policy(maximum_attempts=2), 2, failure(next_retry_delay_ms=10), None,
                 RetryDecision("MAXIMUM_ATTEMPTS_REACHED"), id="next_retry_delay_ms does not beat maximum attempts"),
    pytest.param(policy(), 1, failure(), NOW + 1_001, RetryDecision("IN_PROGRESS", 1_000),
                 id="retry before the deadline is made"),
    pytest.param(policy(), 1, failure(), NOW + 1_000, RetryDecision("TIMEOUT"),
                 id="retry exactly at the deadline is pointless"),
    pytest.param(policy(), 1, failure(), NOW + 500, RetryDecision("TIMEOUT"), id="retry after the deadline"),
    pytest.param(policy(), 1, failure(next_retry_delay_ms=5_000), NOW + 2_000, RetryDecision("TIMEOUT"),
                 id="asked delay past the deadline"),
    pytest.param(policy(), 1, failure(next_retry_delay_ms=100), NOW + 500, RetryDecision("IN_PROGRESS", 100),
                 id="asked delay before the deadline even when the backoff would not be"),
])
def test_decide_retry(pol: Record | None, attempt: int, fail: Record | None, deadline: int | None,
                      expected: RetryDecision) -> None:
    assert decide_retry(pol, attempt, fail, NOW, deadline) == expected
