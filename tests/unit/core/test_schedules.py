"""Schedules in the core (no broker): spec times as a table (zones, DST, calendars, intervals, skip, bounds,
jitter), and the deciders driven through the in-memory engine: catch-up window, limited actions, overlap policies,
pause on failure, manual actions, refusals, and replay equal to live."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ostinato.streams.engine import InMemoryEngine
from ostinato.streams.schedules import schedule_workflow_id
from ostinato.streams.schedules.spec import action_workflow_id, jitter_ms, next_time, spec_problem, times_between
from tests.unit.core.test_engine import assert_replays

Record = dict[str, Any]
NS = "default"
MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000) if "+" not in text else \
        int(datetime.fromisoformat(text).timestamp() * 1000)


def spec(**changes: Any) -> Record:
    return {"calendars": [], "intervals": [], "cron_expressions": [], "skip": [], "start_at_ms": None,
            "end_at_ms": None, "jitter_ms": 0, "time_zone_name": "", **changes}


def calendar(**fields: Any) -> Record:
    base = {"second": [], "minute": [], "hour": [], "day_of_month": [], "month": [], "year": [], "day_of_week": [],
            "comment": ""}
    return {**base, **{k: [{"start": v, "end": 0, "step": 0} if isinstance(v, int) else {"end": 0, "step": 0, **v}
                           for v in vs] for k, vs in fields.items()}}


SPEC_CASES = [
    ("cron in UTC", spec(cron_expressions=["30 9 * * *"]), "2024-01-01T10:00:00",
     ["2024-01-02T09:30:00", "2024-01-03T09:30:00"]),
    ("cron in Paris, winter", spec(cron_expressions=["0 9 * * *"], time_zone_name="Europe/Paris"),
     "2024-01-01T00:00:00", ["2024-01-01T08:00:00", "2024-01-02T08:00:00"]),
    ("cron across spring forward (Paris, 31 March)", spec(cron_expressions=["0 9 * * *"],
                                                          time_zone_name="Europe/Paris"),
     "2024-03-30T12:00:00", ["2024-03-31T07:00:00", "2024-04-01T07:00:00"]),
    ("a time the clock skips fires at the gap's end", spec(cron_expressions=["30 2 * * *"],
                                                           time_zone_name="Europe/Paris"),
     "2024-03-30T12:00:00", ["2024-03-31T01:30:00", "2024-04-01T00:30:00"]),
    ("a repeated time fires once (fall back)", spec(cron_expressions=["30 2 * * *"],
                                                    time_zone_name="Europe/Paris"),
     "2024-10-26T12:00:00", ["2024-10-27T00:30:00", "2024-10-28T01:30:00"]),
    ("cron's day rule: day of month OR weekday", spec(cron_expressions=["0 0 13 * FRI"]), "2024-09-01T00:00:00",
     ["2024-09-06T00:00:00", "2024-09-13T00:00:00", "2024-09-20T00:00:00"]),
    ("calendar: day of month AND weekday (Friday the 13th)",
     spec(calendars=[calendar(day_of_month=[13], day_of_week=[5])]), "2024-01-01T00:00:00",
     ["2024-09-13T00:00:00", "2024-12-13T00:00:00"]),
    ("calendar with seconds and a step", spec(calendars=[calendar(
        second=[{"start": 0, "end": 59, "step": 20}], minute=[5], hour=[{"start": 0, "end": 23, "step": 0}])]),
     "2024-01-01T00:05:10", ["2024-01-01T00:05:20", "2024-01-01T00:05:40", "2024-01-01T01:05:00"]),
    ("calendar limited to a year", spec(calendars=[calendar(year=[2025], month=[1], day_of_month=[1])]),
     "2020-01-01T00:00:00", ["2025-01-01T00:00:00"]),
    ("interval with offset", spec(intervals=[{"every_ms": HOUR, "offset_ms": 5 * MINUTE}]), "2024-01-01T00:05:00",
     ["2024-01-01T01:05:00", "2024-01-01T02:05:00"]),
    ("the union of sources", spec(intervals=[{"every_ms": DAY, "offset_ms": 0}], cron_expressions=["0 12 * * *"]),
     "2024-01-01T00:00:00", ["2024-01-01T12:00:00", "2024-01-02T00:00:00", "2024-01-02T12:00:00"]),
    ("skip weekends", spec(cron_expressions=["0 9 * * *"], skip=[calendar(
        day_of_week=[0, 6], hour=[{"start": 0, "end": 23}], minute=[{"start": 0, "end": 59}])]),
     "2024-09-06T10:00:00", ["2024-09-09T09:00:00", "2024-09-10T09:00:00"]),
    ("start_at and end_at", spec(intervals=[{"every_ms": DAY, "offset_ms": 0}], start_at_ms=ms("2024-05-01T00:00:00"),
                                 end_at_ms=ms("2024-05-02T00:00:00")),
     "2024-01-01T00:00:00", ["2024-05-01T00:00:00", "2024-05-02T00:00:00"]),
]


@pytest.mark.parametrize(("spec_record", "after", "expected"), [c[1:] for c in SPEC_CASES],
                         ids=[c[0] for c in SPEC_CASES])
def test_spec_times(spec_record: Record, after: str, expected: list[str]) -> None:
    found, t = [], ms(after)
    for _ in expected:
        nxt = next_time(spec_record, t)
        if nxt is None:
            break
        found.append(nxt)
        t = nxt
    assert found == [ms(e) for e in expected]
    if spec_record["end_at_ms"] is not None:
        assert next_time(spec_record, found[-1]) is None


@pytest.mark.parametrize(("spec_record", "problem"), [
    (spec(cron_expressions=["61 * * * *"]), "minute"),
    (spec(time_zone_name="Mars/Olympus"), "time zone"),
    (spec(intervals=[{"every_ms": 10, "offset_ms": 0}]), "at least a second"),
    (spec(calendars=[calendar(hour=[24])]), "hour"),
])
def test_spec_problems(spec_record: Record, problem: str) -> None:
    found = spec_problem(spec_record)
    assert found is not None and problem in found


def test_jitter_is_deterministic_bounded_and_spread() -> None:
    values = [jitter_ms("s", t * MINUTE, 30_000) for t in range(200)]
    assert values == [jitter_ms("s", t * MINUTE, 30_000) for t in range(200)]
    assert all(0 <= v < 30_000 for v in values) and len(set(values)) > 150
    assert jitter_ms("s", 0, 0) == 0 and jitter_ms("s", 0, 30_000) != jitter_ms("t", 0, 30_000)


def test_backfill_range_is_inclusive_and_action_ids_name_the_second() -> None:
    hourly = spec(intervals=[{"every_ms": HOUR, "offset_ms": 0}])
    times = list(times_between(hourly, ms("2024-01-01T00:00:00"), ms("2024-01-01T03:00:00"), 100))
    assert times == [ms(f"2024-01-01T0{h}:00:00") for h in range(4)]
    assert action_workflow_id("report", times[1]) == "report-2024-01-01T01:00:00Z"


# -- the deciders, on the in-memory engine --------------------------------------------------------------------------

def definition(spec_record: Record, *, overlap: str = "SKIP", catchup_ms: int = 365 * DAY,
               pause_on_failure: bool = False, paused: bool = False, remaining: int | None = None) -> Record:
    return {"spec": spec_record, "action": {
        "workflow_id": "job", "workflow_type": "Job", "task_queue": "q", "input": [], "execution_timeout_ms": None,
        "run_timeout_ms": None, "task_timeout_ms": HOUR, "retry_policy": None, "memo": {}, "search_attributes": {},
        "header": {}}, "policy": {"overlap": overlap, "catchup_window_ms": catchup_ms,
                                  "pause_on_failure": pause_on_failure},
        "state": {"note": "", "paused": paused, "limited_actions": remaining is not None,
                  "remaining_actions": remaining or 0}}


def send(engine: InMemoryEngine, name: str, body: Record, schedule_id: str = "s") -> Record:
    reply = engine._send(NS, schedule_workflow_id(schedule_id), name, body, identity="test")
    assert reply is not None
    return reply["body"]


def create(engine: InMemoryEngine, definition_record: Record, schedule_id: str = "s", **extra: Any) -> Record:
    return send(engine, "CreateSchedule", {"schedule_id": schedule_id, "schedule": definition_record,
                                           "trigger_immediately": False, "backfill": [], **extra}, schedule_id)


def patch(engine: InMemoryEngine, **changes: Any) -> Record:
    return send(engine, "PatchSchedule", {"pause": None, "unpause": None, "trigger_immediately": None,
                                          "backfill": [], **changes})


def info(engine: InMemoryEngine, schedule_id: str = "s") -> Record:
    state = engine.describe(NS, schedule_workflow_id(schedule_id))
    assert state is not None and state["schedule"] is not None
    found: Record = state["schedule"]
    return found


def finish_tasks(engine: InMemoryEngine, command: str = "CompleteWorkflowExecutionCommand") -> int:
    """Answer every queued workflow task of queue q by closing its run; how many."""
    done = 0
    while (task := engine.poll_workflow_task("q")) is not None:
        body = {"result": []} if command.startswith("Complete") else {"failure": {"message": "boom"}}
        engine.complete_workflow_task(task[1], [(command, body)])
        done += 1
    return done


EVERY_MINUTE = spec(intervals=[{"every_ms": MINUTE, "offset_ms": 0}])


def test_each_due_time_is_taken_once_and_the_run_reports_back() -> None:
    engine = InMemoryEngine()
    create(engine, definition(EVERY_MINUTE))
    for _ in range(3):
        engine.advance(MINUTE)
        assert finish_tasks(engine) == 1
    progress = info(engine)["progress"]
    assert progress["num_actions"] == 3 and progress["running"] == []
    assert [a["status"] for a in progress["recent_actions"]] == ["COMPLETED"] * 3
    assert all(a["run_id"] for a in progress["recent_actions"])
    assert_replays(engine)


def test_an_outage_catches_up_within_the_catchup_window_and_counts_the_rest_missed() -> None:
    engine = InMemoryEngine()
    create(engine, definition(EVERY_MINUTE, overlap="ALLOW_ALL", catchup_ms=150_000))
    start = engine.clock.now_ms
    assert start % MINUTE == 0
    engine.clock.set(start + 10 * MINUTE + 1)  # the owner was away: the timer fires ten minutes late
    engine.advance(0)
    progress = info(engine)["progress"]
    assert (progress["num_actions"], progress["num_actions_missed_catchup_window"]) == (3, 7)  # minutes 8-10
    assert progress["last_processed_ms"] == start - start % MINUTE + 10 * MINUTE


def test_limited_actions_stop_the_timer() -> None:
    engine = InMemoryEngine()
    create(engine, definition(EVERY_MINUTE, overlap="ALLOW_ALL", remaining=2))
    engine.advance(5 * MINUTE)
    found = info(engine)
    assert found["progress"]["num_actions"] == 2 and found["definition"]["state"]["remaining_actions"] == 0
    assert not [d for _, wf, d in engine.pending_deadlines() if wf == schedule_workflow_id("s")]
    patch(engine, trigger_immediately="UNSPECIFIED")  # by hand: still taken, not counted
    assert info(engine)["progress"]["num_actions"] == 3


@pytest.mark.parametrize(("overlap", "running", "buffered", "skipped"), [
    ("SKIP", 1, 0, 2), ("BUFFER_ONE", 1, 1, 1), ("BUFFER_ALL", 1, 2, 0), ("ALLOW_ALL", 3, 0, 0),
    # No worker acts on a cancel request; a terminate closes the run at once and the buffered action starts.
    ("CANCEL_OTHER", 1, 1, 1), ("TERMINATE_OTHER", 1, 0, 0),
])
def test_overlap_policy_while_an_action_runs(overlap: str, running: int, buffered: int, skipped: int) -> None:
    """Three actions a minute apart, no worker: the first never ends (unless stopped by the policy)."""
    engine = InMemoryEngine()
    create(engine, definition(EVERY_MINUTE, overlap=overlap))
    engine.advance(3 * MINUTE)
    progress = info(engine)["progress"]
    assert (len(progress["running"]), len(progress["buffered"]), progress["num_actions_skipped_overlap"]) == (
        running, buffered, skipped)
    if overlap == "TERMINATE_OTHER":  # the terminated run reports its close: the buffered action starts
        closed = [a["status"] for a in progress["recent_actions"]]
        assert closed.count("TERMINATED") >= 1
    assert_replays(engine)


def test_buffer_all_starts_the_next_when_one_closes() -> None:
    engine = InMemoryEngine()
    create(engine, definition(EVERY_MINUTE, overlap="BUFFER_ALL"))
    engine.advance(3 * MINUTE + 1)
    for expected_left in (1, 0):
        while (task := engine.poll_workflow_task("q")) is not None:  # earlier attempts timed out: stale
            reply = engine.complete_workflow_task(task[1], [("CompleteWorkflowExecutionCommand", {"result": []})])
            if reply is not None and not reply["body"][0].endswith("Rejected"):
                break
        assert len(info(engine)["progress"]["buffered"]) == expected_left
    assert info(engine)["progress"]["num_actions"] == 3


def test_pause_on_failure_pauses_with_a_note() -> None:
    engine = InMemoryEngine()
    create(engine, definition(EVERY_MINUTE, pause_on_failure=True))
    engine.advance(MINUTE)
    finish_tasks(engine, "FailWorkflowExecutionCommand")
    state = info(engine)["definition"]["state"]
    assert state["paused"] and "failed" in state["note"]
    engine.advance(5 * MINUTE)
    assert info(engine)["progress"]["num_actions"] == 1


def test_pause_unpause_trigger_backfill_update_delete() -> None:
    engine = InMemoryEngine()
    create(engine, definition(spec(cron_expressions=["0 * * * *"]), overlap="ALLOW_ALL"))
    assert patch(engine, pause="maintenance")[1]["run_id"]
    engine.advance(3 * HOUR)
    assert info(engine)["progress"]["num_actions"] == 0  # paused: the hours passed, nothing taken
    patch(engine, unpause="back", trigger_immediately="UNSPECIFIED")
    assert info(engine)["definition"]["state"] == {"note": "back", "paused": False, "limited_actions": False,
                                                   "remaining_actions": 0}
    assert info(engine)["progress"]["num_actions"] == 1  # the trigger; the paused hours are not caught up on
    day = engine.clock.now_ms - engine.clock.now_ms % DAY - DAY
    patch(engine, backfill=[{"start_at_ms": day, "end_at_ms": day + DAY - 1, "overlap": "UNSPECIFIED"}])
    assert info(engine)["progress"]["num_actions"] == 25
    send(engine, "UpdateSchedule", {"schedule": definition(spec(cron_expressions=["0 0 1 1 *"]))})
    assert info(engine)["definition"]["spec"]["cron_expressions"] == ["0 0 1 1 *"]
    assert send(engine, "DeleteSchedule", {"reason": ""})[1]["run_id"]
    assert engine.describe(NS, schedule_workflow_id("s"))["status"] == "TERMINATED"
    assert send(engine, "PatchSchedule", {"pause": "x", "unpause": None, "trigger_immediately": None,
                                          "backfill": []})[1]["code"] == "NOT_FOUND"
    assert create(engine, definition(EVERY_MINUTE))[0].endswith("Accepted")  # the id is free again
    assert_replays(engine)


@pytest.mark.parametrize(("body", "code"), [
    ({"schedule": definition(spec(cron_expressions=["nope"]))}, "INVALID_ARGUMENT"),
    ({"schedule": {**definition(EVERY_MINUTE), "action": {**definition(EVERY_MINUTE)["action"], "task_queue": ""}}},
     "INVALID_ARGUMENT"),
    ({"schedule_id": "other"}, "INVALID_ARGUMENT"),
])
def test_create_refusals(body: Record, code: str) -> None:
    engine = InMemoryEngine()
    full = {"schedule_id": "s", "schedule": definition(EVERY_MINUTE), "trigger_immediately": False, "backfill": [],
            **body}
    kind, rejected = send(engine, "CreateSchedule", full)
    assert kind.endswith("Rejected") and rejected["code"] == code


def test_a_second_create_is_refused_and_a_retried_one_answered() -> None:
    engine = InMemoryEngine()
    body = {"schedule_id": "s", "schedule": definition(EVERY_MINUTE), "trigger_immediately": True, "backfill": []}
    first = engine._send(NS, schedule_workflow_id("s"), "CreateSchedule", body, request_id="r1", identity="t")
    again = engine._send(NS, schedule_workflow_id("s"), "CreateSchedule", body, request_id="r1", identity="t")
    assert first is not None and again is not None and first["body"] == again["body"]
    assert info(engine)["progress"]["num_actions"] == 1  # the trigger, once
    assert create(engine, definition(EVERY_MINUTE))[1]["code"] == "ALREADY_STARTED"
