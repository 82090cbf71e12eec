"""Wall-clock time in a named time zone, for schedule specs: the one module of the core that uses `datetime`.

It reads no clock: `zoneinfo` turns an instant into local wall time and back from the tz database alone, so the
answer is a pure function of its inputs (and of the tz database the process ships, the same on every owner built
from one image). The import-linter contract names this module as its one exception to "no datetime".
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_EPOCH = datetime(1970, 1, 1)


class ZoneError(ValueError):
    """A time zone name the tz database does not know."""


@cache
def zone(name: str) -> ZoneInfo | None:
    """The zone `name` (None for UTC or empty); ZoneError if unknown."""
    if name in ("", "UTC", "Etc/UTC", "Z"):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:  # a name can also be a bad path
        raise ZoneError(f"unknown time zone {name!r}") from error


def to_local_ms(utc_ms: int, name: str) -> int:
    """The wall-clock time in zone `name` at instant `utc_ms`, as milliseconds of a naive epoch."""
    tz = zone(name)
    if tz is None:
        return utc_ms
    local = datetime.fromtimestamp(utc_ms / 1000, UTC).astimezone(tz).replace(tzinfo=None)
    return (local - _EPOCH) // timedelta(milliseconds=1)


def to_utc_ms(local_ms: int, name: str) -> int:
    """The instant wall-clock time `local_ms` (naive epoch ms) names in zone `name`: the earlier one when the clock
    goes back (fold 0), and a time in a spring-forward gap is read with the offset before the gap."""
    tz = zone(name)
    if tz is None:
        return local_ms
    local = (_EPOCH + timedelta(milliseconds=local_ms)).replace(tzinfo=tz)
    return (local.astimezone(UTC).replace(tzinfo=None) - _EPOCH) // timedelta(milliseconds=1)
