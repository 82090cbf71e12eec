"""Which runs the pre-deploy replay gate (and `sample_histories`) replays: the most recent runs per workflow type, open
and closed (pure).

Nothing here touches Kafka or S3: `history_window` feeds it history records read off the topic, the CLI's archive
source feeds it summaries of archived runs, and the unit tests feed it hand-built ones.

A run's *recency* is the time of its latest event: the close time of a closed run, the last thing that happened
to an open one. Open runs are sampled like closed ones, because they are the ones new code must continue.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ostinato.schemas import codec, wire
from ostinato.schemas.keys import EVENT_ID_WIDTH, split_key
from ostinato.streams import events as ev

Record = dict[str, Any]
RunId = tuple[str, str, str]  # (namespace, workflow_id, run_id)
RawRun = dict[int, bytes | None]  # event id -> the record's value (None: a tombstone)

__all__ = [
    "RawRun",
    "Record",
    "RunId",
    "RunSummary",
    "SamplePlan",
    "add_records",
    "decode_history",
    "parse_since",
    "pick",
    "summarize",
]

# Runs of the engine's own: a schedule's run has no workflow code, a batch job's is the server's. The gate leaves
# them out unless named with --workflow-type, or it would fail every deploy while a schedule exists.
ENGINE_WORKFLOW_TYPES = frozenset({"ostinato-schedule", "ostinato.BatchOperation"})


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What sampling needs to know about a run, without its whole history decoded."""

    run: RunId
    workflow_type: str
    started_ms: int
    last_ms: int  # its latest event's time: recency
    closed: bool


@dataclass(frozen=True)
class SamplePlan:
    """`--sample`, `--per-type`, `--since` and `--workflow-type` as data.

    `limit` None takes every run; with `per_type` the limit is per workflow type (each type gets its own most
    recent runs, so a busy type cannot crowd a rare one out of the gate), otherwise it is over all runs.
    """

    limit: int | None = None
    per_type: bool = False
    since_ms: int | None = None
    workflow_types: frozenset[str] = field(default_factory=frozenset)  # empty: every type

    def wants(self, summary: RunSummary) -> bool:
        if not self.workflow_types and summary.workflow_type in ENGINE_WORKFLOW_TYPES:
            return False  # the engine's own runs (schedules, batch jobs): no user code replays them
        return ((not self.workflow_types or summary.workflow_type in self.workflow_types)
                and (self.since_ms is None or summary.last_ms >= self.since_ms))


def pick(runs: Iterable[RunSummary], plan: SamplePlan) -> list[RunSummary]:
    """The runs to replay, most recent first (ties broken by run id, so the choice is stable)."""
    candidates = sorted((r for r in runs if plan.wants(r)), key=lambda r: (-r.last_ms, r.run))
    if plan.limit is None:
        return candidates
    if not plan.per_type:
        return candidates[:plan.limit]
    taken: Counter[str] = Counter()
    chosen: list[RunSummary] = []
    for summary in candidates:
        if taken[summary.workflow_type] < plan.limit:
            taken[summary.workflow_type] += 1
            chosen.append(summary)
    return chosen


def add_records(runs: dict[RunId, RawRun], records: Iterable[tuple[str, bytes | None]], *,
                only: Mapping[RunId, object] | None = None, older: bool = False) -> int:
    """File history records (key, value) under their runs; returns how many were filed.

    `only` keeps just the runs named (filling in runs that began before a window). `older` says the records are
    older than those filed already, so they never replace one (the later record of an event id is its value).
    Keys that are not history keys are left out: `ostinato check history` is the tool that reports them.
    """
    filed = 0
    for key, value in records:
        parsed = _parse(key)
        if parsed is None or (only is not None and parsed[0] not in only):
            continue
        run, event_id = parsed
        events = runs.setdefault(run, {})
        if older:
            events.setdefault(event_id, value)
        else:
            events[event_id] = value
        filed += 1
    return filed


def _parse(key: str) -> tuple[RunId, int] | None:
    try:
        parts = split_key(key)
    except ValueError:
        return None
    if len(parts) != 4 or len(parts[3]) != EVENT_ID_WIDTH or not parts[3].isdigit():
        return None
    return (parts[0], parts[1], parts[2]), int(parts[3])


def summarize(run: RunId, raw: RawRun) -> RunSummary | str:
    """The run's summary, or why it cannot be replayed: deleted (tombstones), its start not read, a gap."""
    if any(value is None for value in raw.values()):
        return "deleted by retention"
    if 1 not in raw:
        return "its first event was not read"
    last_id = max(raw)
    if len(raw) != last_id:
        return f"events missing: {len(raw)} of {last_id} read"
    try:
        first, last = _event(raw[1]), _event(raw[last_id])
    except ValueError as exc:
        return str(exc)
    if first["event_type"] != ev.WORKFLOW_EXECUTION_STARTED:
        return f"its first event is {first['event_type']}"
    return RunSummary(run, ev.attributes(first)["workflow_type"], first["event_time_ms"], last["event_time_ms"],
                      last["event_type"] in ev.CLOSE_STATUS)


def decode_history(raw: RawRun) -> list[Record]:
    """Every event of a run `summarize` accepted, in order."""
    return [_event(raw[event_id]) for event_id in sorted(raw)]


def _event(value: bytes | None) -> Record:
    if value is None:
        raise ValueError("a tombstone")
    try:
        name, event = codec.decode(value)
    except codec.DecodeError as exc:
        raise ValueError(f"undecodable event: {exc}") from None
    if name != wire.HISTORY_EVENT:
        raise ValueError(f"not a history event but a {name}")
    return event


_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def parse_since(text: str, now_ms: int) -> int:
    """`--since`: an age (`90s`, `30m`, `12h`, `7d`, `2w`) back from `now_ms`, or an ISO-8601 time (UTC unless it
    says otherwise); epoch milliseconds.

    Raises:
        ValueError: neither.
    """
    from datetime import UTC, datetime

    text = text.strip()
    number, unit = text[:-1], text[-1:].lower()
    if unit in _UNITS_MS and number.isdigit():
        return now_ms - int(number) * _UNITS_MS[unit]
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither an age (7d, 12h, 30m) nor an ISO-8601 time") from None
    return int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp() * 1000)
