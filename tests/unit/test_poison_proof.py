"""No command wedges a shard and no failure strands a run, in both engines: the in-memory engine and the Kafka
shards (`ShardEngine`: the processor's `Shard` over memory stores, no broker). An activity failing 1,500 times
keeps retrying at the maximum interval; a command the core fails on is quarantined in its run, shown by describe,
and re-driven once the bug is fixed; a workflow task whose new events would not fit one record goes without them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ostinato.schemas import codec, wire
from ostinato.schemas.topics import MAX_RECORD_BYTES
from ostinato.services.history import shard as shard_module
from ostinato.streams import deciders, engine_outbox
from ostinato.streams import events as ev
from ostinato.streams import quarantine as quarantine_module
from ostinato.streams.engine import InMemoryEngine
from tests.unit.shard_support import NS, Q, ShardEngine, payload, task_of

Record = dict[str, Any]
ENGINES = {"in-memory": InMemoryEngine, "kafka-shard": ShardEngine}
COMPLETE = ("CompleteWorkflowExecutionCommand", {"result": []})
FLAKY = {"activity_id": "flaky", "activity_type": "Flaky", "start_to_close_timeout_ms": 60_000}  # default policy


class CoreBug(RuntimeError):
    """What a bug in a decider raises."""


@pytest.fixture(params=list(ENGINES))
def engine(request: pytest.FixtureRequest) -> InMemoryEngine:
    made: InMemoryEngine = ENGINES[request.param](shards=2)
    return made


def body(reply: Record | None) -> tuple[str, Record]:
    assert reply is not None, "no reply"
    name, record = reply["body"]
    return wire.short_name(name), record


def history_types(engine: InMemoryEngine, workflow_id: str) -> list[str]:
    return [e["event_type"] for e in engine.history(NS, workflow_id)]


def with_activity(engine: InMemoryEngine, workflow_id: str) -> Record:
    """A run that scheduled the FLAKY activity (default retry policy); its first activity task."""
    engine.start_workflow(NS, workflow_id, "Poison", Q)
    engine.complete_workflow_task(task_of(engine, Q), [("ScheduleActivityTaskCommand", FLAKY)])
    activity = engine.poll_activity_task(Q)
    assert activity is not None
    return activity


def break_decider(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make the decider of `name` raise after it has changed the workflow, as a bug in the core would."""
    if not deciders._DECIDERS:
        deciders._DECIDERS.update(deciders._deciders())
    full = wire.command_type(name)
    real = deciders._DECIDERS[full]

    def buggy(w: Any, command_body: Record) -> Any:
        real(w, command_body)
        raise CoreBug(f"a bug in the {name} decider")

    monkeypatch.setitem(deciders._DECIDERS, full, buggy)


def survives(engine: InMemoryEngine, act: Callable[[], object]) -> None:
    """Do `act`, a command the core fails on. The Kafka shard quarantines it at once; the in-memory engine raises
    first (the test sees the bug, the command stays in the log) and quarantines it when it processes it again."""
    if isinstance(engine, ShardEngine):
        act()
        return
    with pytest.raises(CoreBug):
        act()
    assert engine.pending_commands == 1
    engine.run_until_idle()
    assert engine.pending_commands == 0


# -- retry arithmetic ---------------------------------------------------------------------------------------------

