"""Cron schedules (standard 5 fields, UTC): when the next run of a cron workflow starts, given the time now.

Written here rather than taken from a library: the core must be a pure function of its inputs, the grammar is
small, and a schedule the core reads is validated by the same code when the run starts (a bad one is refused then,
never discovered when a run closes).

Grammar (Temporal's and Vixie cron's): `minute hour day-of-month month day-of-week`, each field `*`, a number, a
range `a-b`, a step `*/n` or `a-b/n` or `a/n`, or a comma-separated list of those; months and weekdays also by
three-letter name (JAN, MON); weekday 7 is Sunday like 0. When both day fields are restricted, a day matching
either one matches (as in cron). The macros @yearly @annually @monthly @weekly @daily @midnight @hourly stand for
their usual expansions.
"""

from __future__ import annotations

from dataclasses import dataclass

_MINUTE_MS = 60_000
_DAY_MINUTES = 24 * 60
_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_MONTHS = {name: i + 1 for i, name in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"))}
_WEEKDAYS = {name: i for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
# Eight years cover every schedule that can match at all (Feb 29 skips 2100, so leap days can be 8 years apart).
_HORIZON_DAYS = 366 * 8 + 2


class CronError(ValueError):
    """A cron schedule that does not parse, or can never match."""


@dataclass(frozen=True, slots=True)
class Schedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day-of-month is `*`
    any_weekday: bool  # day-of-week is `*`

    def day_matches(self, epoch_day: int) -> bool:
        _, month, day = civil_date(epoch_day)
        if month not in self.months:
            return False
        by_day = day in self.days
        by_weekday = (epoch_day + 4) % 7 in self.weekdays  # 1 Jan 1970 was a Thursday
        if self.any_day or self.any_weekday:
            return by_day and by_weekday
        return by_day or by_weekday


def civil_date(epoch_day: int) -> tuple[int, int, int]:
    """(year, month, day) of the day `epoch_day` days after 1 Jan 1970, proleptic Gregorian (Howard Hinnant's
    `civil_from_days`): the core may not read the clock, nor lean on `datetime`, so it computes dates itself."""
    z = epoch_day + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


_STAR = "*"


def parse(spec: str) -> Schedule:
    """The schedule `spec` describes; CronError saying what is wrong otherwise."""
    text = _MACROS.get(spec.strip().lower(), spec.strip())
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"cron schedule {spec!r} needs 5 fields (minute hour day-of-month month day-of-week), "
                        f"not {len(parts)}")
    # `?` (no specific value, in a day field) is a star, as in Temporal's parser; so is `*/1`.
    minute, hour, day, month, weekday = (_STAR if p == "?" or p == "*/1" else p for p in parts)
    weekdays = _field(weekday, 0, 7, _WEEKDAYS, "day-of-week")
    schedule = Schedule(
        minutes=_field(minute, 0, 59, {}, "minute"), hours=_field(hour, 0, 23, {}, "hour"),
        days=_field(day, 1, 31, {}, "day-of-month"), months=_field(month, 1, 12, _MONTHS, "month"),
        weekdays=frozenset(d % 7 for d in weekdays), any_day=day == "*", any_weekday=weekday == "*")
    if next_time_ms(schedule, 0) is None:
        raise CronError(f"cron schedule {spec!r} never matches a date")
    return schedule


def _field(text: str, low: int, high: int, names: dict[str, int], what: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        base, _, step_text = item.partition("/")
        step = _number(step_text, {}, what) if step_text else 1
        if step < 1:
            raise CronError(f"cron {what}: step {step_text!r} must be at least 1")
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _number(a, names, what), _number(b, names, what)
        else:
            first = _number(base, names, what)
            last = high if step_text else first
        if not low <= first <= last <= high:
            raise CronError(f"cron {what}: {item!r} is outside {low}-{high} or runs backwards")
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _number(text: str, names: dict[str, int], what: str) -> int:
    if text.upper() in names:
        return names[text.upper()]
    if not (text.isascii() and text.isdigit()):  # "²".isdigit() is true, and int() refuses it
        raise CronError(f"cron {what}: {text!r} is not a number")
    return int(text)


def next_time_ms(schedule: Schedule, after_ms: int) -> int | None:
    """The first minute matching `schedule` strictly after `after_ms` (UTC), None if none within eight years."""
    first = after_ms // _MINUTE_MS + 1  # minutes since the epoch
    first_day, first_minute = divmod(first, _DAY_MINUTES)
    times = sorted(h * 60 + m for h in schedule.hours for m in schedule.minutes)
    for offset in range(_HORIZON_DAYS):
        if schedule.day_matches(first_day + offset):
            for minute in times:
                if offset or minute >= first_minute:
                    return ((first_day + offset) * _DAY_MINUTES + minute) * _MINUTE_MS
    return None


def backoff_ms(spec: str, now_ms: int) -> int:
    """How long from `now_ms` until the next run of `spec` starts (a valid schedule: `parse` checked it)."""
    found = next_time_ms(parse(spec), now_ms)
    return 0 if found is None else found - now_ms
