"""The cron schedule parser and next-time arithmetic of the core (standard 5 fields, UTC)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from ostinato.streams import cron


def ms(*when: int) -> int:
    return int(datetime(*when, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


@pytest.mark.parametrize(("spec", "now", "expected"), [
    pytest.param("* * * * *", ms(2026, 12, 2, 10, 0), ms(2026, 12, 2, 10, 1), id="every-minute-strictly-after"),
    pytest.param("* * * * *", ms(2026, 12, 2, 10, 0) + 500, ms(2026, 12, 2, 10, 1), id="mid-minute"),
    pytest.param("*/15 * * * *", ms(2026, 12, 2, 10, 16), ms(2026, 12, 2, 10, 30), id="step"),
    pytest.param("5,50 9-10 * * *", ms(2026, 12, 2, 10, 51), ms(2026, 12, 3, 9, 5), id="list-and-range"),
    pytest.param("0 9 * * MON-FRI", ms(2026, 12, 5, 10, 0), ms(2026, 12, 7, 9, 0), id="weekdays-by-name"),
    pytest.param("0 0 1 JAN *", ms(2026, 12, 2), ms(2027, 1, 1), id="month-by-name"),
    pytest.param("0 0 29 2 *", ms(2097, 3, 1), ms(2104, 2, 29), id="leap-day-skips-2100"),
    pytest.param("0 12 13 * 5", ms(2026, 12, 2), ms(2026, 12, 4, 12, 0), id="day-or-weekday"),
    pytest.param("0 0 * * 7", ms(2026, 12, 2), ms(2026, 12, 6), id="sunday-as-7"),
    pytest.param("10/20 * * * *", ms(2026, 12, 2, 10, 31), ms(2026, 12, 2, 10, 50), id="start-with-step"),
    pytest.param("@hourly", ms(2026, 12, 2, 10, 0), ms(2026, 12, 2, 11, 0), id="macro-hourly"),
    pytest.param("@weekly", ms(2026, 12, 2), ms(2026, 12, 6), id="macro-weekly"),
    pytest.param("0 0 */1 * MON", ms(2026, 12, 1), ms(2026, 12, 7), id="step-1-is-a-star"),
    pytest.param("0 0 ? * MON", ms(2026, 12, 1), ms(2026, 12, 7), id="question-mark-is-a-star"),
])
def test_next_time(spec: str, now: int, expected: int) -> None:
    assert cron.next_time_ms(cron.parse(spec), now) == expected
    assert cron.backoff_ms(spec, now) == expected - now


@pytest.mark.parametrize(("spec", "problem"), [
    ("* * * *", "needs 5 fields"),
    ("60 * * * *", "outside 0-59"),
    ("* 24 * * *", "outside 0-23"),
    ("* * 0 * *", "outside 1-31"),
    ("* * * 13 *", "outside 1-12"),
    ("* * * * 8", "outside 0-7"),
    ("5-1 * * * *", "runs backwards"),
    ("*/0 * * * *", "at least 1"),
    ("x * * * *", "not a number"),
    ("\u00b2 * * * *", "not a number"),
    ("0 0 31 4 *", "never matches"),
])
def test_bad_schedules_say_why(spec: str, problem: str) -> None:
    with pytest.raises(cron.CronError, match=problem):
        cron.parse(spec)


def test_civil_dates_agree_with_the_calendar() -> None:
    for epoch_day in range(-700_000, 2_900_000, 997):
        day = date(1970, 1, 1) + timedelta(days=epoch_day)
        assert cron.civil_date(epoch_day) == (day.year, day.month, day.day)
