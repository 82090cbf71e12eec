"""The history checker: reads `<prefix>.history` as restore does and verifies every run's history is well formed.

Fault tests use it after killing processors and brokers, and operators run it as `ostinato check history`.
The pure half (`check_runs`, `fold_runs`) needs no Kafka, so unit tests feed it hand-built records.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ostinato.kafka.history_reader import HistoryReadError, high_watermarks, read_history_partitions
from ostinato.schemas import codec, wire
from ostinato.schemas.keys import EVENT_ID_WIDTH, shard_for, split_key
from ostinato.schemas.topics import Topic, topic_name
from ostinato.streams import events as ev
from ostinato.streams.appliers import APPLIERS, replay
from ostinato.streams.model import Workflow, durable_bytes

Record = dict[str, Any]
RunId = tuple[str, str, str]  # (namespace, workflow_id, run_id)
NO_RUN: RunId = ("", "", "")  # where a problem is filed when the key does not even name a run

__all__ = [
    "NO_RUN",
    "CheckReport",
    "CheckerError",
    "Problem",
    "check_history",
    "check_runs",
    "fold_runs",
    "high_watermarks",
    "read_history",
    "read_history_partitions",
]


CheckerError = HistoryReadError  # the checker's name for it: the history could not be read to its end


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one run's history. `event_id` is 0 when the problem is about the run as a whole."""

    run: RunId
    event_id: int
    message: str

    def __str__(self) -> str:
        where = "/".join(self.run) if self.run != NO_RUN else "(no run)"
        return f"{where} event {self.event_id}: {self.message}" if self.event_id else f"{where}: {self.message}"


