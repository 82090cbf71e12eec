"""A schedule's next action time: the one deadline of its run, derived from its state like every other."""

from __future__ import annotations

from typing import Any

from ostinato.streams.schedules import spec as specs

Record = dict[str, Any]


def acting(info: Record) -> bool:
    """Whether the spec may act: not paused, and not out of its limited actions."""
    state = info["definition"]["state"]
    return not state["paused"] and not (state["limited_actions"] and state["remaining_actions"] <= 0)


def next_nominal(info: Record, after_ms: int) -> int | None:
    return specs.next_time(info["definition"]["spec"], after_ms)


def action_time(info: Record, nominal_ms: int) -> int:
    """When the action due at `nominal_ms` is taken: its nominal time plus the schedule's jitter for it."""
    jitter = info["definition"]["spec"]["jitter_ms"]
    return nominal_ms + specs.jitter_ms(info["schedule_id"], nominal_ms, jitter)


def next_fire_ms(info: Record) -> int | None:
    """When the schedule's timer fires next, None while paused, exhausted or past its spec's end."""
    if not acting(info):
        return None
    nominal = next_nominal(info, info["progress"]["last_processed_ms"])
    return None if nominal is None else action_time(info, nominal)


def upcoming(info: Record, after_ms: int, count: int = 10) -> list[int]:
    """The next `count` action times after `after_ms` (for describe), empty while paused."""
    out: list[int] = []
    if not acting(info):
        return out
    t = max(after_ms, info["progress"]["last_processed_ms"])
    while len(out) < count:
        nominal = next_nominal(info, t)
        if nominal is None:
            break
        out.append(action_time(info, nominal))
        t = nominal
    return out
