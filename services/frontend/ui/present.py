"""How the UI shows the API's JSON: payload values, failure chains, times, one-line event summaries, the timeline.

Pure functions of the API's answers (no I/O), so the templates stay free of logic and these can be tested alone.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

JSON_ENCODING = "json/plain"
SUMMARY_CHARS = 160
# The status chips: the query language's name for each status, and the wire name the API answers with.
STATUSES = (("Running", "RUNNING"), ("Completed", "COMPLETED"), ("Failed", "FAILED"), ("Canceled", "CANCELED"),
            ("Terminated", "TERMINATED"), ("ContinuedAsNew", "CONTINUED_AS_NEW"), ("TimedOut", "TIMED_OUT"))
_ORDER_BY = re.compile(r"\bORDER\s+BY\b", re.IGNORECASE)


def payload_value(payload: Any) -> Any:
    """A payload as the API's JSON carries it (`metadata` and `data` base64) as the value it holds: JSON payloads
    decoded, others described (the engine never decodes user data, and neither does its UI)."""
    if not isinstance(payload, dict) or "data" not in payload:
        return payload
    try:
        meta = payload.get("metadata") or {}
        encoding = base64.b64decode(meta.get("encoding", "")).decode(errors="replace")
        data = base64.b64decode(payload["data"])
    except (binascii.Error, ValueError, TypeError, AttributeError):
        return payload
    if encoding == JSON_ENCODING:
        try:
            return json.loads(data)
        except ValueError:
            pass
    return f"<{len(data):,} bytes, encoding {encoding or 'unknown'}>"


def payload_values(payloads: Any) -> Any:
    """A list of payloads (arguments, a result) as values; one value when there is just one."""
    if not isinstance(payloads, list):
        return payload_value(payloads)
    values = [payload_value(p) for p in payloads]
    return values[0] if len(values) == 1 else values


def payload_map(payloads: Any) -> dict[str, Any]:
    """Memo and search attributes: name to value."""
    return {str(k): payload_value(v) for k, v in payloads.items()} if isinstance(payloads, dict) else {}


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False, default=str)


def failure_chain(failure: Any) -> list[dict[str, Any]]:
    """A failure and its causes, outermost first (what went wrong, then why)."""
    chain: list[dict[str, Any]] = []
    while isinstance(failure, dict) and len(chain) < 20:
        chain.append(failure)
        failure = failure.get("cause")
    return chain


def when(ms: Any) -> str:
    """Epoch milliseconds as UTC time, to the millisecond; empty for none."""
    if not isinstance(ms, int) or ms <= 0:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def duration(ms: Any) -> str:
    """A span of milliseconds for people: 850ms, 12.3s, 4m05s, 3h02m, 2d04h."""
    if not isinstance(ms, int | float) or ms < 0:
        return ""
    if ms < 1000:
        return f"{int(ms)}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def attributes(event: dict[str, Any]) -> dict[str, Any]:
    """An event's attributes with payloads decoded, for the expanded view."""
    attrs = dict(event.get("attributes") or {})
    attrs.pop("@type", None)
    return {k: _decoded(k, v) for k, v in attrs.items()}


def _decoded(name: str, value: Any) -> Any:
    if isinstance(value, list) and value and isinstance(value[0], dict) and "data" in value[0]:
        return [payload_value(v) for v in value]
    if isinstance(value, dict) and "data" in value and "metadata" in value:
        return payload_value(value)
    if isinstance(value, dict) and name in ("memo", "search_attributes", "header"):
        return payload_map(value)
    return value


def event_summary(event: dict[str, Any]) -> str:
    """The event's telling attributes on one line (the row of the history table); the rest is one click away."""
    parts: list[str] = []
    for key, value in attributes(event).items():
        if value in (None, "", [], {}, 0, False) or key.endswith(("_event_id", "_ms")) or key == "identity":
            continue
        if key == "failure" and isinstance(value, dict):
            value = f"{value.get('type') or value.get('kind', '')}: {value.get('message', '')}"
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        parts.append(f"{key}={text}")
    line = "  ".join(parts)
    return line if len(line) <= SUMMARY_CHARS else line[:SUMMARY_CHARS - 1] + "…"


def without_order(query: str) -> str:
    """The query's condition alone: counts take no ORDER BY."""
    match = _ORDER_BY.search(query)
    return (query[:match.start()] if match else query).strip()


def status_query(query: str, status: str) -> str:
    """The user's query narrowed to one status (the chips), keeping its ORDER BY at the end."""
    if not status:
        return query
    match = _ORDER_BY.search(query)
    where, order = (query[:match.start()], query[match.start():]) if match else (query, "")
    condition = f"ExecutionStatus = '{status}'"
    return f"({where.strip()}) AND {condition} {order}".strip() if where.strip() else f"{condition} {order}".strip()


@dataclass(frozen=True)
class Bar:
    """One activity or timer on the timeline, as shares (0-100) of the span the page's events cover."""

    label: str
    kind: str  # activity or timer
    outcome: str  # completed, failed, timed out, canceled, fired, open
    left: float
    width: float
    title: str


