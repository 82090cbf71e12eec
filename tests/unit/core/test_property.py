"""Replay equals live: random command sequences; after every step, state rebuilt from history and invariants."""

from __future__ import annotations

import os
from dataclasses import replace
from functools import cache
from typing import Any

from hypothesis import HealthCheck, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from ostinato.schemas import codec
from ostinato.streams import events as ev
from ostinato.streams.actions import (
    CancelTimer,
    Deadline,
    DispatchActivityTask,
    DispatchQueryTask,
    DispatchWorkflowTask,
    Reply,
    ScheduleTimer,
    SendCommand,
)
from ostinato.streams.appliers import replay
from ostinato.streams.config import Config, Limits
from ostinato.streams.deadlines import deadlines, fire_timer_body, in_first_task_backoff
from ostinato.streams.deciders import decide
from ostinato.streams.model import Workflow, durable_bytes, encode_current, encode_run
from ostinato.streams.writer import Step
from tests.unit.core.support import NS, WF, Harness, command, wf_command

Record = dict[str, Any]

EXAMPLES = int(os.environ.get("OSTINATO_PROPERTY_EXAMPLES", "300"))  # CI; thousands before a release
STEPS = int(os.environ.get("OSTINATO_PROPERTY_STEPS", "40"))

# Low limits and short times, so that the limit, timeout and retention paths come up within a few dozen steps.
CONFIG = Config(
    limits=Limits(history_warn_events=40, history_max_events=60, max_pending_activities=3, max_pending_children=3,
                  max_pending_external_requests=3, max_signals=5),
    retention_ms=30_000, default_task_timeout_ms=5_000, max_task_timeout_ms=20_000,
    workflow_task_retry_initial_ms=1_000, workflow_task_retry_max_ms=8_000, egress_topics=("orders.*",),
)

C = "ostinato.command."
HISTORY_EVENT = "ostinato.history.HistoryEvent"
JSON = {"metadata": {"encoding": b"json/plain"}, "data": b"1"}
NULL = {"metadata": {"encoding": b"binary/null"}, "data": b""}
PARENT = {"namespace": NS, "workflow_id": "parent-wf", "run_id": "parent-run", "initiated_event_id": 7,
          "parent_close_policy": "TERMINATE"}
ORIGIN = {"namespace": NS, "workflow_id": "caller", "run_id": "caller-run", "initiated_event_id": 9}
REUSE = ["UNSPECIFIED", "ALLOW_DUPLICATE", "ALLOW_DUPLICATE_FAILED_ONLY", "REJECT_DUPLICATE", "TERMINATE_IF_RUNNING"]
CONFLICT = ["UNSPECIFIED", "FAIL", "USE_EXISTING", "TERMINATE_EXISTING"]
CHILD_CLOSES = ["COMPLETED", "FAILED", "CANCELED", "TERMINATED", "TIMED_OUT"]  # what a closed child reports
STATUSES = ["UNSPECIFIED", "RUNNING", *CHILD_CLOSES, "CONTINUED_AS_NEW"]
RETRY_STATES = ["UNSPECIFIED", "IN_PROGRESS", "NON_RETRYABLE_FAILURE", "TIMEOUT", "MAXIMUM_ATTEMPTS_REACHED",
                "RETRY_POLICY_NOT_SET", "CANCEL_REQUESTED"]
TASK_FAILED_CAUSES = ["UNSPECIFIED", "NONDETERMINISM", "WORKFLOW_WORKER_UNHANDLED_FAILURE", "BAD_COMMAND",
                      "PAYLOADS_TOO_LARGE", "UNKNOWN_WORKFLOW_TYPE", "UNHANDLED_COMMAND"]
TERMINAL = frozenset(ev.CLOSE_STATUS)

# -- history invariants --------------------------------------------------------------------------------------------

_ACTIVITY_OUTCOMES = (ev.ACTIVITY_TASK_COMPLETED, ev.ACTIVITY_TASK_FAILED, ev.ACTIVITY_TASK_TIMED_OUT,
                      ev.ACTIVITY_TASK_CANCELED)
_CHILD_OUTCOMES = (ev.CHILD_WORKFLOW_EXECUTION_COMPLETED, ev.CHILD_WORKFLOW_EXECUTION_FAILED,
                   ev.CHILD_WORKFLOW_EXECUTION_CANCELED, ev.CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
                   ev.CHILD_WORKFLOW_EXECUTION_TERMINATED)
_SIGNAL_RESULTS = (ev.EXTERNAL_WORKFLOW_EXECUTION_SIGNALED, ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED)
_CANCEL_RESULTS = (ev.EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED,
                   ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED)

# event type -> (attribute, the type of the earlier event it must name, whether 0 means "none")
REFERENCES: dict[str, list[tuple[str, str, bool]]] = {
    ev.WORKFLOW_TASK_STARTED: [("scheduled_event_id", ev.WORKFLOW_TASK_SCHEDULED, False)],
    **{t: [("scheduled_event_id", ev.WORKFLOW_TASK_SCHEDULED, False),
           ("started_event_id", ev.WORKFLOW_TASK_STARTED, False)]
       for t in (ev.WORKFLOW_TASK_COMPLETED, ev.WORKFLOW_TASK_FAILED)},
    # A task whose start was never reported times out without one (SCHEDULE_TO_CLOSE).
    ev.WORKFLOW_TASK_TIMED_OUT: [("scheduled_event_id", ev.WORKFLOW_TASK_SCHEDULED, False),
                                 ("started_event_id", ev.WORKFLOW_TASK_STARTED, True)],
    ev.ACTIVITY_TASK_STARTED: [("scheduled_event_id", ev.ACTIVITY_TASK_SCHEDULED, False)],
    ev.ACTIVITY_TASK_CANCEL_REQUESTED: [("scheduled_event_id", ev.ACTIVITY_TASK_SCHEDULED, False)],
    **{t: [("scheduled_event_id", ev.ACTIVITY_TASK_SCHEDULED, False),
           ("started_event_id", ev.ACTIVITY_TASK_STARTED, True)] for t in _ACTIVITY_OUTCOMES},
    ev.TIMER_FIRED: [("started_event_id", ev.TIMER_STARTED, False)],
    ev.TIMER_CANCELED: [("started_event_id", ev.TIMER_STARTED, False)],
    ev.CHILD_WORKFLOW_EXECUTION_STARTED: [("initiated_event_id", ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED, False)],
    ev.START_CHILD_WORKFLOW_EXECUTION_FAILED: [
        ("initiated_event_id", ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED, False)],
    **{t: [("initiated_event_id", ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED, False),
           ("started_event_id", ev.CHILD_WORKFLOW_EXECUTION_STARTED, False)] for t in _CHILD_OUTCOMES},
    **{t: [("initiated_event_id", ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED, False)] for t in _SIGNAL_RESULTS},
    **{t: [("initiated_event_id", ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED, False)]
       for t in _CANCEL_RESULTS},
}
def reported_starts(now_ms: int) -> st.SearchStrategy[int | None]:
    """When a worker says it took a task: none (an older worker), a plausible time, or a broken clock's (before
    dispatch, or minutes ahead of the engine)."""
    return st.one_of(st.none(), st.integers(now_ms - 30_000, now_ms), st.integers(now_ms, now_ms + 120_000))


