"""The UI's presentation helpers, on the API's JSON shapes (no browser or broker needed)."""

from __future__ import annotations

import base64
import json
from typing import Any

from ostinato.services.frontend.ui import present


def _payload(value: Any, encoding: bytes = b"json/plain") -> dict[str, Any]:
    return {"metadata": {"encoding": base64.b64encode(encoding).decode()},
            "data": base64.b64encode(json.dumps(value).encode()).decode()}


def test_json_payloads_show_their_values_and_others_only_their_size() -> None:
    assert present.payload_values([_payload({"a": 1})]) == {"a": 1}
    assert present.payload_values([_payload(1), _payload("x")]) == [1, "x"]
    assert present.payload_value(_payload("secret", b"binary/encrypted")) == "<8 bytes, encoding binary/encrypted>"


def test_a_failure_chain_runs_from_the_outermost_failure_to_its_root_cause() -> None:
    failure = {"message": "activity failed", "cause": {"message": "card declined", "cause": None}}
    assert [f["message"] for f in present.failure_chain(failure)] == ["activity failed", "card declined"]
    assert present.failure_chain(None) == []


def test_a_status_chip_narrows_the_query_and_keeps_its_order_by_last() -> None:
    assert present.status_query("", "Running") == "ExecutionStatus = 'Running'"
    assert present.status_query("WorkflowType = 'a' OR TaskQueue = 'q' order by StartTime", "Failed") == (
        "(WorkflowType = 'a' OR TaskQueue = 'q') AND ExecutionStatus = 'Failed' order by StartTime")
    assert present.without_order("WorkflowType = 'a' ORDER BY StartTime DESC") == "WorkflowType = 'a'"
    assert present.status_query("x = 1", "") == "x = 1"


def test_durations_read_as_people_say_them() -> None:
    assert [present.duration(ms) for ms in (850, 12_300, 245_000, 3 * 3_600_000 + 120_000, 52 * 3_600_000)] == [
        "850ms", "12.3s", "4m05s", "3h02m", "2d04h"]


def test_the_timeline_spans_each_activity_and_timer_from_scheduled_to_outcome() -> None:
    events = [
        {"event_id": 5, "event_time_ms": 1000, "event_type": "ACTIVITY_TASK_SCHEDULED",
         "attributes": {"activity_type": "charge"}},
        {"event_id": 6, "event_time_ms": 1100, "event_type": "TIMER_STARTED", "attributes": {"timer_id": "t"}},
        {"event_id": 7, "event_time_ms": 2000, "event_type": "ACTIVITY_TASK_COMPLETED",
         "attributes": {"scheduled_event_id": 5}},
    ]
    bars = present.timeline(events, now_ms=3000)
    assert [(b.label, b.outcome) for b in bars] == [("charge", "completed"), ("t", "open")]
    assert bars[0].left == 0 and bars[0].width == 50  # 1000 of the 2000 ms the page covers, up to now
    assert bars[1].left == 5


def test_an_event_summary_is_one_line_of_its_telling_attributes() -> None:
    event = {"event_id": 1, "event_time_ms": 1, "event_type": "WORKFLOW_EXECUTION_SIGNALED",
             "attributes": {"@type": "x", "signal_name": "deliver", "input": [_payload("dock 7")], "identity": "w"}}
    assert present.event_summary(event) == 'signal_name=deliver  input=["dock 7"]'


def _child_event(event_id: int, event_type: str, **attrs: Any) -> dict[str, Any]:
    return {"event_id": event_id, "event_time_ms": 1000 + event_id, "event_type": event_type, "attributes": attrs}


def test_children_come_from_the_history_each_with_its_latest_status() -> None:
    run = {"workflow_id": "kid-1", "run_id": "r1"}
    events = [
        _child_event(5, "START_CHILD_WORKFLOW_EXECUTION_INITIATED", namespace="default", workflow_id="kid-1",
                     workflow_type="Chore"),
        _child_event(6, "START_CHILD_WORKFLOW_EXECUTION_INITIATED", namespace="default", workflow_id="kid-2",
                     workflow_type="Chore"),
        _child_event(7, "CHILD_WORKFLOW_EXECUTION_STARTED", namespace="default", initiated_event_id=5,
                     workflow_execution=run, workflow_type="Chore"),
        _child_event(8, "START_CHILD_WORKFLOW_EXECUTION_FAILED", namespace="default", workflow_id="kid-2",
                     workflow_type="Chore", cause="WORKFLOW_ALREADY_EXISTS", initiated_event_id=6),
        _child_event(9, "CHILD_WORKFLOW_EXECUTION_FAILED", namespace="default", initiated_event_id=5,
                     workflow_execution=run, workflow_type="Chore", failure={"type": "Broken", "message": "iron"}),
        # a child asked for on an earlier page: listed from its outcome alone
        _child_event(12, "CHILD_WORKFLOW_EXECUTION_COMPLETED", namespace="other", initiated_event_id=3,
                     workflow_execution={"workflow_id": "kid-0", "run_id": "r0"}, workflow_type="Chore"),
    ]
    kids = present.children(events)
    assert [(c.workflow_id, c.status, c.run_id, c.detail) for c in kids] == [
        ("kid-0", "COMPLETED", "r0", ""), ("kid-1", "FAILED", "r1", "Broken: iron"),
        ("kid-2", "START_FAILED", "", "WORKFLOW_ALREADY_EXISTS")]
    assert kids[1].initiated_time_ms == 1005 and kids[1].closed_time_ms == 1009
    assert present.children(events[:3])[0].status == "RUNNING" and present.children(events[:3])[1].status == "STARTING"


def test_the_children_mark_changes_when_a_child_starts_or_closes() -> None:
    asked = [{"initiated_event_id": 5, "started_event_id": 0}]
    started = [{"initiated_event_id": 5, "started_event_id": 7}]
    assert len({present.children_mark(asked), present.children_mark(started), present.children_mark([])}) == 3
    assert present.children_mark(None) == ""
