"""Every applier, one table: the state before, the event, the state after (and the moves a lifecycle forbids)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import pytest

from ostinato.schemas import codec
from ostinato.streams import events as ev
from ostinato.streams.appliers import APPLIERS, ReplayError, apply
from ostinato.streams.lifecycle import IllegalTransition
from ostinato.streams.model import (
    ActivityState,
    ChildState,
    ExternalRequestState,
    RunState,
    TimerState,
    UpdateState,
    Workflow,
    WorkflowTaskState,
    decode_current,
    decode_run,
    encode_current,
    encode_run,
)

Record = dict[str, Any]
RUN = "run-1"
NULL = {"metadata": {"encoding": b"binary/null"}, "data": b""}
JSON = {"metadata": {"encoding": b"json/plain"}, "data": b"1"}


def running(**changes: Any) -> Workflow:
    wf = Workflow("default", "w")
    apply(wf, RUN, ev.make_event(ev.WORKFLOW_EXECUTION_STARTED, 1, 100, {
        "workflow_type": "T", "task_queue": "q", "request_id": "start-1", "run_timeout_ms": 5000,
        "memo": {"m": JSON}, "search_attributes": {"s": JSON}}, 1))
    run = wf.runs[RUN]
    for key, value in changes.items():
        setattr(run, key, value)
    return wf


def _task(started: bool) -> WorkflowTaskState:
    return WorkflowTaskState(2, 3 if started else 0, 1, "q", 100, 100 if started else 0, 10_000)


def _activity(cancel: bool = False) -> dict[int, ActivityState]:
    return {5: ActivityState(5, "a", "A", "q", 100, None, None, 1000, None, None, cancel_requested=cancel)}


def _child(started: bool) -> dict[int, ChildState]:
    return {5: ChildState(5, "default", "c", "C", "TERMINATE", run_id="cr" if started else "",
                          started_event_id=6 if started else 0)}


def _external(kind: str) -> dict[int, ExternalRequestState]:
    return {5: ExternalRequestState(5, kind, "default", "x", "")}


EXECUTION = {"workflow_id": "c", "run_id": "cr"}

# (id, state changes before, event type, attributes, check of the run after)
_SCHEDULE_STATE = {"note": "", "paused": False, "limited_actions": False, "remaining_actions": 0}
_SCHEDULE = {"spec": {"calendars": [], "intervals": [{"every_ms": 60_000, "offset_ms": 0}], "cron_expressions": [],
                      "skip": [], "start_at_ms": None, "end_at_ms": None, "jitter_ms": 0, "time_zone_name": ""},
             "action": {"workflow_id": "a", "workflow_type": "A", "task_queue": "q", "input": [],
                        "execution_timeout_ms": None, "run_timeout_ms": None, "task_timeout_ms": 10_000,
                        "retry_policy": None, "memo": {}, "search_attributes": {}, "header": {}},
             "policy": {"overlap": "SKIP", "catchup_window_ms": 1000, "pause_on_failure": False},
             "state": _SCHEDULE_STATE}
_PROGRESS = {"last_processed_ms": 100, "num_actions": 0, "num_actions_missed_catchup_window": 0,
             "num_actions_skipped_overlap": 0, "recent_actions": [], "running": [], "buffered": []}
_SCHEDULE_INFO = {"schedule_id": "s", "definition": _SCHEDULE, "progress": _PROGRESS, "created_time_ms": 100,
                  "updated_time_ms": None}

CASES: list[tuple[str, Record, str, Record, Callable[[RunState, Workflow], bool]]] = [
    ("schedule created", {}, ev.SCHEDULE_CREATED, {"schedule_id": "s", "schedule": _SCHEDULE},
     lambda r, w: r.schedule is not None and r.schedule["progress"]["last_processed_ms"] == 200),
    ("schedule paused", {"schedule": _SCHEDULE_INFO}, ev.SCHEDULE_UPDATED,
     {"schedule": None, "state": {**_SCHEDULE_STATE, "paused": True, "note": "n"}},
     lambda r, w: r.schedule is not None and r.schedule["definition"]["state"]["paused"]
     and r.schedule["updated_time_ms"] == 200 and r.schedule["progress"]["last_processed_ms"] == 200),
    ("schedule progressed", {"schedule": _SCHEDULE_INFO}, ev.SCHEDULE_PROGRESSED,
     {"state": _SCHEDULE_STATE, "progress": {**_PROGRESS, "num_actions": 1}},
     lambda r, w: r.schedule is not None and r.schedule["progress"]["num_actions"] == 1),
    ("signaled", {}, ev.WORKFLOW_EXECUTION_SIGNALED, {"signal_name": "s", "request_id": "sig-1"},
     lambda r, w: r.signal_count == 1 and r.recent_request_ids[-1] == "sig-1"),
    ("signaled while a task runs", {"workflow_task": _task(True)}, ev.WORKFLOW_EXECUTION_SIGNALED,
     {"signal_name": "s"}, lambda r, w: r.workflow_task is not None and r.workflow_task.new_events_while_started),
    ("cancel requested", {}, ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED, {"reason": "why"},
     lambda r, w: r.cancel_requested and r.cancel_reason == "why"),
    ("completed", {"timers": {"t": TimerState("t", 4, 9)}}, ev.WORKFLOW_EXECUTION_COMPLETED, {},
     lambda r, w: r.status == "COMPLETED" and not r.timers and w.current.status == "COMPLETED"),
    ("failed", {}, ev.WORKFLOW_EXECUTION_FAILED, {"failure": {"message": "x"}}, lambda r, w: r.status == "FAILED"),
    ("timed out", {}, ev.WORKFLOW_EXECUTION_TIMED_OUT, {}, lambda r, w: r.status == "TIMED_OUT"),
    ("canceled", {}, ev.WORKFLOW_EXECUTION_CANCELED, {}, lambda r, w: r.status == "CANCELED"),
    ("terminated", {"activities": _activity()}, ev.WORKFLOW_EXECUTION_TERMINATED, {"request_id": "t-1"},
     lambda r, w: r.status == "TERMINATED" and not r.activities and "t-1" in r.recent_request_ids),
    ("continued as new", {}, ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
     {"new_execution_run_id": "r2", "workflow_type": "T", "task_queue": "q"},
     lambda r, w: r.status == "CONTINUED_AS_NEW"),
    ("task scheduled", {}, ev.WORKFLOW_TASK_SCHEDULED, {"task_queue": "q", "start_to_close_timeout_ms": 7},
     lambda r, w: r.workflow_task is not None and r.workflow_task.scheduled_event_id == 2
     and r.workflow_task.timeout_ms == 7),
    ("task started", {"workflow_task": _task(False)}, ev.WORKFLOW_TASK_STARTED, {"scheduled_event_id": 2},
     lambda r, w: r.workflow_task is not None and r.workflow_task.started_event_id == 2),
    ("task completed", {"workflow_task": _task(True)}, ev.WORKFLOW_TASK_COMPLETED,
     {"scheduled_event_id": 2, "started_event_id": 3},
     lambda r, w: r.workflow_task is None and r.last_workflow_task_started_event_id == 3),
    ("task failed", {"workflow_task": _task(True)}, ev.WORKFLOW_TASK_FAILED,
     {"scheduled_event_id": 2, "started_event_id": 3}, lambda r, w: r.workflow_task is None),
    ("task timed out", {"workflow_task": _task(True)}, ev.WORKFLOW_TASK_TIMED_OUT, {"scheduled_event_id": 2},
     lambda r, w: r.workflow_task is None),
    ("activity scheduled", {}, ev.ACTIVITY_TASK_SCHEDULED,
     {"activity_id": "a", "activity_type": "A", "task_queue": "q", "start_to_close_timeout_ms": 10},
     lambda r, w: r.activities[2].activity_id == "a" and r.activities[2].start_to_close_timeout_ms == 10),
    ("activity started (records only)", {"activities": _activity()}, ev.ACTIVITY_TASK_STARTED,
     {"scheduled_event_id": 5}, lambda r, w: 5 in r.activities),
    ("activity completed", {"activities": _activity()}, ev.ACTIVITY_TASK_COMPLETED,
     {"scheduled_event_id": 5, "started_event_id": 0}, lambda r, w: not r.activities),
    ("activity failed", {"activities": _activity()}, ev.ACTIVITY_TASK_FAILED,
     {"scheduled_event_id": 5, "started_event_id": 0, "failure": {"message": "x"}}, lambda r, w: not r.activities),
    ("activity timed out", {"activities": _activity()}, ev.ACTIVITY_TASK_TIMED_OUT,
     {"scheduled_event_id": 5, "failure": {"message": "x"}}, lambda r, w: not r.activities),
    ("activity cancel requested", {"activities": _activity()}, ev.ACTIVITY_TASK_CANCEL_REQUESTED,
     {"scheduled_event_id": 5}, lambda r, w: r.activities[5].cancel_requested
     and r.activities[5].cancel_requested_event_id == 2),
    ("activity canceled", {"activities": _activity(cancel=True)}, ev.ACTIVITY_TASK_CANCELED,
     {"scheduled_event_id": 5}, lambda r, w: not r.activities),
    ("timer started", {}, ev.TIMER_STARTED, {"timer_id": "t", "start_to_fire_timeout_ms": 50},
     lambda r, w: r.timers["t"].fire_at_ms == 250 and r.timers["t"].started_event_id == 2),
    ("timer fired", {"timers": {"t": TimerState("t", 1, 9)}}, ev.TIMER_FIRED,
     {"timer_id": "t", "started_event_id": 1}, lambda r, w: not r.timers),
    ("timer canceled", {"timers": {"t": TimerState("t", 1, 9)}}, ev.TIMER_CANCELED,
     {"timer_id": "t", "started_event_id": 1}, lambda r, w: not r.timers),
    ("patch marker", {}, ev.MARKER_RECORDED, {"marker_name": "patch:v2"}, lambda r, w: r.patches == ["v2"]),
    ("other marker", {}, ev.MARKER_RECORDED, {"marker_name": "side-effect"}, lambda r, w: r.patches == []),
    ("search attributes", {}, ev.UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, {"search_attributes": {"s": NULL, "n": JSON}},
     lambda r, w: set(r.search_attributes) == {"n"}),
    ("memo", {}, ev.WORKFLOW_PROPERTIES_MODIFIED, {"upserted_memo": {"m": NULL, "k": JSON}},
     lambda r, w: set(r.memo) == {"k"}),
    ("update accepted", {"admitted_updates": [{"update_id": "u1", "delivered_task": 3}]},
     ev.WORKFLOW_EXECUTION_UPDATE_ACCEPTED, {"update_id": "u1", "name": "add"},
     lambda r, w: r.updates["u1"] == UpdateState("u1", 2) and not r.admitted_updates),
    ("update completed", {"updates": {"u1": UpdateState("u1", 1)}}, ev.WORKFLOW_EXECUTION_UPDATE_COMPLETED,
     {"update_id": "u1", "accepted_event_id": 1}, lambda r, w: r.updates["u1"].completed_event_id == 2),
    ("record published", {}, ev.RECORD_PUBLISHED, {"topic": "orders.events", "key": b"k", "value": b"{}"},
     lambda r, w: not r.activities and not r.timers and r.status == "RUNNING"),
    ("child initiated", {}, ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED,
     {"namespace": "default", "workflow_id": "c", "workflow_type": "C", "task_queue": "q",
      "parent_close_policy": "ABANDON"},
     lambda r, w: r.children[2].parent_close_policy == "ABANDON" and not r.children[2].started_event_id),
    ("child start failed", {"children": _child(False)}, ev.START_CHILD_WORKFLOW_EXECUTION_FAILED,
     {"workflow_id": "c", "workflow_type": "C", "initiated_event_id": 5}, lambda r, w: not r.children),
    ("child started", {"children": _child(False)}, ev.CHILD_WORKFLOW_EXECUTION_STARTED,
     {"initiated_event_id": 5, "workflow_execution": EXECUTION, "workflow_type": "C"},
     lambda r, w: r.children[5].run_id == "cr" and r.children[5].started_event_id == 2),
    *[(f"child {t.lower()}", {"children": _child(True)}, t,
       {"initiated_event_id": 5, "started_event_id": 6, "workflow_execution": EXECUTION, "workflow_type": "C",
        "failure": {"message": "x"}}, lambda r, w: not r.children)
      for t in (ev.CHILD_WORKFLOW_EXECUTION_COMPLETED, ev.CHILD_WORKFLOW_EXECUTION_FAILED,
                ev.CHILD_WORKFLOW_EXECUTION_CANCELED, ev.CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
                ev.CHILD_WORKFLOW_EXECUTION_TERMINATED)],
    ("signal external initiated", {}, ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
     {"workflow_execution": {"workflow_id": "x", "run_id": ""}, "signal_name": "s"},
     lambda r, w: r.external_requests[2].kind == "SIGNAL"),
    ("cancel external initiated", {}, ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
     {"workflow_execution": {"workflow_id": "x", "run_id": ""}}, lambda r, w: r.external_requests[2].kind == "CANCEL"),
    *[(f"external {t.lower()}", {"external_requests": _external(kind)}, t,
       {"initiated_event_id": 5, "workflow_execution": {"workflow_id": "x", "run_id": ""}},
       lambda r, w: not r.external_requests)
      for t, kind in ((ev.EXTERNAL_WORKFLOW_EXECUTION_SIGNALED, "SIGNAL"),
                      (ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED, "SIGNAL"),
                      (ev.EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED, "CANCEL"),
                      (ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED, "CANCEL"))],
]


def test_every_event_type_has_a_case() -> None:
    assert {c[2] for c in CASES} | {ev.WORKFLOW_EXECUTION_STARTED} == set(ev.event_types())
    assert {t for t, _ in APPLIERS} == set(ev.event_types())


def test_started_creates_the_run_and_points_at_it() -> None:
    wf = running()
    run = wf.runs[RUN]
    assert (run.status, run.start_time_ms, run.run_expiration_time_ms, run.first_execution_run_id) == (
        "RUNNING", 100, 5100, RUN)
    assert wf.current is not None and (wf.current.run_id, wf.current.start_request_id) == (RUN, "start-1")
    assert run.next_event_id == 2 and run.recent_request_ids == ["start-1"]
    assert decode_current(encode_current(wf.current)) == wf.current  # the pointer record the state topic carries


@pytest.mark.parametrize(("before", "event_type", "attrs", "check"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_applier(before: Record, event_type: str, attrs: Record, check: Callable[[RunState, Workflow], bool]) -> None:
    wf = running(**before)
    apply(wf, RUN, ev.make_event(event_type, 2, 200, attrs, 1))
    run = wf.runs[RUN]
    assert check(run, wf)
    assert run.next_event_id == 3
    assert decode_run(encode_run(run)) == run  # whatever an applier builds, the state topic can carry


@pytest.mark.parametrize(("before", "event_type", "attrs"), [
    ({"status": "COMPLETED"}, ev.WORKFLOW_EXECUTION_FAILED, {"failure": {"message": "x"}}),
    ({"workflow_task": _task(False)}, ev.WORKFLOW_TASK_SCHEDULED, {"task_queue": "q", "start_to_close_timeout_ms": 1}),
    ({}, ev.WORKFLOW_TASK_STARTED, {"scheduled_event_id": 2}),
    ({}, ev.WORKFLOW_TASK_COMPLETED, {"scheduled_event_id": 2, "started_event_id": 3}),
    ({}, ev.ACTIVITY_TASK_COMPLETED, {"scheduled_event_id": 5, "started_event_id": 0}),
    ({}, ev.ACTIVITY_TASK_CANCEL_REQUESTED, {"scheduled_event_id": 5}),
    ({"timers": {"t": TimerState("t", 1, 9)}}, ev.TIMER_STARTED, {"timer_id": "t", "start_to_fire_timeout_ms": 1}),
    ({}, ev.TIMER_FIRED, {"timer_id": "t", "started_event_id": 1}),
    ({}, ev.CHILD_WORKFLOW_EXECUTION_STARTED,
     {"initiated_event_id": 5, "workflow_execution": EXECUTION, "workflow_type": "C"}),
    ({"children": _child(True)}, ev.CHILD_WORKFLOW_EXECUTION_STARTED,
     {"initiated_event_id": 5, "workflow_execution": EXECUTION, "workflow_type": "C"}),
    ({}, ev.EXTERNAL_WORKFLOW_EXECUTION_SIGNALED,
     {"initiated_event_id": 5, "workflow_execution": {"workflow_id": "x", "run_id": ""}}),
], ids=["closed run closes again", "second task", "start without schedule", "complete without task",
        "unknown activity", "cancel unknown activity", "timer id reused", "unknown timer fires", "unknown child",
        "child started twice", "unknown external request"])
def test_illegal_moves_raise_with_both_states(before: Record, event_type: str, attrs: Record) -> None:
    wf = running(**before)
    with pytest.raises(IllegalTransition):
        apply(wf, RUN, ev.make_event(event_type, 2, 200, attrs, 1))


def test_replay_refuses_gaps_and_unknown_versions() -> None:
    wf = running()
    with pytest.raises(ReplayError, match="does not follow event 1"):
        apply(wf, RUN, ev.make_event(ev.WORKFLOW_EXECUTION_SIGNALED, 5, 200, {"signal_name": "s"}, 1))
    with pytest.raises(ReplayError, match="no applier for WORKFLOW_EXECUTION_SIGNALED version 99"):
        apply(wf, RUN, ev.make_event(ev.WORKFLOW_EXECUTION_SIGNALED, 2, 200, {"signal_name": "s"}, 99))
    with pytest.raises(ReplayError, match="does not follow a started event"):
        apply(Workflow("default", "w"), RUN, ev.make_event(ev.WORKFLOW_EXECUTION_SIGNALED, 1, 1, {}, 1))


@pytest.mark.parametrize(("cls", "avro"), [
    (RunState, "ostinato.state.MutableState"), (WorkflowTaskState, "ostinato.state.WorkflowTaskState"),
    (ActivityState, "ostinato.state.ActivityState"), (TimerState, "ostinato.state.TimerState"),
    (ChildState, "ostinato.state.ChildState"), (ExternalRequestState, "ostinato.state.ExternalRequestState"),
])
def test_the_state_model_and_its_schema_have_the_same_fields(cls: type, avro: str) -> None:
    canonical = json.loads(codec.registry().schema("ostinato.state.MutableState").canonical)
    found: dict[str, Any] = {}

    def collect(s: Any) -> None:
        if isinstance(s, list):
            for b in s:
                collect(b)
        elif isinstance(s, dict):
            if s.get("type") == "record":
                found[s["name"]] = s
                for f in s["fields"]:
                    collect(f["type"])
            elif s.get("type") == "array":
                collect(s["items"])

    collect(canonical)
    assert [f.name for f in fields(cls)] == [f["name"] for f in found[avro]["fields"]]