# What the workflow code must see: once one is written, a workflow task must follow (none may be lost).
WAKING = frozenset({ev.WORKFLOW_EXECUTION_SIGNALED, ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED, *_ACTIVITY_OUTCOMES,
                    ev.TIMER_FIRED, ev.CHILD_WORKFLOW_EXECUTION_STARTED, ev.START_CHILD_WORKFLOW_EXECUTION_FAILED,
                    *_CHILD_OUTCOMES, *_SIGNAL_RESULTS, *_CANCEL_RESULTS})
# Outcomes that end the thing they name: at most one per activity, timer, workflow task, child or external request.
ENDINGS: dict[str, tuple[str, str]] = {
    **dict.fromkeys(_ACTIVITY_OUTCOMES, ("activity", "scheduled_event_id")),
    **dict.fromkeys((ev.TIMER_FIRED, ev.TIMER_CANCELED), ("timer", "started_event_id")),
    **dict.fromkeys((ev.WORKFLOW_TASK_COMPLETED, ev.WORKFLOW_TASK_FAILED, ev.WORKFLOW_TASK_TIMED_OUT),
                    ("workflow task", "scheduled_event_id")),
    **dict.fromkeys((*_CHILD_OUTCOMES, ev.START_CHILD_WORKFLOW_EXECUTION_FAILED), ("child", "initiated_event_id")),
    **dict.fromkeys((*_SIGNAL_RESULTS, *_CANCEL_RESULTS), ("external request", "initiated_event_id")),
}


def check_run_history(run_id: str, events: list[Record], workflow: Workflow) -> None:
    """One run's history: contiguous ids, one terminal event last (iff closed), every reference points back, and
    nothing the workflow must see is left without a workflow task to show it."""
    where = f"run {run_id}"
    assert [e["event_id"] for e in events] == list(range(1, len(events) + 1)), f"{where}: event ids not contiguous"
    assert events[0]["event_type"] == ev.WORKFLOW_EXECUTION_STARTED, f"{where}: does not begin with its start"
    terminal = [i for i, e in enumerate(events) if e["event_type"] in TERMINAL]
    live = workflow.runs.get(run_id)
    if live is None or not live.open:  # a deleted run was closed first
        assert len(terminal) == 1, f"{where} is closed with {len(terminal)} terminal events"
        assert terminal[0] == len(events) - 1, f"{where}: events after its terminal event"
        if live is not None:
            assert live.status == ev.CLOSE_STATUS[events[-1]["event_type"]], f"{where}: status disagrees with history"
    else:
        assert not terminal, f"{where} is RUNNING but has a terminal event"
    if live is not None:
        assert live.next_event_id == len(events) + 1, f"{where}: next_event_id disagrees with history"
    if live is not None and live.open and live.workflow_task is None and not in_first_task_backoff(live):
        # A task saw history through its SCHEDULED: what arrived while it was out (written before its STARTED, or
        # after it in histories from before the start was written with the answer) must get a task of its own.
        starts = [e for e in events if e["event_type"] == ev.WORKFLOW_TASK_STARTED]
        seen = ev.attributes(starts[-1])["scheduled_event_id"] if starts else 0
        unseen = [e["event_type"] for e in events if e["event_id"] > seen and e["event_type"] in WAKING]
        assert not unseen, f"{where}: {unseen} written after the last workflow task, and no task follows"
    by_id: dict[int, Record] = {}
    ended: set[tuple[str, int]] = set()
    for e in events:
        kind, attrs = e["event_type"], ev.attributes(e)
        for name, target, optional in REFERENCES.get(kind, ()):
            ref = attrs[name]
            if optional and ref == 0:
                continue
            assert ref in by_id and by_id[ref]["event_type"] == target, (
                f"{where}: event {e['event_id']} {kind}.{name}={ref} names no earlier {target}")
        if kind == ev.WORKFLOW_TASK_STARTED:  # taken when the worker says, but never before it was dispatched
            assert e["event_time_ms"] >= by_id[attrs["scheduled_event_id"]]["event_time_ms"], (
                f"{where}: event {e['event_id']} {kind} is earlier than its task was scheduled")
        completed_id = attrs.get("workflow_task_completed_event_id") or 0
        if completed_id:
            assert by_id.get(completed_id, {}).get("event_type") == ev.WORKFLOW_TASK_COMPLETED, (
                f"{where}: event {e['event_id']} {kind} names {completed_id}, no earlier WORKFLOW_TASK_COMPLETED")
        _check_pairs(where, e, kind, attrs, by_id)
        if kind in ENDINGS:
            family, name = ENDINGS[kind]
            assert (family, attrs[name]) not in ended, f"{where}: event {e['event_id']} {kind} ends {family} twice"
            ended.add((family, attrs[name]))
        by_id[e["event_id"]] = e


def _check_pairs(where: str, e: Record, kind: str, attrs: Record, by_id: dict[int, Record]) -> None:
    """A started event named next to a scheduled/initiated one must belong to it; timers must match by id."""
    started = attrs.get("started_event_id") or 0
    if kind in (ev.WORKFLOW_TASK_COMPLETED, ev.WORKFLOW_TASK_FAILED, ev.WORKFLOW_TASK_TIMED_OUT,
                *_ACTIVITY_OUTCOMES) and started:
        assert ev.attributes(by_id[started])["scheduled_event_id"] == attrs["scheduled_event_id"], (
            f"{where}: event {e['event_id']} {kind} pairs started {started} with another scheduled event")
    if kind in _CHILD_OUTCOMES:
        assert ev.attributes(by_id[started])["initiated_event_id"] == attrs["initiated_event_id"], (
            f"{where}: event {e['event_id']} {kind} pairs child started {started} with another initiation")
    if kind in (ev.TIMER_FIRED, ev.TIMER_CANCELED):
        assert ev.attributes(by_id[started])["timer_id"] == attrs["timer_id"], (
            f"{where}: event {e['event_id']} {kind} of timer {attrs['timer_id']!r} names another timer's start")
    if kind == ev.ACTIVITY_TASK_CANCELED and attrs["latest_cancel_requested_event_id"]:
        requested = by_id.get(attrs["latest_cancel_requested_event_id"], {})
        assert requested.get("event_type") == ev.ACTIVITY_TASK_CANCEL_REQUESTED, (
            f"{where}: event {e['event_id']} names no earlier ACTIVITY_TASK_CANCEL_REQUESTED")