def test_an_activity_failing_1_500_times_keeps_retrying_at_the_maximum_interval(engine: InMemoryEngine) -> None:
    """The default policy (1 s, doubling, capped at 100 x initial) once overflowed at attempt 1,025 (~28 hours of
    retrying), after which every command of the shard failed. Each attempt is started and failed by a worker, and
    virtual time moves to the retry. Past 1,025 with room to spare (the delay itself, for any attempt, is
    property-tested in tests/unit/core/test_retry_properties.py); 10,000 attempts took ~35 s per engine."""
    activity = with_activity(engine, "poison")
    delays = []
    for attempt in range(1, 1_501):
        assert activity["attempt"] == attempt
        engine.start_activity(activity)
        engine.fail_activity(activity, "still broken")
        [(_, _, retry)] = engine.pending_deadlines()
        assert retry.kind == "ACTIVITY_RETRY" and retry.attempt == attempt + 1
        delays.append(retry.fire_at_ms - engine.clock.now_ms)
        engine.advance_to_next_timer()
        polled = engine.poll_activity_task(Q)
        assert polled is not None, f"no task for attempt {attempt + 1}"
        activity = polled

    assert delays[:8] == [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 100_000]
    assert set(delays[7:]) == {100_000}
    assert engine.rejections == {} and engine.quarantined == []
    state = engine.describe(NS, "poison")
    assert state is not None and state["activities"][0]["attempt"] == 1_501 and state["quarantine"] == []
    # The shard is not wedged: the workflow still takes commands, and the activity can still succeed.
    assert body(engine.signal(NS, "poison", "still-there"))[0] == "Accepted"
    engine.start_activity(activity)
    engine.complete_activity(activity, [payload("at last")])
    # the signal's task is scheduled (its STARTED comes with its answer); the attempts wrote nothing until the last
    assert history_types(engine, "poison") == [
        ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_TASK_SCHEDULED, ev.WORKFLOW_TASK_STARTED,
        ev.WORKFLOW_TASK_COMPLETED, ev.ACTIVITY_TASK_SCHEDULED, ev.WORKFLOW_EXECUTION_SIGNALED,
        ev.WORKFLOW_TASK_SCHEDULED, ev.ACTIVITY_TASK_STARTED, ev.ACTIVITY_TASK_COMPLETED]


# -- an exception in decide -----------------------------------------------------------------------------------------

