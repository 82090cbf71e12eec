"""When a schedule acts: the times a `ScheduleSpec` record names, computed by pure functions.

Calendars and cron expressions match wall-clock time in the spec's zone (`zones`); cron text is parsed by
`streams.cron`, the same grammar as a workflow's `cron_schedule`, then matched here to the second like a calendar.
Intervals count from the Unix epoch plus their offset, as in Temporal. A time matching a skip calendar, or outside
start..end, is no time at all. Jitter delays each time by an amount derived from the schedule id and the time, so
every owner (and every replay) computes the same moment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ostinato.streams import cron
from ostinato.streams.schedules import zones

Record = dict[str, Any]

_SECOND_MS = 1000
_DAY_SECONDS = 86_400
_DAY_MS = _DAY_SECONDS * _SECOND_MS
_HORIZON_DAYS = 366 * 8 + 2  # as streams.cron: eight years hold every date that can match at all
_MAX_JITTER_MS = 365 * _DAY_MS
_MAX_SKIPPED = 2_000  # consecutive skipped times before a spec is judged to have no next time
# A clock going back (DST) can make a local time repeat: search from a little before the instant's local time.
_ZONE_SLACK_MS = 3 * 3600 * _SECOND_MS

# Temporal's defaults for a calendar field left empty.
_DEFAULTS = {"second": (0, 0), "minute": (0, 0), "hour": (0, 0), "day_of_month": (1, 31), "month": (1, 12),
             "day_of_week": (0, 6)}
_BOUNDS = {"second": (0, 59), "minute": (0, 59), "hour": (0, 23), "day_of_month": (1, 31), "month": (1, 12),
           "year": (1970, 9999), "day_of_week": (0, 7)}


LAST_MS = 253_402_128_000_000  # 9999-12-30: civil time (and zoneinfo) ends with year 9999


class SpecError(ValueError):
    """A spec that cannot work: a bad cron expression, range, interval or time zone."""


@dataclass(frozen=True, slots=True)
class Calendar:
    """A calendar (or a cron expression) compiled for matching: the values each field allows."""

    seconds: tuple[int, ...]  # second of the day, sorted
    days: frozenset[int]
    months: frozenset[int]
    years: frozenset[int] | None  # None: every year
    weekdays: frozenset[int]  # 0 = Sunday
    either_day: bool  # cron's rule: both day fields restricted, and a day matching either one matches

    def day_matches(self, epoch_day: int) -> bool:
        year, month, day = cron.civil_date(epoch_day)
        if month not in self.months or (self.years is not None and year not in self.years):
            return False
        by_day, by_weekday = day in self.days, (epoch_day + 4) % 7 in self.weekdays  # 1 Jan 1970: a Thursday
        return (by_day or by_weekday) if self.either_day else (by_day and by_weekday)

    def matches(self, local_ms: int) -> bool:
        day, ms = divmod(local_ms, _DAY_MS)
        return ms % _SECOND_MS == 0 and ms // _SECOND_MS in self.seconds and self.day_matches(day)

    def next_local(self, after_ms: int) -> int | None:
        """The first matching wall-clock time strictly after `after_ms` (naive epoch ms), within eight years."""
        first = after_ms // _SECOND_MS + 1
        first_day, first_second = divmod(first, _DAY_SECONDS)
        for offset in range(_HORIZON_DAYS):
            if self.day_matches(first_day + offset):
                for second in self.seconds:
                    if offset or second >= first_second:
                        return ((first_day + offset) * _DAY_SECONDS + second) * _SECOND_MS
        return None


def _values(ranges: Sequence[Record], name: str) -> set[int]:
    low, high = _BOUNDS[name]
    if not ranges:
        start, end = _DEFAULTS[name]
        return set(range(start, end + 1))
    out: set[int] = set()
    for r in ranges:
        start, end, step = r["start"], max(r["end"], r["start"]), r["step"] or 1
        if step < 1 or not low <= start <= end <= high:
            raise SpecError(f"calendar {name}: range {start}-{end}/{step} is outside {low}-{high}")
        out.update(range(start, end + 1, step))
    return out


def compile_calendar(calendar: Record) -> Calendar:
    """A ScheduleCalendar record, compiled; SpecError if a range is out of bounds."""
    hours, minutes, seconds = (_values(calendar[n], n) for n in ("hour", "minute", "second"))
    return Calendar(
        seconds=tuple(sorted(h * 3600 + m * 60 + s for h in hours for m in minutes for s in seconds)),
        days=frozenset(_values(calendar["day_of_month"], "day_of_month")),
        months=frozenset(_values(calendar["month"], "month")),
        years=frozenset(_values(calendar["year"], "year")) if calendar["year"] else None,
        weekdays=frozenset(d % 7 for d in _values(calendar["day_of_week"], "day_of_week")), either_day=False)


def compile_cron(expression: str) -> Calendar:
    """A cron expression (streams.cron's grammar), compiled as a calendar with cron's day rule."""
    try:
        parsed = cron.parse(expression)
    except cron.CronError as error:
        raise SpecError(str(error)) from error
    return Calendar(
        seconds=tuple(sorted(h * 3600 + m * 60 for h in parsed.hours for m in parsed.minutes)),
        days=parsed.days, months=parsed.months, years=None, weekdays=parsed.weekdays,
        either_day=not (parsed.any_day or parsed.any_weekday))


@dataclass(frozen=True, slots=True)
class CompiledSpec:
    calendars: tuple[Calendar, ...]
    intervals: tuple[tuple[int, int], ...]  # (every_ms, offset_ms)
    skip: tuple[Calendar, ...]
    start_at_ms: int | None
    end_at_ms: int | None
    jitter_ms: int
    zone: str


_COMPILED: dict[str, CompiledSpec] = {}


def compile_spec(spec: Record) -> CompiledSpec:
    """A ScheduleSpec record, compiled (and cached: deadlines are derived from state on every change)."""
    key = repr(sorted(spec.items()))
    found = _COMPILED.get(key)
    if found is None:
        found = _compile(spec)
        if len(_COMPILED) > 1024:
            _COMPILED.clear()
        _COMPILED[key] = found
    return found


def _compile(spec: Record) -> CompiledSpec:
    try:
        zones.zone(spec["time_zone_name"])
    except zones.ZoneError as error:
        raise SpecError(str(error)) from error
    intervals = []
    for interval in spec["intervals"]:
        every, offset = interval["every_ms"], interval["offset_ms"]
        if every < _SECOND_MS or not 0 <= offset < every:
            raise SpecError(f"interval every {every} ms offset {offset} ms: every must be at least a second, and "
                            "the offset below it")
        intervals.append((every, offset))
    if not 0 <= spec["jitter_ms"] <= _MAX_JITTER_MS:
        raise SpecError("jitter must be between 0 and 365 days")
    return CompiledSpec(
        calendars=tuple(compile_calendar(c) for c in spec["calendars"])
        + tuple(compile_cron(e) for e in spec["cron_expressions"]),
        intervals=tuple(intervals), skip=tuple(compile_calendar(c) for c in spec["skip"]),
        start_at_ms=spec["start_at_ms"], end_at_ms=spec["end_at_ms"], jitter_ms=spec["jitter_ms"],
        zone=spec["time_zone_name"])


def spec_problem(spec: Record) -> str | None:
    """Why `spec` cannot be used, or None."""
    try:
        compile_spec(spec)
    except SpecError as error:
        return str(error)
    return None


def _next_calendar(calendar: Calendar, zone: str, after_ms: int) -> int | None:
    local = zones.to_local_ms(after_ms, zone) - (_ZONE_SLACK_MS if zone else 0)
    for _ in range(64):  # a handful of local times can fall before `after_ms` when the clock went back
        found = calendar.next_local(local)
        if found is None:
            return None
        instant = zones.to_utc_ms(found, zone)
        if instant > after_ms:
            return instant
        local = found
    return None


def _next_raw(spec: CompiledSpec, after_ms: int) -> int | None:
    found = [t for t in (_next_calendar(c, spec.zone, after_ms) for c in spec.calendars) if t is not None]
    found += [offset + ((after_ms - offset) // every + 1) * every for every, offset in spec.intervals]
    return min(found) if found else None


def next_time(spec: Record, after_ms: int) -> int | None:
    """The first nominal time strictly after `after_ms` (UTC epoch ms), None when the spec has no more."""
    compiled = compile_spec(spec)
    if compiled.start_at_ms is not None and after_ms < compiled.start_at_ms - 1:
        after_ms = compiled.start_at_ms - 1
    after_ms = max(after_ms, -1)  # schedules act from 1970 on
    for _ in range(_MAX_SKIPPED):
        found = _next_raw(compiled, after_ms)
        if found is None or found > LAST_MS or (compiled.end_at_ms is not None and found > compiled.end_at_ms):
            return None
        local = zones.to_local_ms(found, compiled.zone)
        if not any(skip.matches(local) for skip in compiled.skip):
            return found
        after_ms = found
    return None


def times_between(spec: Record, start_ms: int, end_ms: int, limit: int) -> Iterator[int]:
    """Nominal times from `start_ms` to `end_ms` inclusive, at most `limit` of them."""
    t = start_ms - 1
    for _ in range(limit):
        found = next_time(spec, t)
        if found is None or found > end_ms:
            return
        yield found
        t = found


def jitter_ms(schedule_id: str, nominal_ms: int, jitter: int) -> int:
    """How long after its nominal time an action is taken: below `jitter`, derived from the schedule id and the
    time, so it spreads schedules that share a spec yet is the same on every owner and every replay."""
    if jitter <= 0:
        return 0
    digest = hashlib.sha256(f"{schedule_id}/{nominal_ms}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % jitter


def rfc3339(utc_ms: int) -> str:
    """`2026-01-02T03:04:05Z`: how a nominal time appears in an action's workflow id (Temporal's form)."""
    day, ms = divmod(utc_ms, _DAY_MS)
    year, month, dom = cron.civil_date(day)
    seconds = ms // _SECOND_MS
    return f"{year:04d}-{month:02d}-{dom:02d}T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


def action_workflow_id(base: str, nominal_ms: int) -> str:
    """The workflow id of the action due at `nominal_ms`: the same on a retry, so a start is never doubled."""
    return f"{base}-{rfc3339(nominal_ms)}"