def check_answered(cmd: Record, step: Step) -> None:
    """A command the API gateway accepts from outside, sent with a reply partition, is answered exactly once (its
    sender waits for that answer). Exempt: engine-internal commands and child starts (the gateway refuses them) and
    a query that reached its run (a worker answers it, not the owner)."""
    from ostinato.services.frontend.gateway import internal_origin

    replies = [a for a in step.actions if isinstance(a, Reply)]
    assert all((r.request_id, r.reply_partition) == (cmd["request_id"], cmd["reply_partition"]) for r in replies)
    if cmd["reply_partition"] is None:
        assert not replies, f"{cmd['body'][0]} sent without a reply partition was answered"
        return
    if internal_origin(cmd["body"]) is not None:
        return
    if cmd["body"][0] == C + "QueryWorkflow" and any(isinstance(a, DispatchQueryTask) for a in step.actions):
        assert not replies, "the owner answered a query it dispatched to a worker"
        return
    assert len(replies) == 1, f"{cmd['body'][0]} got {len(replies)} answers: {replies}"


# -- the harness, checked ------------------------------------------------------------------------------------------


class CheckedHarness(Harness):
    """The support Harness, plus: decide never raises, a rejection changes nothing, the history invariants, at most
    one running run, and a deadline index kept from ScheduleTimer/CancelTimer actions that must always equal the
    deadlines of the live runs. Each event is encoded and decoded once (Kafka records are immutable once
    written); the replay itself still starts from nothing after every step."""

    def __init__(self, config: Config) -> None:
        super().__init__(config=config)
        self.wire: list[tuple[str, Record]] = []
        self.index: set[Deadline] = set()
        self.request_ids: list[str] = []
        self.failed = False  # a check failed: the end-of-run check would only repeat it

    def send(self, name: str, body: Record | None = None, **envelope: Any) -> Step:
        self.counter += 1
        envelope.setdefault("request_id", f"req-{self.counter}")
        cmd = command(name, body, **envelope)
        self.request_ids.append(cmd["request_id"])
        note(f"t={self.now} {name} run_id={cmd['run_id']!r} request_id={cmd['request_id']!r} body={body!r}")
        self.failed = True
        before = self.snapshot()
        try:
            step = decide(self.workflow, cmd, self.now, self.config, offset=self.counter)
        except Exception as exc:
            raise AssertionError(f"decide raised on {name}: {exc!r}") from exc
        self.history.extend(step.events)
        self.steps.append(step)
        check_answered(cmd, step)
        if step.rejection is not None:
            event(f"rejected {name.split('.')[-1]}: {step.rejection['code']}")
            assert not step.events, f"a rejection ({step.rejection['code']}) wrote events"
            assert self.snapshot() == before, f"a rejection ({step.rejection['code']}) changed state"
        for _, e in step.events:
            event(e["event_type"])
            attrs = ev.attributes(e)
            if e["event_type"] == ev.WORKFLOW_TASK_FAILED:
                limit = attrs["failure"]["message"].partition("(max_")[2].partition(")")[0]
                event(f"workflow task failed: {attrs['cause']}" + (f" (max_{limit})" if limit else ""))
            elif e["event_type"] == ev.WORKFLOW_EXECUTION_TERMINATED and "history_max_events" in attrs["reason"]:
                event("terminated at history_max_events")
        self.check_replay()
        self.check_index(step)
        self.check_invariants()
        self.failed = False
        return step

    def snapshot(self) -> tuple[Any, ...]:
        wf = self.workflow
        runs = tuple(sorted((rid, encode_run(run)) for rid, run in wf.runs.items()))
        return runs, None if wf.current is None else encode_current(wf.current)

    def check_replay(self) -> None:
        for run_id, e in self.history[len(self.wire):]:
            self.wire.append((run_id, codec.decode(codec.encode(HISTORY_EVENT, e))[1]))
        rebuilt = replay(Workflow(NS, WF), self.wire)
        assert set(self.workflow.runs) <= set(rebuilt.runs)
        for run_id, run in self.workflow.runs.items():
            assert durable_bytes(rebuilt.runs[run_id]) == durable_bytes(run), f"run {run_id} differs after replay"
        if self.workflow.current is not None:
            assert rebuilt.current == self.workflow.current, "the current-run pointer differs after replay"

    def live_deadlines(self) -> set[Deadline]:
        return {d for run in self.workflow.runs.values() for d in deadlines(run, self.config)}

    def check_index(self, step: Step) -> None:
        for action in step.actions:
            if isinstance(action, ScheduleTimer | CancelTimer):
                assert (action.namespace, action.workflow_id) == (NS, WF)
                if isinstance(action, ScheduleTimer):
                    self.index.add(action.deadline)
                else:
                    self.index.discard(action.deadline)
        live = self.live_deadlines()
        assert self.index == live, (f"timer actions drifted from deadlines(): index lacks {live - self.index}, "
                                    f"holds stale {self.index - live}")

    def check_invariants(self) -> None:
        per_run: dict[str, list[Record]] = {}
        for run_id, e in self.history:
            per_run.setdefault(run_id, []).append(e)
        assert set(self.workflow.runs) <= set(per_run), "a run without history"
        for run_id, events in per_run.items():
            check_run_history(run_id, events, self.workflow)
        running = [r.run_id for r in self.workflow.runs.values() if r.open]
        assert len(running) <= 1, f"{len(running)} runs are RUNNING: {running}"
        current = self.workflow.current
        if running:
            assert current is not None and current.run_id == running[0] and current.status == "RUNNING"
        if current is not None and current.run_id in self.workflow.runs:
            assert current.status == self.workflow.runs[current.run_id].status
        for run in self.workflow.runs.values():
            # Every admitted update reaches the workflow: a task carries it or is coming; a closed run holds none.
            assert run.open or not run.admitted_updates, f"closed run {run.run_id} still holds admitted updates"
            if run.open and run.admitted_updates and run.workflow_task is None:
                # The first task of a run started with a backoff (cron, retry) comes from its deadline, even when
                # the clock is already past it and the deadline fires after others due in the same catch-up.
                assert in_first_task_backoff(run), f"run {run.run_id}: admitted updates and no task"
            accepted = [e for r, e in self.history if r == run.run_id
                        and e["event_type"] == ev.WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
            assert len({ev.attributes(e)["update_id"] for e in accepted}) == len(accepted), "an update accepted twice"

    def check_fresh_round_trip(self) -> None:
        """At the end: written events never changed, and the support Harness's own full check passes."""
        fresh = [(r, codec.decode(codec.encode(HISTORY_EVENT, e))[1]) for r, e in self.history]
        assert fresh == self.wire, "an event changed after it was written"
        Harness.check_replay(self)


# -- strategies ----------------------------------------------------------------------------------------------------

payload_maps = st.dictionaries(st.sampled_from(["k1", "k2"]), st.sampled_from([JSON, NULL]), max_size=2)
retry_policies = st.one_of(st.none(), st.fixed_dictionaries({
    "initial_interval_ms": st.sampled_from([100, 1_000, 0]),
    "backoff_coefficient": st.sampled_from([2.0, 1.0, 0.5]),
    "maximum_interval_ms": st.sampled_from([None, 2_000]),
    "maximum_attempts": st.sampled_from([0, 1, 2, 3]),
    "non_retryable_error_types": st.sampled_from([[], ["Bad"]]),
}))
failures = st.fixed_dictionaries({
    "message": st.just("boom"),
    "kind": st.sampled_from(["APPLICATION", "UNSPECIFIED", "CANCELED"]),
    "type": st.sampled_from(["", "Bad"]),
    "non_retryable": st.booleans(),
    "next_retry_delay_ms": st.sampled_from([None, None, 0, 300, 50_000, -1]),
})


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in `n` draws (sampled_from picks evenly; shrinks to False)."""
    return st.sampled_from(range(n)).map(lambda i: i == n - 1)


def weighted(options: list[st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of `options`, a strategy listed twice being twice as likely (`st.one_of` would merge the copies)."""
    return st.sampled_from(options).flatmap(lambda strategy: strategy)


messiness = one_in(4)  # a quarter of the inputs may be implausible


def pick(plausible: list[Any], implausible: list[Any], messy: bool) -> st.SearchStrategy[Any]:
    return st.sampled_from(plausible + implausible if messy else plausible)


@cache
def start_bodies(messy: bool) -> st.SearchStrategy[Record]:
    return st.fixed_dictionaries({
        "workflow_type": pick(["Order"], [""], messy),
        "task_queue": pick(["orders"], [""], messy),
        "execution_timeout_ms": pick([None, None, None, None, 60_000], [0, -1], messy),
        "run_timeout_ms": pick([None, None, None, None, 20_000], [0], messy),
        "task_timeout_ms": pick([0, 0, 2_000, 10_000, 500_000], [-1], messy),
        "id_reuse_policy": st.sampled_from(REUSE),
        "id_conflict_policy": st.sampled_from(CONFLICT),
        "memo": payload_maps,
        "search_attributes": payload_maps,
        "parent": st.sampled_from([None, None, None, PARENT]),  # a child's start, sent by its parent's shard
        "retry_policy": retry_policies,
        "cron_schedule": pick(["", "", "", "* * * * *", "*/2 * * * *"], ["60 * * * *"], messy),
    })


def _wf(name: str, bodies: st.SearchStrategy[Record]) -> st.SearchStrategy[tuple[str, Record]]:
    return bodies.map(lambda body: wf_command(name, body))


def workflow_commands(run: Any, messy: bool) -> st.SearchStrategy[list[tuple[str, Record]]]:
    """A batch of workflow commands for `run`. Plausible: ids it knows or free ones, positive timeouts, a closing
    command only last (limits may still overflow). Messy: also empty, unknown or reused ids, non-positive
    timeouts, a closing command anywhere."""
    if run is None:
        return _workflow_commands((), (), (), messy)
    used = tuple(sorted(a.activity_id for a in run.activities.values()))
    return _workflow_commands(tuple(sorted(run.activities)), used, tuple(sorted(run.timers)), messy)


@cache  # building strategies is costly; the ids they depend on are few
def _workflow_commands(sids: tuple[int, ...], used: tuple[str, ...], timer_ids: tuple[str, ...],
                       messy: bool) -> st.SearchStrategy[list[tuple[str, Record]]]:
    free_activities = [i for i in ("a1", "a2", "a3", "a4", "a5", "a6") if i not in used]
    free_timers = [t for t in ("t1", "t2", "t3", "t4") if t not in timer_ids]
    schedule = _wf("ScheduleActivityTaskCommand", st.fixed_dictionaries({
        "activity_id": pick(free_activities, ["", *sorted(used)], messy),
        "activity_type": pick(["Charge"], [""], messy),
        "schedule_to_close_timeout_ms": pick([None, None, 800, 4_000, 30_000], [0], messy),
        "schedule_to_start_timeout_ms": st.sampled_from([None, None, 300, 2_000]),
        "start_to_close_timeout_ms": pick([1_000, 5_000], [None, -1], messy),
        "heartbeat_timeout_ms": st.sampled_from([None, None, 700]),
        "retry_policy": retry_policies,
    }))
    start_timer = _wf("StartTimerCommand", st.fixed_dictionaries({
        "timer_id": pick(free_timers or ["t5"], ["", *timer_ids], messy),
        "start_to_fire_timeout_ms": pick([1, 500, 2_000, 15_000], [0, -5], messy)}))
    marker = _wf("RecordMarkerCommand", st.fixed_dictionaries({
        "marker_name": pick(["patch:x", "patch:y", "side-effect"], [""], messy)}))
    upsert = _wf("UpsertWorkflowSearchAttributesCommand", st.fixed_dictionaries({"search_attributes": payload_maps}))
    memo = _wf("ModifyWorkflowPropertiesCommand", st.fixed_dictionaries({"upserted_memo": payload_maps}))
    publish = _wf("PublishRecordCommand", st.fixed_dictionaries({
        "topic": pick(["orders.events", "orders.audit"], ["payments", "", "__consumer_offsets"], messy),
        "key": st.sampled_from([None, b"k1"]), "value": st.sampled_from([None, b"{}", b"x" * 40]),
        "headers": st.sampled_from([{}, {"h": b"v"}])}))
    child = _wf("StartChildWorkflowExecutionCommand", st.fixed_dictionaries({
        "namespace": st.sampled_from(["", NS]), "workflow_id": pick(["child-1", "child-2", WF], [""], messy),
        "workflow_type": pick(["Child"], [""], messy),
        "parent_close_policy": st.sampled_from(["UNSPECIFIED", "TERMINATE", "ABANDON", "REQUEST_CANCEL"]),
        "id_reuse_policy": st.sampled_from(REUSE), "retry_policy": retry_policies,
        "cron_schedule": st.sampled_from(["", "", "* * * * *"])}))
    execution = st.fixed_dictionaries({"workflow_id": pick(["other", WF], [""], messy),
                                       "run_id": st.sampled_from(["", "other-run"])})
    signal_external = _wf("SignalExternalWorkflowExecutionCommand", st.fixed_dictionaries({
        "execution": execution, "signal_name": st.just("ping"), "child_workflow_only": st.booleans()}))
    cancel_external = _wf("RequestCancelExternalWorkflowExecutionCommand", st.fixed_dictionaries({
        "execution": execution, "reason": st.just("stop")}))
    kinds = [schedule, schedule, schedule, start_timer, start_timer, start_timer, marker, upsert, memo, child,
             signal_external, cancel_external, publish]
    if sids or messy:  # cancel what is pending (messy: also what is not, or was already asked to cancel)
        kinds += [_wf("RequestCancelActivityTaskCommand", st.fixed_dictionaries({
            "scheduled_event_id": pick(list(sids), [0, 999], messy)}))] * 2
    if timer_ids or messy:
        kinds += [_wf("CancelTimerCommand", st.fixed_dictionaries({
            "timer_id": pick(list(timer_ids), ["nope"], messy)}))] * 2
    closing = st.one_of(
        _wf("CompleteWorkflowExecutionCommand", st.just({"result": [JSON]})),
        _wf("FailWorkflowExecutionCommand", st.fixed_dictionaries({"failure": failures})),
        _wf("CancelWorkflowExecutionCommand", st.just({})),
        _wf("ContinueAsNewWorkflowExecutionCommand", st.fixed_dictionaries({
            "workflow_type": st.sampled_from(["", "Order2"]), "task_queue": st.sampled_from(["", "orders2"]),
            "run_timeout_ms": st.sampled_from([None, 8_000]), "task_timeout_ms": st.sampled_from([None, 3_000]),
            "backoff_start_interval_ms": pick([0, 0, 0, 2_000], [-1], messy),
            "memo": st.one_of(st.none(), payload_maps), "search_attributes": st.one_of(st.none(), payload_maps),
            "retry_policy": retry_policies})))
    if messy:
        return st.lists(weighted([*kinds, closing, closing]), max_size=4)
    last = one_in(10).flatmap(lambda close: closing.map(lambda c: [c]) if close else st.just([]))
    return st.tuples(st.lists(weighted(kinds), min_size=1, max_size=3), last).map(lambda t: t[0] + t[1])


# -- the machine ---------------------------------------------------------------------------------------------------

Target = tuple[str, int, int]  # (run id, scheduled event id, attempt) of a workflow or activity task


class CoreMachine(RuleBasedStateMachine):
    """Abstract operations on one workflow id, interpreted against a checked Harness with a movable clock.

    Few rules, each choosing among weighted variants, so the plausible path (workers answering the task in flight)
    runs deep enough for activities, timers and children to happen, while every implausible input still comes up.
    """

    h: CheckedHarness

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[Target] = []  # every workflow task dispatched
        self.activity_tasks: list[Target] = []  # every activity task dispatched
        self.outbox: list[Record] = []  # commands the core sent to this very workflow, not yet delivered
        self.fired: list[Deadline] = []

    @initialize(archive=st.booleans(), body=start_bodies(messy=False))
    def setup(self, archive: bool, body: Record) -> None:
        """Start a run first: most of what is worth testing happens to a running workflow."""
        self.h = CheckedHarness(replace(CONFIG, archive=archive))
        self.send("StartWorkflowExecution", {**body, "parent": None}, identity="client")

    def teardown(self) -> None:
        if hasattr(self, "h") and not self.h.failed:
            self.h.check_fresh_round_trip()

    # -- helpers -------------------------------------------------------------------------------------------------

    def send(self, name: str, body: Record, **envelope: Any) -> Step:
        step = self.h.send(name, body, **envelope)
        for action in step.actions:
            if isinstance(action, DispatchWorkflowTask):
                self.tasks.append((action.run_id, action.scheduled_event_id, action.attempt))
            elif isinstance(action, DispatchActivityTask):
                self.activity_tasks.append((action.run_id, action.scheduled_event_id, action.attempt))
            elif isinstance(action, SendCommand):
                cmd = action.command
                if (cmd["namespace"], cmd["workflow_id"]) == (NS, WF):
                    self.outbox.append(cmd)
        return step

    def client_envelope(self, data: st.DataObject, start: bool = False) -> Record:
        """A client's envelope; now and then with a request id used before: a retried request (for a start, the
        request that started some earlier run, perhaps long closed or deleted), or one reused by mistake."""
        envelope: Record = {"reply_partition": data.draw(st.sampled_from([0, 0, None])), "identity": "client"}
        if data.draw(one_in(3 if start else 5)):
            starts = [ev.attributes(e)["request_id"] for _, e in self.h.history
                      if e["event_type"] == ev.WORKFLOW_EXECUTION_STARTED] if start else []
            envelope["request_id"] = data.draw(st.sampled_from([*dict.fromkeys(starts), *self.h.request_ids[-8:]]))
        return envelope

    def known_runs(self) -> list[str]:
        return list(dict.fromkeys(r for r, _ in self.h.history))

    def current_id(self) -> str:
        c = self.h.workflow.current
        return c.run_id if c is not None else ""

    def open_run(self) -> Any:
        return next((r for r in self.h.workflow.runs.values() if r.open), None)

    def pick_run_id(self, data: st.DataObject) -> str:
        current = self.current_id()
        return data.draw(st.sampled_from([current, current, "", *self.known_runs(), "no-such-run"]), label="run_id")

    def chain(self, data: st.DataObject) -> str:
        """`first_execution_run_id` of a cancel or terminate: none, or a chain (a parent closing its child)."""
        return data.draw(st.sampled_from(["", "", *self.known_runs()[:2], "other-chain"]))

    def live_task(self) -> Target | None:
        run = self.open_run()
        task = run.workflow_task if run is not None else None
        if task is None or task.retry_at_ms is not None:
            return None
        return run.run_id, task.scheduled_event_id, task.attempt

    def live_activities(self) -> list[Target]:
        run = self.open_run()
        if run is None:
            return []
        return [(run.run_id, sid, a.attempt) for sid, a in sorted(run.activities.items())
                if a.next_attempt_time_ms is None]  # not waiting for a retry: a worker may hold the attempt

    # -- clients -------------------------------------------------------------------------------------------------

    @rule(data=st.data())
    def client(self, data: st.DataObject) -> None:
        """Start (id reuse and conflict policies, retried request ids), signal, signal-with-start, cancel,
        terminate, query, delete, or any of them sent to the wrong shard."""
        kind = data.draw(st.sampled_from(["signal", "signal", "start", "start", "signal_with_start", "query",
                                          "request_cancel", "terminate", "delete", "wrong_shard", "update",
                                          "update", "update_with_start"]))
        update = {"update_id": data.draw(st.sampled_from(["u1", "u2", "u3", "u4", "u5", ""])), "name": "add",
                  "input": [JSON], "first_execution_run_id": self.chain(data)}
        if kind == "update":
            self.send("UpdateWorkflowExecution", update, run_id=self.pick_run_id(data), **self.client_envelope(data))
        elif kind == "update_with_start":
            body = {"start": data.draw(start_bodies(data.draw(messiness))), "update": update}
            self.send("UpdateWithStartWorkflowExecution", body, **self.client_envelope(data, start=True))
        elif kind == "start":
            body = data.draw(start_bodies(data.draw(messiness)))
            self.send("StartWorkflowExecution", body, **self.client_envelope(data, start=True))
        elif kind == "signal_with_start":
            body = {"start": data.draw(start_bodies(data.draw(messiness))), "signal_name": "go",
                    "signal_input": [JSON]}
            self.send("SignalWithStartWorkflowExecution", body, **self.client_envelope(data, start=True))
        elif kind == "signal":
            body = {"signal_name": "go", "input": [JSON], "external": data.draw(st.sampled_from([None, None, ORIGIN]))}
            self.send("SignalWorkflowExecution", body, run_id=self.pick_run_id(data), **self.client_envelope(data))
        elif kind == "request_cancel":
            body = {"reason": "enough", "external": data.draw(st.sampled_from([None, None, ORIGIN])),
                    "first_execution_run_id": self.chain(data)}
            self.send("RequestCancelWorkflowExecution", body, run_id=self.pick_run_id(data),
                      **self.client_envelope(data))
        elif kind == "terminate":
            body = {"reason": "stop", "details": [], "first_execution_run_id": self.chain(data)}
            self.send("TerminateWorkflowExecution", body, run_id=self.pick_run_id(data), **self.client_envelope(data))
        elif kind == "query":
            body = {"query_type": "state", "deadline_ms": self.h.now + 1_000}
            self.send("QueryWorkflow", body, run_id=self.pick_run_id(data), **self.client_envelope(data))
        elif kind == "delete":
            self.send("DeleteWorkflowExecution", {"reason": "gdpr"}, run_id=self.pick_run_id(data),
                      **self.client_envelope(data))
        else:
            name, body = data.draw(st.sampled_from([
                ("SignalWorkflowExecution", {"signal_name": "go"}), ("TerminateWorkflowExecution", {}),
                ("StartWorkflowExecution", {"workflow_type": "T", "task_queue": "q"})]))
            step = self.send(name, body, workflow_id="another-workflow")
            assert step.rejection is not None and step.rejection["code"] == "WRONG_SHARD"

    # -- workflow workers ----------------------------------------------------------------------------------------

    def stale_task(self, data: st.DataObject) -> Target:
        """An answer to an earlier task, or to the one in flight with a wrong attempt, scheduled id or run id."""
        variant = data.draw(st.sampled_from(["old", "attempt", "scheduled", "run", "empty"]))
        live = self.live_task()
        target = live if live is not None and variant != "old" else None
        if target is None:
            target = data.draw(st.sampled_from(self.tasks)) if self.tasks else (self.current_id(), 2, 1)
        run_id, scheduled, attempt = target
        if variant == "attempt":
            attempt += data.draw(st.sampled_from([1, -1]))
        elif variant == "scheduled":
            scheduled += data.draw(st.sampled_from([1, -1, 100]))
        elif variant == "run":
            run_id = data.draw(st.sampled_from([r for r in [*self.known_runs(), "no-such-run"] if r != run_id]))
        elif variant == "empty":
            run_id = ""
        event(f"stale workflow task answer: {variant}")
        return run_id, scheduled, attempt

    @rule(data=st.data())
    def workflow_worker(self, data: st.DataObject) -> None:
        """Complete the task in flight (plausible or messy commands), fail it, or answer a stale task."""
        live = self.live_task()
        kinds = ["complete", "complete", "complete", "complete_messy", "fail", "stale"] if live else ["stale"]
        kind = data.draw(st.sampled_from(kinds))
        target = live if live is not None and kind != "stale" else self.stale_task(data)
        run_id, scheduled, attempt = target
        if kind == "fail" or (kind == "stale" and data.draw(st.booleans())):
            body = {"scheduled_event_id": scheduled, "attempt": attempt, "failure": {"message": "bug"},
                    "cause": data.draw(st.sampled_from(TASK_FAILED_CAUSES)),
                    "started_time_ms": data.draw(reported_starts(self.h.now), label="started_time_ms")}
            self.send("RespondWorkflowTaskFailed", body, run_id=run_id, identity="worker")
            return
        messy = kind == "complete_messy" or (kind == "stale" and data.draw(messiness))
        commands = data.draw(workflow_commands(self.h.workflow.runs.get(run_id), messy), label="commands")
        update_commands, rejections = self.update_answers(data, self.h.workflow.runs.get(run_id), scheduled, messy)
        commands = update_commands + commands  # an SDK accepts first: handlers start before the workflow goes on
        body = {"scheduled_event_id": scheduled, "attempt": attempt, "commands": commands,
                "rejected_updates": rejections,
                "force_create_new_task": data.draw(st.sampled_from([False, False, False, True])),
                "started_time_ms": data.draw(reported_starts(self.h.now), label="started_time_ms")}
        self.send("RespondWorkflowTaskCompleted", body, run_id=run_id, identity="worker")

    def update_answers(self, data: st.DataObject, run: Any, scheduled: int, messy: bool,
                       ) -> tuple[list[tuple[str, Record]], list[Record]]:
        """What an answer says of updates: each one the task carried accepted, rejected or (rarely) not mentioned;
        some in progress completed; messy: ids it never carried, or answered twice."""
        if run is None:
            return [], []
        carried = [u["update_id"] for u in run.admitted_updates if u["delivered_task"] == scheduled]
        in_progress = [u for u, state in sorted(run.updates.items()) if not state.completed_event_id]
        commands: list[tuple[str, Record]] = []
        rejections: list[Record] = []
        for update_id in carried:
            fate = data.draw(st.sampled_from(["accept", "accept", "accept_complete", "reject", "ignore"]))
            event(f"update answer: {fate}")
            if fate.startswith("accept"):
                commands.append(wf_command("AcceptUpdateCommand", {"update_id": update_id}))
                if fate == "accept_complete":
                    commands.append(wf_command("CompleteUpdateCommand", {"update_id": update_id, "result": [JSON]}))
            elif fate == "reject":
                rejections.append({"update_id": update_id, "failure": data.draw(failures)})
        for update_id in in_progress:
            if data.draw(st.booleans()):
                outcome = data.draw(st.sampled_from([{"result": [JSON]}, {"failure": {"message": "no"}}]))
                commands.append(wf_command("CompleteUpdateCommand", {"update_id": update_id, **outcome}))
        if messy and data.draw(st.booleans()):
            bogus = data.draw(st.sampled_from(["u9", *carried, *in_progress]))
            commands.append(wf_command(data.draw(st.sampled_from(["AcceptUpdateCommand", "CompleteUpdateCommand"])),
                                       {"update_id": bogus}))
        return commands, rejections

    # -- activity workers ----------------------------------------------------------------------------------------

    @precondition(lambda self: self.activity_tasks)
    @rule(data=st.data())
    def activity_worker(self, data: st.DataObject) -> None:
        """Report on a pending activity attempt (started, heartbeat, completed, failed, canceled), or on a stale
        one: an old attempt, a mangled id or attempt, another or no run."""
        live = self.live_activities()
        variant = data.draw(st.sampled_from(["live", "live", "live", "live", "old", "attempt", "scheduled", "run",
                                             "empty"]))
        run_id, sid, attempt = data.draw(st.sampled_from(live if live and variant != "old" else self.activity_tasks))
        if variant == "attempt":
            attempt += data.draw(st.sampled_from([1, -1]))
        elif variant == "scheduled":
            sid += 1
        elif variant == "run":
            run_id = "no-such-run"
        elif variant == "empty":
            run_id = ""
        self.report(data, (run_id, sid, attempt), variant, ["started", "heartbeat", "completed", "failed", "canceled"])

    def report(self, data: st.DataObject, target: Target, variant: str, kinds: list[str]) -> None:
        run_id, sid, attempt = target
        kind = data.draw(st.sampled_from(kinds))
        event(f"activity report: {kind} ({variant})")
        base = {"scheduled_event_id": sid, "attempt": attempt}
        envelope = {"run_id": run_id, "identity": data.draw(st.sampled_from(["w1", "w1", "w2"]))}
        if kind == "started":
            self.send("RecordActivityTaskStarted", base, **envelope)
        elif kind == "heartbeat":
            self.send("RecordActivityTaskHeartbeat", {**base, "details": [JSON]}, **envelope)
        elif kind == "completed":
            self.send("RespondActivityTaskCompleted", {**base, "result": [JSON]}, **envelope)
        elif kind == "failed":
            self.send("RespondActivityTaskFailed", {**base, "failure": data.draw(failures)}, **envelope)
        else:
            self.send("RespondActivityTaskCanceled", base, **envelope)

    # -- time ----------------------------------------------------------------------------------------------------

    def due(self) -> list[Deadline]:
        return sorted((d for d in self.h.live_deadlines() if d.fire_at_ms <= self.h.now),
                      key=lambda d: (d.fire_at_ms, d.kind, d.run_id, d.timer_id, d.scheduled_event_id, d.attempt))

    def fire(self, deadline: Deadline) -> Step:
        name, body = fire_timer_body(deadline)
        step = self.send(name.removeprefix(C), body, run_id=deadline.run_id, request_id=f"fire-{self.h.counter}",
                         reply_partition=None, identity="ostinato")
        self.fired.append(deadline)
        run = self.h.workflow.runs.get(deadline.run_id)
        if run is not None and deadline in deadlines(run, self.h.config):
            # The shell fires each deadline once; only a run waiting for its archive may keep its retention.
            assert deadline.kind == "RETENTION" and self.h.config.archive and not run.archive_uri, (
                f"deadline {deadline} fired and is still pending: the run would stall")
        return step

    @rule(data=st.data())
    def clock(self, data: st.DataObject) -> None:
        """Move the clock and fire every deadline due (each once, earliest first); or fire just one of them, so
        commands interleave with simultaneous deadlines; or fire one that is no longer pending, which must do
        nothing at all."""
        kind = data.draw(st.sampled_from(["advance", "advance", "advance", "fire_one", "stale"]))
        if kind == "stale":
            live, rid, now = self.h.live_deadlines(), self.current_id() or self.known_runs()[0], self.h.now
            bogus = [Deadline(now, "USER_TIMER", rid, "nope"), Deadline(now, "ACTIVITY_RETRY", rid, "", 999, 2),
                     Deadline(now, "WORKFLOW_TASK_TIMEOUT", rid, "", 2, 7), Deadline(now, "RETENTION", rid)]
            candidates = [d for d in [*self.fired[-8:], *bogus] if d not in live]
            before = self.h.snapshot()
            step = self.fire(data.draw(st.sampled_from(candidates)))
            assert not step.events and self.h.snapshot() == before, "a stale deadline changed something"
            return
        self.h.now += data.draw(st.sampled_from([0, 1, 300, 300, 700, 1_000, 1_000, 2_500, 5_000, 10_000, 30_000,
                                                 120_000]))
        if kind == "fire_one":
            due = self.due()
            if due:
                self.fire(due[data.draw(st.integers(0, len(due) - 1))])
            return
        self.fire_all_due()

    def fire_all_due(self) -> None:
        fired: set[Deadline] = set()
        for _ in range(100):
            pending = [d for d in self.due() if d not in fired]
            if not pending:
                return
            fired.add(pending[0])
            self.fire(pending[0])
        raise AssertionError("deadlines keep coming due at the same instant")

    # -- the plausible next thing ---------------------------------------------------------------------------------

    @rule(data=st.data())
    def progress(self, data: st.DataObject) -> None:
        """What would most plausibly happen next to the running workflow: its worker completes the task in flight
        with plausible commands, an activity worker reports, time moves to the next deadline, a child starts or
        closes, an external request is answered, a client signals (or starts a run when none is running).
        Without this, runs rarely get far."""
        run = self.open_run()
        live_task, activities = self.live_task(), self.live_activities()
        children = [(run.run_id, c) for c in run.children.values()] if run is not None else []
        requests = [(run.run_id, r) for r in run.external_requests.values()] if run is not None else []
        options = ["task"] * 3 * (live_task is not None) + ["activity"] * 2 * bool(activities)
        options += ["child"] * bool(children) + ["external"] * bool(requests) + ["next_deadline"]
        options += ["signal"] if run is not None else ["start", "start"]
        kind = data.draw(st.sampled_from(options))
        if kind == "start":
            self.send("StartWorkflowExecution", data.draw(start_bodies(messy=False)), identity="client")
        elif kind == "task":
            assert live_task is not None
            run_id, scheduled, attempt = live_task
            commands = data.draw(workflow_commands(self.h.workflow.runs[run_id], messy=False), label="commands")
            body = {"scheduled_event_id": scheduled, "attempt": attempt, "commands": commands}
            self.send("RespondWorkflowTaskCompleted", body, run_id=run_id, identity="worker")
        elif kind == "activity":
            self.report(data, data.draw(st.sampled_from(activities)), "live",
                        ["completed", "completed", "started", "heartbeat", "failed", "failed", "canceled"])
        elif kind == "child":
            self.child_notification(data, children, plausible=True)
        elif kind == "external":
            self.external_result(data, requests, plausible=True)
        elif kind == "next_deadline":
            upcoming = [d.fire_at_ms for d in self.h.live_deadlines()]
            if upcoming:
                self.h.now = max(self.h.now, min(upcoming))
            self.fire_all_due()
        else:
            self.send("SignalWorkflowExecution", {"signal_name": "go"}, identity="client")

    @rule(data=st.data())
    def progress_again(self, data: st.DataObject) -> None:
        """(The same again: the plausible next thing is what usually happens.)"""
        self.progress(data)

    # -- other shards and the archiver ---------------------------------------------------------------------------

    @rule(data=st.data())
    def other_shard(self, data: st.DataObject) -> None:
        """What other shards and the archiver send: child started/start failed/closed (any status), external
        request results, the commands this workflow sent to itself (perhaps delivered twice), archival."""
        run = self.open_run()
        children = [(run.run_id, c) for c in run.children.values()] if run is not None else []
        requests = [(run.run_id, r) for r in run.external_requests.values()] if run is not None else []
        kinds = ["child"] * (1 + 3 * bool(children)) + ["external"] * (1 + 3 * bool(requests))
        kinds += ["to_self"] * (3 * bool(self.outbox)) + ["archival"]
        kind = data.draw(st.sampled_from(kinds))
        if kind == "child":
            self.child_notification(data, children)
        elif kind == "external":
            self.external_result(data, requests)
        elif kind == "to_self":
            cmd = data.draw(st.sampled_from(self.outbox))
            if not data.draw(one_in(4)):  # else: Kafka delivers it again later
                self.outbox.remove(cmd)
            name, body = cmd["body"]
            self.send(name.removeprefix(C), body, run_id=cmd["run_id"], request_id=cmd["request_id"],
                      identity=cmd["identity"], reply_partition=cmd["reply_partition"])
        else:
            closed = [r.run_id for r in self.h.workflow.runs.values() if not r.open]
            run_id = data.draw(st.sampled_from(closed)) if closed and data.draw(st.booleans()) else \
                self.pick_run_id(data)
            self.send("ArchivalCompleted", {"uri": f"mem://archive/{run_id}", "event_count": 1}, run_id=run_id,
                      reply_partition=None, identity="archiver")

    def child_notification(self, data: st.DataObject, children: list[tuple[str, Any]], plausible: bool = False) -> None:
        """Plausible: the next thing for a pending child (started, or else closed in one of the five ways).
        Otherwise anything: for children that already started or never were, any status, any retry state."""
        kinds, statuses = ["started", "start_failed", "closed"], STATUSES
        if children and (plausible or not data.draw(one_in(5))):
            run_id, child = data.draw(st.sampled_from(children))
            initiated, child_id = child.initiated_event_id, child.workflow_id
            if plausible:
                kinds, statuses = (["closed"], CHILD_CLOSES) if child.started_event_id else (kinds[:2], statuses)
        else:
            run_id, initiated, child_id = self.pick_run_id(data), data.draw(st.integers(0, 40)), "child-1"
        kind = data.draw(st.sampled_from(kinds))
        execution = {"workflow_id": child_id, "run_id": f"{child_id}-run"}
        if kind == "started":
            body: Record = {"initiated_event_id": initiated, "child": execution, "workflow_type": "Child"}
            name = "ChildWorkflowExecutionStartedNotification"
        elif kind == "start_failed":
            body = {"initiated_event_id": initiated, "workflow_id": child_id, "workflow_type": "Child",
                    "cause": data.draw(st.sampled_from(["UNSPECIFIED", "WORKFLOW_ALREADY_EXISTS",
                                                        "NAMESPACE_NOT_FOUND"]))}
            name = "StartChildWorkflowExecutionFailedNotification"
        else:
            status = data.draw(st.sampled_from(statuses))
            body = {"initiated_event_id": initiated, "child": execution, "workflow_type": "Child", "status": status,
                    "result": [JSON] if status == "COMPLETED" else [],
                    "failure": {"message": "child failed"} if status == "FAILED" else None,
                    "retry_state": data.draw(st.sampled_from(RETRY_STATES))}
            name = "ChildWorkflowExecutionClosedNotification"
        event(f"child notification: {kind}")
        self.send(name, body, run_id=run_id, reply_partition=None, identity="ostinato")

    def external_result(self, data: st.DataObject, requests: list[tuple[str, Any]], plausible: bool = False) -> None:
        if requests and (plausible or not data.draw(one_in(5))):
            run_id, request = data.draw(st.sampled_from(requests))
            initiated, kind = request.initiated_event_id, request.kind
        else:
            run_id, initiated = self.pick_run_id(data), data.draw(st.integers(0, 40))
            kind = data.draw(st.sampled_from(["SIGNAL", "CANCEL", "UNSPECIFIED"]))
        causes = [None, None, "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND"]
        causes += [] if plausible else ["UNSPECIFIED", "NAMESPACE_NOT_FOUND"]
        body = {"initiated_event_id": initiated, "kind": kind, "target": {"workflow_id": "other", "run_id": ""},
                "failed_cause": data.draw(st.sampled_from(causes))}
        self.send("ExternalRequestResultNotification", body, run_id=run_id, reply_partition=None, identity="ostinato")


CoreMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
TestCoreProperty = CoreMachine.TestCase