_OPENS = {"ACTIVITY_TASK_SCHEDULED": "activity", "TIMER_STARTED": "timer"}
_CLOSES = {"ACTIVITY_TASK_COMPLETED": "completed", "ACTIVITY_TASK_FAILED": "failed",
           "ACTIVITY_TASK_TIMED_OUT": "timed out", "ACTIVITY_TASK_CANCELED": "canceled", "TIMER_FIRED": "fired",
           "TIMER_CANCELED": "canceled"}


def timeline(events: list[dict[str, Any]], now_ms: int) -> list[Bar]:
    """Activities and timers of these events as bars from their scheduling to their outcome (or `now_ms`)."""
    if not events:
        return []
    opened: dict[int, tuple[str, str, int]] = {}  # event id: kind, label, start
    spans: list[tuple[str, str, str, int, int]] = []
    for event in events:
        kind, attrs, at = event.get("event_type", ""), event.get("attributes") or {}, int(event["event_time_ms"])
        if kind in _OPENS:
            label = attrs.get("activity_type") or attrs.get("timer_id") or "?"
            opened[int(event["event_id"])] = (_OPENS[kind], str(label), at)
        elif kind in _CLOSES:
            started = opened.pop(int(attrs.get("scheduled_event_id") or attrs.get("started_event_id") or 0), None)
            if started is not None:
                spans.append((started[0], started[1], _CLOSES[kind], started[2], at))
    spans += [(k, label, "open", start, max(start, now_ms)) for k, label, start in opened.values()]
    if not spans:
        return []
    first = min(int(events[0]["event_time_ms"]), *(s[3] for s in spans))
    last = max(int(events[-1]["event_time_ms"]), *(s[4] for s in spans))
    total = max(1, last - first)
    return [Bar(label, kind, outcome, 100 * (start - first) / total, max(0.5, 100 * (end - start) / total),
                f"{kind} {label}: {outcome}, {duration(end - start)}")
            for kind, label, outcome, start, end in sorted(spans, key=lambda s: s[3])]


_CHILD_OUTCOMES = {"CHILD_WORKFLOW_EXECUTION_STARTED": "RUNNING", "CHILD_WORKFLOW_EXECUTION_COMPLETED": "COMPLETED",
                   "CHILD_WORKFLOW_EXECUTION_FAILED": "FAILED", "CHILD_WORKFLOW_EXECUTION_CANCELED": "CANCELED",
                   "CHILD_WORKFLOW_EXECUTION_TIMED_OUT": "TIMED_OUT",
                   "CHILD_WORKFLOW_EXECUTION_TERMINATED": "TERMINATED",
                   "START_CHILD_WORKFLOW_EXECUTION_FAILED": "START_FAILED"}


@dataclass
class Child:
    """A child run as the parent's history tells it: asked for, started (its run id), and how it ended."""

    initiated_event_id: int
    namespace: str
    workflow_id: str
    workflow_type: str
    run_id: str = ""
    status: str = "STARTING"  # until the child's start is confirmed
    initiated_time_ms: int = 0
    closed_time_ms: int = 0
    detail: str = ""  # why it failed, or why it never started


def children_mark(pending: Any) -> str:
    """The run's open children (describe's `children`) as a short mark that changes when one is asked for, starts or
    closes: the page reloads its children table (a scan of the whole history) at once then, and otherwise at most
    every 10 s while the history grows (a child asked for and closed between two looks leaves the mark as it was)."""
    if not isinstance(pending, list):
        return ""
    marks = (f"{c.get('initiated_event_id')}:{c.get('started_event_id')}" for c in pending if isinstance(c, dict))
    return ",".join(marks)


def children(events: list[dict[str, Any]]) -> list[Child]:
    """Every child of these (`filter=children`) events, in the order the parent started them, each with its latest
    status: an outcome event overrides its start; a child whose initiation is on an earlier page is still listed."""
    found: dict[int, Child] = {}
    for event in events:
        kind, attrs = event.get("event_type", ""), event.get("attributes") or {}
        at = int(event.get("event_time_ms") or 0)
        if kind == "START_CHILD_WORKFLOW_EXECUTION_INITIATED":
            found[int(event["event_id"])] = Child(int(event["event_id"]), str(attrs.get("namespace", "")),
                                                  str(attrs.get("workflow_id", "")),
                                                  str(attrs.get("workflow_type", "")), initiated_time_ms=at)
            continue
        if kind not in _CHILD_OUTCOMES:
            continue
        initiated = int(attrs.get("initiated_event_id") or 0)
        execution = attrs.get("workflow_execution") or {}
        child = found.setdefault(initiated, Child(initiated, str(attrs.get("namespace", "")),
                                                  str(execution.get("workflow_id") or attrs.get("workflow_id", "")),
                                                  str(attrs.get("workflow_type", ""))))
        child.status = _CHILD_OUTCOMES[kind]
        child.run_id = str(execution.get("run_id") or child.run_id)
        if child.status != "RUNNING":
            child.closed_time_ms = at
        failure = attrs.get("failure")
        if isinstance(failure, dict):
            named = failure.get("type") or failure.get("kind") or ""
            child.detail = f"{named}: {failure.get('message', '')}".strip(": ")
        elif attrs.get("cause"):
            child.detail = str(attrs["cause"])
    return sorted(found.values(), key=lambda c: c.initiated_event_id)
