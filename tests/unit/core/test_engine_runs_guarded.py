"""The engine's own runs at the seams between features (found by review after schedules, batch operations, the
replay gate and worker versioning were merged): a schedule outlives the history limit, refuses client commands,
bounds its buffer, and neither batch jobs nor the replay gate treat engine runs as user workflows."""

from __future__ import annotations

import json

import pytest

from ostinato.schemas.topics import MAX_RECORD_BYTES
from ostinato.sdk.batch_workflow import BATCH_WORKFLOW_TYPE, ENGINE_TYPES
from ostinato.sdk.history_sample import ENGINE_WORKFLOW_TYPES, RunSummary, SamplePlan
from ostinato.streams.config import Config, Limits
from ostinato.streams.engine import InMemoryEngine
from ostinato.streams.schedules import SCHEDULE_WORKFLOW_TYPE, schedule_workflow_id
from ostinato.streams.schedules import progress as progress_module
from ostinato.streams.schedules.progress import MAX_BUFFERED
from tests.unit.core.test_schedules import EVERY_MINUTE, MINUTE, NS, create, definition, finish_tasks, info


def test_a_schedule_outlives_the_history_limit() -> None:
    """A schedule cannot continue-as-new: the history cap must not terminate (delete) it."""
    engine = InMemoryEngine(config=Config(limits=Limits(history_warn_events=20, history_max_events=60)))
    create(engine, definition(EVERY_MINUTE))
    for _ in range(40):  # about three events per action: twice the cap
        engine.advance(MINUTE)
        finish_tasks(engine)
    state = engine.describe(NS, schedule_workflow_id("s"))
    assert state is not None and state["status"] == "RUNNING", state and state["status"]
    assert info(engine)["progress"]["num_actions"] >= 39


def test_client_commands_to_a_schedule_s_run_are_refused() -> None:
    engine = InMemoryEngine()
    create(engine, definition(EVERY_MINUTE))
    wid = schedule_workflow_id("s")
    for reply in (engine.terminate(NS, wid, "batch"), engine.signal(NS, wid, "poke"), engine.cancel(NS, wid)):
        assert reply is not None
        kind, record = reply["body"]
        assert kind.endswith("Rejected") and record["code"] == "INVALID_ARGUMENT", reply
        assert "schedules API" in record["message"]
    assert engine.poll_workflow_task("q") is None  # no task of type ostinato-schedule on the user's queue
    for _ in range(2):  # still taking its actions
        engine.advance(MINUTE)
        assert finish_tasks(engine) == 1


def test_buffer_all_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound itself at a smaller value (1,000 minutes of actions cost ~30 s here); what 1,000 entries weigh in
    the state record is checked below."""
    bound = 40
    monkeypatch.setattr(progress_module, "MAX_BUFFERED", bound)
    engine = InMemoryEngine()
    create(engine, definition(EVERY_MINUTE, overlap="BUFFER_ALL"))
    engine.advance((bound + 5) * MINUTE)  # the first action never closes
    progress = info(engine)["progress"]
    assert len(progress["buffered"]) == bound
    assert progress["num_actions_skipped_overlap"] >= 4


def test_a_full_buffer_fits_a_state_record_many_times_over() -> None:
    entry = {"schedule_time_ms": 2**62, "actual_time_ms": 2**62, "overlap": "BUFFER_ALL"}
    assert len(json.dumps([entry] * MAX_BUFFERED)) < MAX_RECORD_BYTES // 10  # Avro is smaller still


def test_batch_jobs_and_the_replay_gate_leave_engine_runs_alone() -> None:
    assert ENGINE_TYPES == frozenset({BATCH_WORKFLOW_TYPE, SCHEDULE_WORKFLOW_TYPE}) == ENGINE_WORKFLOW_TYPES

    def summary(workflow_type: str) -> RunSummary:
        return RunSummary(run=(NS, "wf", "r"), workflow_type=workflow_type, started_ms=1, last_ms=10, closed=False)

    assert not SamplePlan().wants(summary(SCHEDULE_WORKFLOW_TYPE))
    assert SamplePlan().wants(summary("Order"))
    assert SamplePlan(workflow_types=frozenset({SCHEDULE_WORKFLOW_TYPE})).wants(summary(SCHEDULE_WORKFLOW_TYPE))


def test_a_reset_of_a_scheduled_run_keeps_the_schedule_waiting_for_the_new_run() -> None:
    """The run a reset replaces does not report TERMINATED to its schedule (or parent): the new run reports."""
    from tests.unit.core.test_schedules import HOUR

    engine = InMemoryEngine()
    create(engine, definition(EVERY_MINUTE, overlap="SKIP"))
    engine.advance(MINUTE)
    polled = engine.poll_workflow_task("q")
    assert polled is not None
    task = polled[1]
    engine.complete_workflow_task(task, [("StartTimerCommand", {"timer_id": "t", "start_to_fire_timeout_ms": HOUR})])
    reply = engine.reset(NS, task["workflow_id"], reset_type="LAST_WORKFLOW_TASK", reason="fix")
    assert reply is not None and reply["body"][0].endswith("Accepted")
    running = [a["workflow_id"] for a in info(engine)["progress"]["running"]]
    assert running == [task["workflow_id"]]  # still running: the reset run is the action now
    engine.advance(MINUTE)
    assert info(engine)["progress"]["num_actions_skipped_overlap"] == 1  # SKIP holds while the reset run runs
    assert finish_tasks(engine) == 1  # the reset run closes...
    assert info(engine)["progress"]["running"] == []  # ...and its schedule hears of it
