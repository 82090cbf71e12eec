"""The auditor's aggregation, pure: history events in, a per-workflow-type report out (no Kafka, no clock).

Kept apart from the faust app so it is unit-tested without a broker and replays the same way from any source
(the history topic, an archive, a test's list of events).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

Record = Mapping[str, Any]

UNKNOWN_TYPE = "(unknown)"  # runs whose start event was never seen (deleted by retention, or read mid-history)
DEFAULT_SLA_MS = 5_000
DEFAULT_COMPENSATION_PREFIXES = ("compensate", "undo")

# Each closing event ends one run; CONTINUED_AS_NEW closes this run and the next run brings its own start event.
_RUN_CLOSES = {
    "WORKFLOW_EXECUTION_COMPLETED": "completed",
    "WORKFLOW_EXECUTION_FAILED": "failed",
    "WORKFLOW_EXECUTION_TIMED_OUT": "timed_out",
    "WORKFLOW_EXECUTION_CANCELED": "canceled",
    "WORKFLOW_EXECUTION_TERMINATED": "terminated",
    "WORKFLOW_EXECUTION_CONTINUED_AS_NEW": "continued_as_new",
}
_ACTIVITY_CLOSES = {
    "ACTIVITY_TASK_COMPLETED": None,
    "ACTIVITY_TASK_FAILED": "activities_failed",
    "ACTIVITY_TASK_TIMED_OUT": "activities_timed_out",
    "ACTIVITY_TASK_CANCELED": "activities_canceled",
}


@dataclass(frozen=True)
class AuditConfig:
    """What counts as a compensation and as a slow activity.

    Attributes:
        sla_ms: an activity whose schedule-to-close time exceeds this is over its SLA. Schedule-to-close, not
            start-to-close: Ostinato writes an activity's STARTED event when the activity closes, stamped with
            the close time (as Temporal does), so history holds no separate start time to measure from.
        compensation_prefixes: an activity whose type starts with one of these (case-insensitive) is a
            compensation, the naming convention the saga examples follow (`compensate_charge`, `undo_reserve`).
    """

    sla_ms: int = DEFAULT_SLA_MS
    compensation_prefixes: tuple[str, ...] = DEFAULT_COMPENSATION_PREFIXES

    def is_compensation(self, activity_type: str) -> bool:
        name = activity_type.lower()
        return any(name.startswith(p.lower()) for p in self.compensation_prefixes)


@dataclass
class TypeReport:
    """The counts of one workflow type. Workflow counts are per run; activity counts are per activity (all
    attempts of one activity count once, with its final outcome)."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    timed_out: int = 0
    canceled: int = 0
    terminated: int = 0
    continued_as_new: int = 0
    activities_run: int = 0
    activities_failed: int = 0
    activities_timed_out: int = 0
    activities_canceled: int = 0
    compensations_run: int = 0
    activities_over_sla: int = 0

    @property
    def still_open(self) -> int:
        closed = (self.completed + self.failed + self.timed_out + self.canceled + self.terminated
                  + self.continued_as_new)
        return self.started - closed

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "still_open": self.still_open}


@dataclass
class _Activity:
    activity_type: str
    scheduled_ms: int


@dataclass
class _Run:
    workflow_type: str
    activities: dict[int, _Activity] = field(default_factory=dict)  # open activities by scheduled event id


class Auditor:
    """Folds history events into per-type counts, remembering each open run's type (only its start event names
    it) and each open activity's type and schedule time (its close event names neither).

    Events of one run must arrive in order, which the history topic guarantees: a run lives on one partition.
    State of closed runs and activities is dropped, so memory grows with open work, not with history.
    """

    def __init__(self, config: AuditConfig | None = None) -> None:
        self.config = config or AuditConfig()
        self.types: dict[str, TypeReport] = {}
        self._runs: dict[str, _Run] = {}
        self.events = 0

    def observe(self, run: str, event: Record) -> None:
        """Count one decoded `HistoryEvent` of the run `run` (any stable run identifier, e.g. `ns/wf/run_id`)."""
        self.events += 1
        kind = event["event_type"]
        if kind == "WORKFLOW_EXECUTION_STARTED":
            workflow_type = _attrs(event)["workflow_type"]
            self._runs[run] = _Run(workflow_type)
            self._type(workflow_type).started += 1
            return
        state = self._runs.get(run)
        if state is None:
            state = self._runs[run] = _Run(UNKNOWN_TYPE)
        counts = self._type(state.workflow_type)
        if kind in _RUN_CLOSES:
            name = _RUN_CLOSES[kind]
            setattr(counts, name, getattr(counts, name) + 1)
            del self._runs[run]
        elif kind == "ACTIVITY_TASK_SCHEDULED":
            activity_type = _attrs(event)["activity_type"]
            state.activities[event["event_id"]] = _Activity(activity_type, event["event_time_ms"])
            counts.activities_run += 1
            if self.config.is_compensation(activity_type):
                counts.compensations_run += 1
        elif kind in _ACTIVITY_CLOSES:
            self._close_activity(state, counts, kind, event)

    def _close_activity(self, run: _Run, counts: TypeReport, kind: str, event: Record) -> None:
        outcome = _ACTIVITY_CLOSES[kind]
        if outcome is not None:
            setattr(counts, outcome, getattr(counts, outcome) + 1)
        activity = run.activities.pop(_attrs(event)["scheduled_event_id"], None)
        # A canceled activity was stopped on purpose, often before it started: not a breach of its SLA.
        if activity is None or kind == "ACTIVITY_TASK_CANCELED":
            return
        if event["event_time_ms"] - activity.scheduled_ms > self.config.sla_ms:
            counts.activities_over_sla += 1

    def _type(self, workflow_type: str) -> TypeReport:
        report = self.types.get(workflow_type)
        if report is None:
            report = self.types[workflow_type] = TypeReport()
        return report

    def report(self) -> dict[str, Any]:
        """The report as JSON-ready data, types sorted by name so two replays of one history are byte-equal."""
        return {
            "sla_ms": self.config.sla_ms,
            "sla_measure": "schedule_to_close",
            "compensation_prefixes": list(self.config.compensation_prefixes),
            "events": self.events,
            "workflow_types": {name: self.types[name].as_dict() for name in sorted(self.types)},
        }


def _attrs(event: Record) -> Record:
    # Decoded unions are (type name, record) pairs; see ostinato.schemas.codec.
    attributes = event["attributes"]
    attrs: Record = attributes[1] if isinstance(attributes, tuple) else attributes
    return attrs