def test_a_completion_the_core_fails_on_is_quarantined_in_its_run_and_redriven_after_the_fix(
        engine: InMemoryEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    activity = with_activity(engine, "order")
    engine.start_activity(activity)
    before = engine.describe(NS, "order")
    break_decider(monkeypatch, "RespondActivityTaskCompleted")

    survives(engine, lambda: engine.complete_activity(activity, [payload("charged")]))

    state = engine.describe(NS, "order")
    assert state is not None
    [kept] = state["quarantine"]
    assert (kept["command_type"], kept["code"], kept["error_type"], kept["failures"]) == (
        "RespondActivityTaskCompleted", "INTERNAL", "CoreBug", 1)
    assert "a bug in the RespondActivityTaskCompleted decider" in kept["error_message"]
    assert kept["command"]["body"][1]["result"] == [payload("charged")]
    assert {k: v for k, v in state.items() if k != "quarantine"} == {k: v for k, v in before.items()
                                                                     if k != "quarantine"}
    assert engine.rejections == {"INTERNAL": 1}
    assert [(code, kind) for code, kind, _ in engine.quarantined] == [("INTERNAL", "RespondActivityTaskCompleted")]
    assert "quarantined in run" in engine.rejected[-1][1]["message"]
    # Nothing else of the shard is held up by it.
    assert body(engine.signal(NS, "order", "meanwhile"))[0] == "Accepted"

    monkeypatch.undo()  # the upgrade that fixes the bug
    kind, redriven = body(engine.redrive(NS, "order", "fixed in 1.2.3"))

    assert kind == "Redriven"
    assert [(o["command_type"], o["outcome"]) for o in redriven["outcomes"]] == [
        ("RespondActivityTaskCompleted", "APPLIED")]
    # The signal's task is still out: the outcome is written (before that task's STARTED, which comes with its
    # answer), and a task will follow that one.
    assert history_types(engine, "order") == [
        ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_TASK_SCHEDULED, ev.WORKFLOW_TASK_STARTED,
        ev.WORKFLOW_TASK_COMPLETED, ev.ACTIVITY_TASK_SCHEDULED, ev.WORKFLOW_EXECUTION_SIGNALED,
        ev.WORKFLOW_TASK_SCHEDULED, ev.ACTIVITY_TASK_STARTED, ev.ACTIVITY_TASK_COMPLETED]
    state = engine.describe(NS, "order")
    assert state is not None and state["quarantine"] == [] and state["activities"] == []
    engine.complete_workflow_task(task_of(engine, Q))
    assert history_types(engine, "order")[9:] == [ev.WORKFLOW_TASK_STARTED, ev.WORKFLOW_TASK_COMPLETED,
                                                  ev.WORKFLOW_TASK_SCHEDULED]
    engine.complete_workflow_task(task_of(engine, Q), [COMPLETE])
    assert history_types(engine, "order")[12:] == [ev.WORKFLOW_TASK_STARTED, ev.WORKFLOW_TASK_COMPLETED,
                                                   ev.WORKFLOW_EXECUTION_COMPLETED]


def test_a_redrive_that_fails_again_keeps_the_command_and_counts_it(engine: InMemoryEngine,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    engine.start_workflow(NS, "sig", "S", Q)
    break_decider(monkeypatch, "SignalWorkflowExecution")
    survives(engine, lambda: engine.signal(NS, "sig", "boom"))
    length = len(engine.history(NS, "sig"))

    kind, redriven = body(engine.redrive(NS, "sig"))

    assert kind == "Redriven" and [o["outcome"] for o in redriven["outcomes"]] == ["FAILED"]
    assert "CoreBug" in redriven["outcomes"][0]["message"]
    state = engine.describe(NS, "sig")
    assert state is not None and [k["failures"] for k in state["quarantine"]] == [2]
    assert len(engine.history(NS, "sig")) == length  # the failed re-decision left nothing behind
    assert engine.rejections == {"INTERNAL": 1}  # the redrive itself was answered, not rejected


def test_a_quarantined_answer_that_went_stale_is_rejected_on_redrive_and_leaves(
        engine: InMemoryEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    activity = with_activity(engine, "stale")
    engine.start_activity(activity)
    break_decider(monkeypatch, "RespondActivityTaskCompleted")
    survives(engine, lambda: engine.complete_activity(activity))
    monkeypatch.undo()
    engine.advance(60_000)  # the start-to-close timeout: attempt 2 is scheduled after the backoff
    state = engine.describe(NS, "stale")
    assert state is not None and state["activities"][0]["attempt"] == 2

    _, redriven = body(engine.redrive(NS, "stale"))

    [outcome] = redriven["outcomes"]
    assert outcome["outcome"] == "REJECTED" and outcome["message"].startswith("STALE_TASK")
    state = engine.describe(NS, "stale")
    assert state is not None and state["quarantine"] == []


def test_a_command_with_no_run_to_attach_to_stays_a_rejection(engine: InMemoryEngine,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    break_decider(monkeypatch, "SignalWorkflowExecution")
    survives(engine, lambda: engine.signal(NS, "nobody", "hello"))
    assert engine.rejections == {"INTERNAL": 1} and engine.quarantined == []
    assert engine.workflow(NS, "nobody") is None
    assert body(engine.redrive(NS, "nobody"))[1]["code"] == "NOT_FOUND"


def test_the_quarantine_keeps_the_last_ten(engine: InMemoryEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    engine.start_workflow(NS, "noisy", "N", Q)
    break_decider(monkeypatch, "SignalWorkflowExecution")
    for i in range(12):
        survives(engine, lambda i=i: engine.signal(NS, "noisy", f"s{i}", request_id=f"sig-{i}"))
    state = engine.describe(NS, "noisy")
    assert state is not None
    assert [k["request_id"] for k in state["quarantine"]] == [f"sig-{i}" for i in range(2, 12)]
    assert len(engine.quarantined) == 12  # every one is counted


def test_an_output_too_large_for_a_record_is_quarantined_when_nobody_is_told(
        engine: InMemoryEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """An activity result whose event cannot be written: the worker's completion waits for no answer, so without
    the quarantine the outcome would be lost without a trace. Too large to keep whole, it is kept without its body,
    visible but not re-drivable; a redrive drops it."""
    limit = 40_000
    monkeypatch.setattr(engine_outbox, "MAX_RECORD_BYTES", limit)
    monkeypatch.setattr(shard_module, "MAX_RECORD_BYTES", limit)
    monkeypatch.setattr(quarantine_module, "MAX_KEPT_BYTES", 1_000)
    activity = with_activity(engine, "huge")
    engine.start_activity(activity)
    big = {"metadata": {"encoding": b"binary/plain"}, "data": b"x" * (limit + 1)}
    engine.submit(wire.command(NS, "huge", ("RespondActivityTaskCompleted", {
        "scheduled_event_id": activity["scheduled_event_id"], "attempt": 1, "result": [big]}),
        request_id="done", identity="worker", time_ms=0, run_id=activity["run_id"]))
    engine.run_until_idle()

    assert engine.rejections == {"TOO_LARGE": 1}
    state = engine.describe(NS, "huge")
    assert state is not None
    [kept] = state["quarantine"]
    assert (kept["code"], kept["command"], kept["command_type"]) == ("TOO_LARGE", None, "RespondActivityTaskCompleted")
    assert f"{limit}-byte record limit" in kept["error_message"]
    _, redriven = body(engine.redrive(NS, "huge"))
    assert [o["outcome"] for o in redriven["outcomes"]] == ["REJECTED"]
    state = engine.describe(NS, "huge")
    assert state is not None and state["quarantine"] == []


def test_a_sender_that_waits_is_told_of_a_record_too_large_and_nothing_is_kept(
        engine: InMemoryEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_outbox, "MAX_RECORD_BYTES", 40_000)
    monkeypatch.setattr(shard_module, "MAX_RECORD_BYTES", 40_000)
    engine.start_workflow(NS, "loud", "L", Q)
    big = {"metadata": {"encoding": b"binary/plain"}, "data": b"x" * 50_000}
    name, rejected = body(engine.signal(NS, "loud", "huge", [big]))
    assert (name, rejected["code"]) == ("Rejected", "TOO_LARGE")
    state = engine.describe(NS, "loud")
    assert state is not None and state["quarantine"] == [] and engine.quarantined == []


# -- outputs over the record limit ----------------------------------------------------------------------------------

def signal_bytes(size: int) -> Record:
    return {"metadata": {"encoding": b"json/plain"}, "data": b'"' + b"s" * (size - 2) + b'"'}


def test_forty_signals_of_200_kib_while_a_task_runs_are_read_from_history_not_carried(engine: InMemoryEngine) -> None:
    """The next task would carry 8 MiB of events, twice what a record may hold: it goes without them."""
    engine.start_workflow(NS, "inbox", "Inbox", Q)
    first = task_of(engine, Q)
    for i in range(40):
        assert body(engine.signal(NS, "inbox", f"s{i}", [signal_bytes(200 * 1024)]))[0] == "Accepted"
    engine.complete_workflow_task(first)

    polled = engine.poll_workflow_task(Q)
    assert polled is not None
    kind, task = polled
    assert kind == wire.WORKFLOW_TASK and task["events_omitted"] is True
    # it keeps only what history lacks: its own STARTED, under the reserved id
    assert [(e["event_id"], e["event_type"]) for e in task["events"]] == [
        (task["started_event_id"], ev.WORKFLOW_TASK_STARTED)]
    history = engine.history(NS, "inbox")
    # the first task's worker saw history through that task's SCHEDULED (2), its STARTED as id 3
    assert task["previous_started_event_id"] == 3
    new = history[task["previous_started_event_id"] - 1:task["scheduled_event_id"]]
    assert sum(len(codec.encode(wire.HISTORY_EVENT, e)) for e in new) > MAX_RECORD_BYTES
    # the signals came while the first task was out: they stand before its STARTED and COMPLETED
    assert [e["event_type"] for e in new] == [ev.WORKFLOW_EXECUTION_SIGNALED] * 40 + [
        ev.WORKFLOW_TASK_STARTED, ev.WORKFLOW_TASK_COMPLETED, ev.WORKFLOW_TASK_SCHEDULED]
    assert (task["scheduled_event_id"], task["started_event_id"]) == (len(history), len(history) + 1)
    assert task["history_length"] == len(history) + 1
    assert engine.rejections == {}

    engine.complete_workflow_task(task, [COMPLETE])  # the run carries on
    assert history_types(engine, "inbox")[-1] == ev.WORKFLOW_EXECUTION_COMPLETED


def test_a_retried_task_without_its_events_keeps_the_events_history_lacks(engine: InMemoryEngine) -> None:
    """A failed task is retried as a transient attempt, whose scheduled/started events exist only in the task: they
    stay in it when the rest is left out."""
    engine.start_workflow(NS, "again", "Again", Q)
    first = task_of(engine, Q)
    for i in range(25):
        engine.signal(NS, "again", f"s{i}", [signal_bytes(200 * 1024)])
    engine.fail_workflow_task(first, "a bug in the workflow")

    task = task_of(engine, Q)
    assert task["attempt"] == 2 and task["events_omitted"] is True
    assert [(e["event_id"], e["event_type"]) for e in task["events"]] == [
        (task["scheduled_event_id"], ev.WORKFLOW_TASK_SCHEDULED), (task["started_event_id"], ev.WORKFLOW_TASK_STARTED)]
    assert len(engine.history(NS, "again")) == task["scheduled_event_id"] - 1  # not written: transient
    engine.complete_workflow_task(task, [COMPLETE])
    assert history_types(engine, "again")[-1] == ev.WORKFLOW_EXECUTION_COMPLETED



# -- time arithmetic --------------------------------------------------------------------------------------------------

LONG_MAX = 2**63 - 1


def test_timeouts_as_long_as_a_long_allows_make_no_time_a_record_cannot_hold(engine: InMemoryEngine) -> None:
    """now + a timeout of 2^63 - 1 ms is no Avro long (and no 8-byte timer key): such moments saturate at the
    largest one, which never comes, instead of failing every command that writes the run's state."""
    engine.start_workflow(NS, "forever", "Forever", Q, run_timeout_ms=LONG_MAX, execution_timeout_ms=LONG_MAX)
    engine.complete_workflow_task(task_of(engine, Q), [
        ("StartTimerCommand", {"timer_id": "never", "start_to_fire_timeout_ms": LONG_MAX}),
        ("ScheduleActivityTaskCommand", {**FLAKY, "schedule_to_start_timeout_ms": LONG_MAX,
                                         "heartbeat_timeout_ms": LONG_MAX, "start_to_close_timeout_ms": LONG_MAX}),
        ("ScheduleActivityTaskCommand", {**FLAKY, "activity_id": "idle", "schedule_to_close_timeout_ms": LONG_MAX})])
    activity = engine.poll_activity_task(Q)
    assert activity is not None and activity["activity_id"] == "flaky"
    engine.start_activity(activity)
    engine.heartbeat(activity)
    engine.fail_activity(activity, {"message": "later", "next_retry_delay_ms": LONG_MAX})

    assert engine.rejections == {} and engine.quarantined == []
    state = engine.describe(NS, "forever")
    assert state is not None
    assert state["run_expiration_time_ms"] == state["execution_expiration_time_ms"] == LONG_MAX
    assert state["timers"][0]["fire_at_ms"] == LONG_MAX
    assert [a["next_attempt_time_ms"] for a in state["activities"]] == [LONG_MAX, None]
    assert {d.fire_at_ms for _, _, d in engine.pending_deadlines()} == {LONG_MAX}
    assert body(engine.signal(NS, "forever", "still-alive"))[0] == "Accepted"


# -- the Kafka shard's batch and the metric ---------------------------------------------------------------------------

def test_the_shard_writes_the_quarantine_in_the_batch_and_lists_it_for_the_metric(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import CollectorRegistry

    from ostinato.schemas.keys import run_key
    from ostinato.schemas.topics import Topic
    from ostinato.services.history.metrics import ProcessorMetrics
    from ostinato.services.history.shard import Quarantined, Shard
    from ostinato.services.history.store import Family, MemoryStore
    from ostinato.streams.config import Config
    from ostinato.streams.model import decode_run
    from tests.unit.shard_support import commit, decoded, signal_command, start_command, topology, workflow_tasks

    shard = Shard(0, MemoryStore(), topology(1), Config())
    shard.process(start_command("wf"), 0, 1_000)
    [task] = workflow_tasks(commit(shard))
    break_decider(monkeypatch, "SignalWorkflowExecution")
    for attempt in range(2):  # the first batch aborts: nothing of it may survive
        shard.process(signal_command("wf", "boom", request_id="x"), 1, 2_000)
        state_key = run_key(NS, "wf", task["run_id"]).encode()
        [(_, key, state)] = decoded(shard.outputs, Topic.STATE)
        assert key == state_key and state is not None and state["quarantine"][0]["request_id"] == "x"
        assert shard.quarantined == [Quarantined("INTERNAL", "SignalWorkflowExecution", task["run_id"])]
        assert [r.code for r in shard.rejections] == ["INTERNAL"]
        if attempt == 0:
            shard.reset()
            assert shard.quarantined == [] and shard.store.get(Family.STATE, state_key) is not None
            assert decode_run(shard.store.get(Family.STATE, state_key) or b"").quarantine == []
    metrics = ProcessorMetrics(CollectorRegistry())
    metrics.count_quarantined(shard.quarantined)
    assert metrics.quarantined.labels("INTERNAL", "SignalWorkflowExecution")._value.get() == 1
    commit(shard)
    stored = decode_run(shard.store.get(Family.STATE, state_key) or b"")
    assert [k["request_id"] for k in stored.quarantine] == ["x"]
