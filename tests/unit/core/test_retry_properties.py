"""Retry arithmetic over the full ranges: every attempt (up to 2^31 - 1 and beyond), every interval an Avro long
holds, every coefficient >= 1 (infinity included). It never raises, never exceeds the cap, never shrinks as attempts
grow, and equals initial * coefficient^(attempt - 1) wherever that is finite. Issue 16: the default policy used to
overflow at attempt 1,025."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ostinato.streams.deadlines import MAX_TIME_MS, after, fitting
from ostinato.streams.retry import (
    DEFAULT_ACTIVITY_RETRY,
    MAX_INTERVAL_MS,
    backoff_ms,
    decide_retry,
    exponential_backoff_ms,
    with_defaults,
)

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
INT_MAX = 2**31 - 1

longs = st.integers(LONG_MIN, LONG_MAX)
positive_longs = st.integers(1, LONG_MAX)
attempts = st.one_of(st.integers(1, 64), st.integers(1, INT_MAX), st.integers(INT_MAX, 10**40))
coefficients = st.one_of(st.floats(min_value=1.0, max_value=1.0 + 2**-40), st.floats(min_value=1.0, max_value=4.0),
                         st.floats(min_value=1.0, allow_infinity=True, allow_nan=False))
maximums = st.one_of(st.none(), longs)
PROPERTIES = settings(max_examples=600, deadline=None)


def effective(initial: int, maximum: int | None) -> tuple[int, int]:
    """(initial, cap) as the policy means them: a non-positive initial is the default, no (or a non-positive)
    maximum is 100 x initial, and no cap exceeds the largest Avro long."""
    initial = initial if initial > 0 else DEFAULT_ACTIVITY_RETRY["initial_interval_ms"]
    cap = maximum if maximum is not None and maximum > 0 else min(100 * initial, MAX_INTERVAL_MS)
    return initial, cap


@PROPERTIES
@given(longs, coefficients, maximums, attempts)
@example(1000, 2.0, None, 1025)  # where the default policy used to overflow
@example(1000, 2.0, None, INT_MAX)
@example(LONG_MAX, float("inf"), None, 10**40)
@example(1, 1.0, LONG_MAX, 10**40)
@example(1, 1.0 + 2**-52, None, 2**62)
def test_backoff_is_an_int_within_the_cap_for_any_input(initial: int, coefficient: float, maximum: int | None,
                                                         attempt: int) -> None:
    delay = exponential_backoff_ms(initial, coefficient, maximum, attempt)
    first, cap = effective(initial, maximum)
    assert type(delay) is int
    assert 0 < delay <= cap <= LONG_MAX
    assert delay >= min(first, cap) - (first >> 52)  # never below the first delay (but for rounding of huge ones)


@PROPERTIES
@given(longs, coefficients, maximums, attempts, st.integers(1, 10**6))
@example(1000, 2.0, None, 1024, 1)
@example(1, 1.0 + 2**-52, None, 2**57, 2**3)
def test_backoff_never_shrinks_as_attempts_grow(initial: int, coefficient: float, maximum: int | None, attempt: int,
                                                more: int) -> None:
    earlier = exponential_backoff_ms(initial, coefficient, maximum, attempt)
    assert exponential_backoff_ms(initial, coefficient, maximum, attempt + 1) >= earlier
    assert exponential_backoff_ms(initial, coefficient, maximum, attempt + more) >= earlier


@PROPERTIES
@given(longs, coefficients, maximums, attempts)
def test_backoff_is_the_formula_wherever_the_formula_is_finite(initial: int, coefficient: float,
                                                               maximum: int | None, attempt: int) -> None:
    """The formula as it was written (`initial * coefficient ** (attempt - 1)`, floats) where it does not overflow;
    the same up to rounding (a few units in the last place of a double)."""
    first, cap = effective(initial, maximum)
    try:
        grown = first * coefficient ** (attempt - 1)
    except OverflowError:
        assert exponential_backoff_ms(initial, coefficient, maximum, attempt) == cap
        return
    expected = cap if grown >= cap else int(grown)
    assert math.isclose(exponential_backoff_ms(initial, coefficient, maximum, attempt), expected, rel_tol=2**-50,
                        abs_tol=1)


@PROPERTIES
@given(positive_longs, st.floats(min_value=1.0, max_value=8.0), maximums, st.integers(1, 80))
def test_backoff_is_the_exact_product_up_to_rounding(initial: int, coefficient: float, maximum: int | None,
                                                     attempt: int) -> None:
    """Against exact rational arithmetic, for attempts small enough to compute that way."""
    _, cap = effective(initial, maximum)
    exact = min(Fraction(cap), initial * Fraction(coefficient) ** (attempt - 1))
    delay = exponential_backoff_ms(initial, coefficient, maximum, attempt)
    assert abs(delay - exact) <= exact * Fraction(1, 2**48) + 1


@pytest.mark.parametrize(("attempt", "expected"), [
    (1, 1_000), (2, 2_000), (7, 64_000), (8, 100_000), (1_024, 100_000), (1_025, 100_000), (1_026, 100_000),
    (10_000, 100_000), (INT_MAX, 100_000), (INT_MAX + 1, 100_000), (10**40, 100_000),
])
def test_the_default_policy_settles_at_100_times_initial(attempt: int, expected: int) -> None:
    assert backoff_ms(with_defaults(None), attempt) == expected


@pytest.mark.parametrize("coefficient", [float("nan"), 0.5, -3.0, 0.0])
def test_a_coefficient_below_1_or_nan_counts_as_the_default(coefficient: float) -> None:
    assert with_defaults({"backoff_coefficient": coefficient})["backoff_coefficient"] == 2.0
    assert [exponential_backoff_ms(1000, coefficient, None, a) for a in (1, 2, 3, 50)] == [1000, 2000, 4000, 100_000]


def test_an_integer_coefficient_builds_no_huge_integer() -> None:
    """`2 ** (2**31)` as an int would take seconds and a quarter of a gigabyte; the arithmetic stays in floats."""
    assert exponential_backoff_ms(1000, 2, None, INT_MAX) == 100_000  # type: ignore[arg-type]


def test_the_workflow_task_retry_backoff_has_no_limit_on_attempts_either() -> None:
    # schedule_transient_task's backoff (1 s doubling, at most 10 min) for attempt n is this at n - 2.
    assert [exponential_backoff_ms(1_000, 2.0, 600_000, a - 2) for a in (3, 4, 12, 13, 1_027, INT_MAX)] == [
        1_000, 2_000, 512_000, 600_000, 600_000, 600_000]


@PROPERTIES
@given(longs, positive_longs, attempts, st.integers(0, LONG_MAX))
def test_decide_retry_never_raises_and_its_delay_fits_a_long(initial: int, maximum: int, attempt: int,
                                                             asked: int) -> None:
    policy = with_defaults({"initial_interval_ms": initial, "maximum_interval_ms": maximum})
    now = 1_704_067_200_000
    for failure in ({"message": "x"}, {"message": "x", "next_retry_delay_ms": asked}):
        decision = decide_retry(policy, attempt, failure, now, None)
        assert decision.retry_state == "IN_PROGRESS" and 0 <= decision.delay_ms <= LONG_MAX
        assert after(now, decision.delay_ms) <= MAX_TIME_MS


@given(longs.filter(lambda t: t >= 0), st.integers(0, LONG_MAX))
def test_times_saturate_at_the_largest_long(time_ms: int, delay_ms: int) -> None:
    assert after(time_ms, delay_ms) == min(time_ms + delay_ms, MAX_TIME_MS)
    assert time_ms + fitting(time_ms, delay_ms) <= MAX_TIME_MS
    assert fitting(time_ms, delay_ms) == delay_ms or time_ms + fitting(time_ms, delay_ms) == MAX_TIME_MS