@dataclass
class CheckReport:
    """What the checker saw. `histories` holds each live run's decoded events in order, ready for `fold_runs`."""

    runs: int = 0
    events: int = 0
    records: int = 0
    open_runs: int = 0
    closed_runs: Counter[str] = field(default_factory=Counter)  # close status -> runs
    deleted_runs: int = 0
    problems: list[Problem] = field(default_factory=list)
    histories: dict[RunId, list[Record]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        closed = ", ".join(f"{status} {n}" for status, n in sorted(self.closed_runs.items()))
        verdict = "no problems" if self.ok else f"{len(self.problems)} problem(s)"
        return (f"{self.runs} runs, {self.events} events: {sum(self.closed_runs.values())} closed"
                f"{f' ({closed})' if closed else ''}, {self.open_runs} open, {self.deleted_runs} deleted; {verdict}")

    def to_dict(self, max_problems: int | None = None) -> Record:
        """The report as JSON-ready data (without the histories); at most `max_problems` problems listed."""
        shown = self.problems if max_problems is None else self.problems[:max_problems]
        return {
            "ok": self.ok, "runs": self.runs, "events": self.events, "records": self.records,
            "open_runs": self.open_runs, "closed_runs": dict(sorted(self.closed_runs.items())),
            "deleted_runs": self.deleted_runs, "problem_count": len(self.problems),
            "problems": [{"namespace": p.run[0], "workflow_id": p.run[1], "run_id": p.run[2],
                          "event_id": p.event_id, "message": p.message} for p in shown],
        }


# -- what refers to what ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ref:
    """An attribute of an event that names an earlier event of the same run.

    `role` is what the referring event does to its target; each role happens at most once per target, and after
    `close` nothing may refer to the target again. `started` says whether the target must (True) or must not
    (False) have started before a close; `optional` allows 0 for "none".
    """

    attribute: str
    target: str  # the event type it names
    role: str | None = None
    started: bool | None = None
    optional: bool = False


def _refs(attribute: str, target: str, role: str | None, types: Iterable[str], started: bool | None = None,
          optional: bool = False) -> dict[str, Ref]:
    return dict.fromkeys(types, Ref(attribute, target, role, started, optional))


START, CLOSE, CANCEL = "start", "close", "cancel request"
REFS: dict[str, Ref] = {
    **_refs("scheduled_event_id", ev.WORKFLOW_TASK_SCHEDULED, START, [ev.WORKFLOW_TASK_STARTED]),
    **_refs("scheduled_event_id", ev.WORKFLOW_TASK_SCHEDULED, CLOSE,
            [ev.WORKFLOW_TASK_COMPLETED, ev.WORKFLOW_TASK_FAILED], started=True),
    **_refs("scheduled_event_id", ev.WORKFLOW_TASK_SCHEDULED, CLOSE, [ev.WORKFLOW_TASK_TIMED_OUT]),
    **_refs("scheduled_event_id", ev.ACTIVITY_TASK_SCHEDULED, START, [ev.ACTIVITY_TASK_STARTED]),
    **_refs("scheduled_event_id", ev.ACTIVITY_TASK_SCHEDULED, CLOSE,
            [ev.ACTIVITY_TASK_COMPLETED, ev.ACTIVITY_TASK_FAILED], started=True),
    # Timed out before it started (schedule-to-start), or canceled while queued: no started event.
    **_refs("scheduled_event_id", ev.ACTIVITY_TASK_SCHEDULED, CLOSE,
            [ev.ACTIVITY_TASK_TIMED_OUT, ev.ACTIVITY_TASK_CANCELED]),
    **_refs("scheduled_event_id", ev.ACTIVITY_TASK_SCHEDULED, CANCEL, [ev.ACTIVITY_TASK_CANCEL_REQUESTED]),
    **_refs("started_event_id", ev.TIMER_STARTED, CLOSE, [ev.TIMER_FIRED, ev.TIMER_CANCELED]),
    **_refs("initiated_event_id", ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED, START,
            [ev.CHILD_WORKFLOW_EXECUTION_STARTED]),
    **_refs("initiated_event_id", ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED, CLOSE,
            [ev.START_CHILD_WORKFLOW_EXECUTION_FAILED], started=False),
    **_refs("initiated_event_id", ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED, CLOSE, [
        ev.CHILD_WORKFLOW_EXECUTION_COMPLETED, ev.CHILD_WORKFLOW_EXECUTION_FAILED,
        ev.CHILD_WORKFLOW_EXECUTION_CANCELED, ev.CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
        ev.CHILD_WORKFLOW_EXECUTION_TERMINATED], started=True),
    **_refs("initiated_event_id", ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED, CLOSE,
            [ev.EXTERNAL_WORKFLOW_EXECUTION_SIGNALED, ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED]),
    **_refs("initiated_event_id", ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED, CLOSE,
            [ev.EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED, ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED]),
}
# Events a workflow task's commands produced name that task's completed event (0 when no task produced them).
TASK_COMPLETED_REF = Ref("workflow_task_completed_event_id", ev.WORKFLOW_TASK_COMPLETED, optional=True)
CANCEL_REQUESTED_REF = Ref("latest_cancel_requested_event_id", ev.ACTIVITY_TASK_CANCEL_REQUESTED, optional=True)
TERMINAL = frozenset(ev.CLOSE_STATUS)


# -- one run ---------------------------------------------------------------------------------------------------


class _RunCheck:
    """Walks one run's events in topic order; every finding becomes a Problem, never an exception."""

    def __init__(self, run: RunId, problems: list[Problem]) -> None:
        self.run = run
        self.problems = problems
        self.events: dict[int, Record] = {}  # decoded, by event id
        self.values: dict[int, bytes] = {}  # every id seen with a value, decodable or not
        self.last = 0
        self.terminal: Record | None = None
        self.roles: dict[tuple[int, str], int] = {}  # (target event id, role) -> the event that played it
        self.open_task = 0  # scheduled event id of the workflow task in flight

    def problem(self, event_id: int, message: str) -> None:
        self.problems.append(Problem(self.run, event_id, message))

    def record(self, event_id: int, value: bytes) -> Record | None:
        """Check one record of the run; return its event when it decoded and belongs in the history."""
        if event_id in self.values:
            same = "identical" if self.values[event_id] == value else "different"
            self.problem(event_id, f"duplicate: the key was written again ({same} bytes)")
            return None
        self.values[event_id] = value
        self._sequence(event_id)
        event = self._decode(event_id, value)
        if event is None:
            return None
        self.events[event_id] = event
        self._structure(event_id, event)
        return event

    def _sequence(self, event_id: int) -> None:
        if event_id < 1:
            self.problem(event_id, "event ids start at 1")
        elif event_id < self.last:
            self.problem(event_id, f"out of order: arrives after event {self.last}")
        elif event_id > self.last + 1:
            missing = f"{self.last + 1}" if event_id == self.last + 2 else f"{self.last + 1}..{event_id - 1}"
            self.problem(event_id, f"gap: event(s) {missing} missing before it")
        self.last = max(self.last, event_id)

    def _decode(self, event_id: int, value: bytes) -> Record | None:
        try:
            name, event = codec.decode(value)
        except codec.DecodeError as exc:
            self.problem(event_id, f"undecodable value: {exc}")
            return None
        if name != wire.HISTORY_EVENT:
            self.problem(event_id, f"not a history event but a {name}")
            return None
        if event["event_id"] != event_id:
            self.problem(event_id, f"the record says event_id {event['event_id']}, its key {event_id}")
        attributes_name = event["attributes"][0]
        if attributes_name != ev.attributes_type(event["event_type"]):
            # The schema cannot tie the union branch to the type; reading on would look up absent attributes.
            self.problem(event_id, f"{event['event_type']} carries {attributes_name.rpartition('.')[2]}")
            return None
        if (event["event_type"], event["applier_version"]) not in APPLIERS:
            self.problem(event_id, f"{event['event_type']} version {event['applier_version']} has no applier: "
                                   "the run cannot be replayed")
        return event

    def _structure(self, event_id: int, event: Record) -> None:
        kind = event["event_type"]
        if (kind == ev.WORKFLOW_EXECUTION_STARTED) != (event_id == 1):
            self.problem(event_id, "the first event must be WORKFLOW_EXECUTION_STARTED" if event_id == 1
                         else "WORKFLOW_EXECUTION_STARTED is not the first event")
        if self.terminal is not None:
            second = "a second terminal event" if kind in TERMINAL else "an event"
            self.problem(event_id, f"{second} ({kind}) after the terminal event {self.terminal['event_id']} "
                                   f"({self.terminal['event_type']})")
        elif kind in TERMINAL:
            self.terminal = event
        attrs = ev.attributes(event)
        ref = REFS.get(kind)
        if ref is not None:
            self._reference(event_id, kind, attrs, ref)
        for extra in (TASK_COMPLETED_REF, CANCEL_REQUESTED_REF):
            if extra.attribute in attrs:
                self._reference(event_id, kind, attrs, extra)
        self._workflow_task(event_id, kind, attrs)

    def _reference(self, event_id: int, kind: str, attrs: Record, ref: Ref) -> None:
        target_id = attrs[ref.attribute]
        if ref.optional and not target_id:
            return
        target = self.events.get(target_id) if target_id < event_id else None
        if target is None or target["event_type"] != ref.target:
            found = "no earlier event" if target is None else f"a {target['event_type']}"
            self.problem(event_id, f"{kind}: {ref.attribute} {target_id} is {found}, not an earlier {ref.target}")
            return
        closed = self.roles.get((target_id, CLOSE))
        if closed is not None:
            self.problem(event_id, f"{kind} refers to event {target_id}, already closed by event {closed}")
            return
        if ref.role is not None:
            if (target_id, ref.role) in self.roles:
                self.problem(event_id, f"{kind}: a second {ref.role} of event {target_id} (the first was event "
                                       f"{self.roles[(target_id, ref.role)]})")
                return
            self.roles[(target_id, ref.role)] = event_id
        if ref.role == CLOSE:
            self._close_matches(event_id, kind, attrs, target_id, ref)

    def _close_matches(self, event_id: int, kind: str, attrs: Record, target_id: int, ref: Ref) -> None:
        """A close agrees with what it closes: the started event it names, the timer id."""
        started = self.roles.get((target_id, START), 0)
        if ref.started is True and not started:
            self.problem(event_id, f"{kind} closes event {target_id}, which never started")
        elif ref.started is False and started:
            self.problem(event_id, f"{kind} closes event {target_id}, which had started at event {started}")
        if ref.attribute != "started_event_id" and "started_event_id" in attrs and attrs["started_event_id"] != started:
            self.problem(event_id, f"{kind}: started_event_id {attrs['started_event_id']}, but event {target_id} "
                                   + (f"started at event {started}" if started else "never started"))
        if kind in (ev.TIMER_FIRED, ev.TIMER_CANCELED):
            timer_id = ev.attributes(self.events[target_id])["timer_id"]
            if attrs["timer_id"] != timer_id:
                self.problem(event_id, f"{kind}: timer_id {attrs['timer_id']!r}, but event {target_id} started "
                                       f"timer {timer_id!r}")

    def _workflow_task(self, event_id: int, kind: str, attrs: Record) -> None:
        """A run has at most one workflow task in flight."""
        if kind == ev.WORKFLOW_TASK_SCHEDULED:
            if self.open_task:
                self.problem(event_id, f"a workflow task is scheduled while the one scheduled at event "
                                       f"{self.open_task} is still open")
            self.open_task = event_id
        elif kind in (ev.WORKFLOW_TASK_COMPLETED, ev.WORKFLOW_TASK_FAILED, ev.WORKFLOW_TASK_TIMED_OUT) \
                and attrs["scheduled_event_id"] == self.open_task:
            self.open_task = 0


# -- every run -------------------------------------------------------------------------------------------------


def _parse_key(key: str) -> tuple[RunId, int] | str:
    """(run, event id) of a history key, or why it is not one."""
    if not key:
        return "the record has no key"
    try:
        key.encode()  # keys read off Kafka carry undecodable bytes as surrogate escapes
        parts = split_key(key)
    except ValueError as exc:  # UnicodeEncodeError is a ValueError
        return "not UTF-8" if isinstance(exc, UnicodeEncodeError) else str(exc)
    if len(parts) != 4:
        return f"{len(parts)} components, expected ns/workflow_id/run_id/event_id"
    digits = parts[3]
    if len(digits) != EVENT_ID_WIDTH or not digits.isascii() or not digits.isdigit():
        return f"event id {digits!r} is not {EVENT_ID_WIDTH} digits"
    return (parts[0], parts[1], parts[2]), int(digits)


def check_runs(records: Iterable[tuple[str, bytes | None]]) -> CheckReport:
    """Check history records, given in topic order per partition, run by run.

    Each item is (history key, value), the value None for a tombstone. A run whose every key ends in a
    tombstone was deleted after retention and is only counted. Everything wrong becomes a `Problem` in the
    report; nothing in the records makes this raise.
    """
    report = CheckReport()
    by_run: dict[RunId, list[tuple[int, bytes | None]]] = defaultdict(list)
    for key, value in records:
        report.records += 1
        parsed = _parse_key(key)
        if isinstance(parsed, str):
            report.problems.append(Problem(NO_RUN, 0, f"malformed history key {key!r}: {parsed}"))
            continue
        run, event_id = parsed
        by_run[run].append((event_id, value))
    for run, records_of_run in by_run.items():
        _check_run(run, records_of_run, report)
    _check_successors(report, known=set(by_run))
    return report


def _check_run(run: RunId, records: list[tuple[int, bytes | None]], report: CheckReport) -> None:
    latest = dict(records)
    deleted = [event_id for event_id, value in latest.items() if value is None]
    if deleted and len(deleted) == len(latest):
        report.deleted_runs += 1
        return
    report.runs += 1
    if deleted or any(value is None for _, value in records):
        # Retention deletes a run in one transaction, so read_committed never sees half of it gone.
        report.problems.append(Problem(run, 0, f"partly deleted: {len(deleted)} of {len(latest)} events end in a "
                                                "tombstone, or a value follows a tombstone"))
        return
    check = _RunCheck(run, report.problems)
    history = report.histories.setdefault(run, [])
    for event_id, value in records:
        assert value is not None
        event = check.record(event_id, value)
        if event is not None:
            history.append(event)
    report.events += len(history)
    if check.terminal is None:
        report.open_runs += 1
    else:
        report.closed_runs[ev.CLOSE_STATUS[check.terminal["event_type"]]] += 1


def _check_successors(report: CheckReport, known: set[RunId]) -> None:
    """A run that continued as new (or retried) names its successor, which must exist and name it back.

    `known` holds every run with any record, deleted ones included: retention may delete a successor first.
    """
    for run, history in report.histories.items():
        last = history[-1] if history else None
        if last is None or last["event_type"] not in TERMINAL:
            continue
        successor = ev.attributes(last).get("new_execution_run_id") or ""
        if not successor:
            continue
        next_run = (run[0], run[1], successor)
        if next_run not in known:
            report.problems.append(Problem(run, last["event_id"], f"names run {successor} as its successor, which "
                                                                  "has no history (neither live nor deleted)"))
            continue
        first = (report.histories.get(next_run) or [None])[0]
        if first is None or first["event_type"] != ev.WORKFLOW_EXECUTION_STARTED:
            continue  # its own check already reported what is wrong with its start
        predecessor = ev.attributes(first)["continued_execution_run_id"]
        if predecessor != run[2]:
            report.problems.append(Problem(next_run, 1, f"continues run {predecessor!r}, but run {run[2]} names "
                                                        "it as its successor"))


def fold_runs(events_by_run: Mapping[RunId, Sequence[Record]]) -> dict[RunId, bytes]:
    """Replay each run's history on a fresh Workflow and return the durable state bytes per run.

    Compare with a store: `durable_bytes(decode_run(state_value))`. Each run folds on its own: the started
    applier needs nothing from the run it continued from (that id is in its own attributes). An applier error
    propagates with a note naming the run, so a broken history is not silently skipped.
    """
    folded: dict[RunId, bytes] = {}
    for run, events in events_by_run.items():
        namespace, workflow_id, run_id = run
        try:
            workflow = replay(Workflow(namespace, workflow_id), [(run_id, e) for e in events])
            folded[run] = durable_bytes(workflow.runs[run_id])
        except Exception as exc:
            exc.add_note(f"while folding the history of run {'/'.join(run)}")
            raise
    return folded


# -- reading the topic: ostinato.kafka.history_reader, shared with the replay gate --------------------------------


def read_history(bootstrap: str, prefix: str, timeout: float = 30.0) -> Iterator[tuple[str, bytes | None]]:
    """Every committed record of `<prefix>.history`, in offset order per partition (a run's event order).

    See `read_history_partitions` for where reading stops and what raises.
    """
    for _, key, value in read_history_partitions(bootstrap, prefix, timeout):
        yield key, value


def check_history(bootstrap: str, prefix: str, timeout: float = 30.0) -> CheckReport:
    """Read the whole history topic and check it, including that each workflow's records are on its shard."""
    shards = len(high_watermarks(bootstrap, topic_name(prefix, Topic.HISTORY), timeout))
    misplaced: list[Problem] = []
    report = check_runs(_on_their_shards(read_history_partitions(bootstrap, prefix, timeout), shards, misplaced))
    report.problems.extend(misplaced)
    return report


def _on_their_shards(records: Iterable[tuple[int, str, bytes | None]], shards: int,
                     misplaced: list[Problem]) -> Iterator[tuple[str, bytes | None]]:
    """Pass records through, noting (once per run) any not on its workflow's shard: restore would never see it."""
    reported: set[RunId] = set()
    for partition, key, value in records:
        parsed = _parse_key(key)
        if not isinstance(parsed, str) and parsed[0] not in reported:
            (namespace, workflow_id, _), event_id = parsed
            shard = shard_for(namespace, workflow_id, shards)
            if shard != partition:
                reported.add(parsed[0])
                where = f"in partition {partition}, but {namespace}/{workflow_id} belongs to shard {shard}"
                misplaced.append(Problem(parsed[0], event_id, where))
        yield key, value
