"""The history checker on histories the in-memory engine wrote, and on copies of them broken one way each."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.schemas import codec
from ostinato.schemas.keys import history_key
from ostinato.services.admin.checker import NO_RUN, CheckReport, Problem, check_runs, fold_runs
from ostinato.streams import events as ev
from ostinato.streams.appliers import CURRENT_VERSION, ReplayError
from ostinato.streams.engine import InMemoryEngine
from ostinato.streams.model import durable_bytes, encode_run

Record = dict[str, Any]
Item = tuple[str, bytes | None]
RunId = tuple[str, str, str]
NS, Q = "default", "orders"
HISTORY_EVENT = "ostinato.history.HistoryEvent"
ACTIVITY = {"activity_id": "charge-1", "activity_type": "charge", "start_to_close_timeout_ms": 5_000}


def _task(engine: InMemoryEngine) -> Record:
    polled = engine.poll_workflow_task(Q)
    assert polled is not None
    return polled[1]


def _run_workflows() -> InMemoryEngine:
    """Three workflows, four runs: `hello` ran an activity and completed, `sleepy` waits on a timer, `looper`
    continued as new once and its second run waits for its first workflow task."""
    engine = InMemoryEngine(shards=2)
    engine.start_workflow(NS, "hello", "Hello", Q)
    engine.complete_workflow_task(_task(engine), [("ScheduleActivityTaskCommand", ACTIVITY)])
    activity = engine.poll_activity_task(Q)
    assert activity is not None
    engine.start_activity(activity)
    engine.complete_activity(activity)
    engine.complete_workflow_task(_task(engine), [("CompleteWorkflowExecutionCommand", {})])

    engine.start_workflow(NS, "sleepy", "Sleepy", Q)
    engine.complete_workflow_task(_task(engine), [
        ("StartTimerCommand", {"timer_id": "nap", "start_to_fire_timeout_ms": 60_000})])

    engine.start_workflow(NS, "looper", "Looper", Q)
    engine.complete_workflow_task(_task(engine), [("ContinueAsNewWorkflowExecutionCommand", {})])
    assert not engine.rejections
    return engine


@pytest.fixture(scope="module")
def engine() -> InMemoryEngine:
    return _run_workflows()


def encode(event: Record) -> bytes:
    return codec.encode(HISTORY_EVENT, event)


def records(engine: InMemoryEngine) -> list[Item]:
    """The history topic as the engine would have written it: one record per event, keyed by history_key."""
    return [(history_key(*run, e["event_id"]), encode(e)) for run, events in engine.histories.items() for e in events]


def run_of(engine: InMemoryEngine, workflow_id: str) -> RunId:
    return (NS, workflow_id, engine.current_run_id(NS, workflow_id))


def history_of(engine: InMemoryEngine, workflow_id: str) -> tuple[RunId, list[Record]]:
    run = run_of(engine, workflow_id)
    return run, [dict(e) for e in engine.histories[run]]


def items(run: RunId, events: list[Record]) -> list[Item]:
    return [(history_key(*run, e["event_id"]), encode(e)) for e in events]


def event(event_type: str, event_id: int, **attrs: Any) -> Record:
    return ev.make_event(event_type, event_id, 1_000, attrs, CURRENT_VERSION[event_type])


def with_attrs(e: Record, **changes: Any) -> Record:
    name, attrs = e["attributes"]
    return {**e, "attributes": (name, {**attrs, **changes})}


def found(report: CheckReport) -> list[tuple[int, str]]:
    return [(p.event_id, p.message) for p in report.problems]


def only_problem(report: CheckReport, run: RunId, event_id: int, words: str) -> Problem:
    assert len(report.problems) == 1, found(report)
    problem = report.problems[0]
    assert (problem.run, problem.event_id) == (run, event_id) and words in problem.message, problem
    return problem


# -- clean histories -------------------------------------------------------------------------------------------


def test_a_clean_history_has_no_problems_and_counts_every_run(engine: InMemoryEngine) -> None:
    report = check_runs(records(engine))

    assert report.ok, found(report)
    assert (report.runs, report.open_runs, report.deleted_runs) == (4, 2, 0)
    assert report.closed_runs == {"COMPLETED": 1, "CONTINUED_AS_NEW": 1}
    assert report.events == report.records == sum(len(h) for h in engine.histories.values())
    assert report.histories == engine.histories
    assert report.summary() == "4 runs, 23 events: 2 closed (COMPLETED 1, CONTINUED_AS_NEW 1), 2 open, 0 deleted; " \
                               "no problems"
    assert json.loads(json.dumps(report.to_dict()))["closed_runs"] == {"COMPLETED": 1, "CONTINUED_AS_NEW": 1}


def test_runs_interleaved_as_partitions_deliver_them_are_still_clean(engine: InMemoryEngine) -> None:
    hello, looper = items(*history_of(engine, "hello")), items(*history_of(engine, "looper"))
    interleaved = [r for pair in zip(hello, looper, strict=False) for r in pair] + hello[len(looper):]

    report = check_runs(interleaved + looper[len(hello):])

    assert report.ok and report.runs == 2, found(report)


def test_the_fold_of_each_history_equals_the_engine_state(engine: InMemoryEngine) -> None:
    report = check_runs(records(engine))

    folded = fold_runs(report.histories)

    assert set(folded) == set(engine.histories)
    for (ns, workflow_id, run_id), state in folded.items():
        workflow = engine.workflow(ns, workflow_id)
        assert workflow is not None
        assert state == durable_bytes(workflow.runs[run_id]), f"{workflow_id}/{run_id}"


def test_a_fold_that_fails_names_the_run(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "hello")

    with pytest.raises(ReplayError, match="does not follow a started event") as caught:
        fold_runs({run: events[1:]})

    assert caught.value.__notes__ == [f"while folding the history of run {'/'.join(run)}"]


# -- deleted runs ----------------------------------------------------------------------------------------------


def test_a_run_whose_every_key_is_tombstoned_is_counted_as_deleted(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "hello")
    tombstones: list[Item] = [(key, None) for key, _ in items(run, events)]

    before_compaction = check_runs([*records(engine), *tombstones])
    after_compaction = check_runs([r for r in records(engine) if not r[0].startswith(f"{NS}/hello/")] + tombstones)

    for report in (before_compaction, after_compaction):
        assert report.ok, found(report)
        assert (report.runs, report.deleted_runs, report.closed_runs["COMPLETED"]) == (3, 1, 0)
        assert run not in report.histories


def test_a_run_only_partly_tombstoned_is_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "hello")

    report = check_runs([*items(run, events), (history_key(*run, 3), None)])

    only_problem(report, run, 0, "partly deleted: 1 of 11")


# -- each kind of problem --------------------------------------------------------------------------------------


def test_a_missing_event_is_a_gap(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "sleepy")  # started, task scheduled, started, completed, timer started
    del events[2:4]

    report = check_runs(items(run, events))

    # The gap, and what the missing events leave unexplained: each finding is reported where it shows.
    assert found(report) == [(5, "gap: event(s) 3..4 missing before it"),
                             (5, "TIMER_STARTED: workflow_task_completed_event_id 4 is no earlier event, not an "
                                 "earlier WORKFLOW_TASK_COMPLETED")]


def test_a_key_written_twice_is_a_duplicate(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "hello")
    written = items(run, events)
    changed = (written[4][0], encode(with_attrs(events[4], activity_type="refund")))

    identical = check_runs([*written[:5], written[4], *written[5:]])
    different = check_runs([*written, changed])

    only_problem(identical, run, 5, "duplicate: the key was written again (identical bytes)")
    only_problem(different, run, 5, "duplicate: the key was written again (different bytes)")
    assert identical.histories[run] == events  # the first copy counts


def test_two_terminal_events_are_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "hello")
    terminated = event(ev.WORKFLOW_EXECUTION_TERMINATED, len(events) + 1, reason="again")

    report = check_runs(items(run, [*events, terminated]))

    only_problem(report, run, 12, "a second terminal event (WORKFLOW_EXECUTION_TERMINATED) after the terminal "
                                  "event 11 (WORKFLOW_EXECUTION_COMPLETED)")
    assert report.closed_runs == {"COMPLETED": 1}


def test_an_event_after_the_terminal_event_is_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "hello")
    signaled = event(ev.WORKFLOW_EXECUTION_SIGNALED, len(events) + 1, signal_name="late")

    report = check_runs(items(run, [*events, signaled]))

    only_problem(report, run, 12, "an event (WORKFLOW_EXECUTION_SIGNALED) after the terminal event 11")


def test_a_completion_without_its_schedule_is_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "hello")
    completed = next(i for i, e in enumerate(events) if e["event_type"] == ev.ACTIVITY_TASK_COMPLETED)
    assert ev.attributes(events[completed])["scheduled_event_id"] == 5
    events[completed] = with_attrs(events[completed], scheduled_event_id=4)

    report = check_runs(items(run, events))

    only_problem(report, run, 7, "ACTIVITY_TASK_COMPLETED: scheduled_event_id 4 is a WORKFLOW_TASK_COMPLETED, not an "
                                 "earlier ACTIVITY_TASK_SCHEDULED")


def test_a_completion_naming_a_later_or_unknown_event_is_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "hello")
    events[6] = with_attrs(events[6], scheduled_event_id=99)

    report = check_runs(items(run, events))

    only_problem(report, run, 7, "scheduled_event_id 99 is no earlier event")


def test_a_second_close_of_one_activity_is_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "hello")
    events[7:] = []  # up to the activity's completion, event 7
    again = event(ev.ACTIVITY_TASK_FAILED, 8, failure={"message": "late"}, scheduled_event_id=5, started_event_id=6)

    report = check_runs(items(run, [*events, again]))

    only_problem(report, run, 8, "ACTIVITY_TASK_FAILED refers to event 5, already closed by event 7")


def test_a_timer_that_fires_twice_is_a_problem() -> None:
    engine = _run_workflows()
    engine.advance(60_000)
    run, events = history_of(engine, "sleepy")
    fired = next(e for e in events if e["event_type"] == ev.TIMER_FIRED)
    assert not check_runs(items(run, events)).problems
    twice = {**fired, "event_id": len(events) + 1}

    report = check_runs(items(run, [*events, twice]))

    only_problem(report, run, len(events) + 1, "TIMER_FIRED refers to event 5, already closed by event "
                                               f"{fired['event_id']}")


def test_a_fire_naming_another_timer_is_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "sleepy")
    fired = event(ev.TIMER_FIRED, len(events) + 1, timer_id="other", started_event_id=5)

    report = check_runs(items(run, [*events, fired]))

    only_problem(report, run, 6, "TIMER_FIRED: timer_id 'other', but event 5 started timer 'nap'")


def test_a_workflow_task_started_twice_is_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "sleepy")
    again = {**events[2], "event_id": 4}

    report = check_runs(items(run, [*events[:3], again]))

    only_problem(report, run, 4, "WORKFLOW_TASK_STARTED: a second start of event 2 (the first was event 3)")


def test_an_undecodable_value_is_a_problem_not_an_exception(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "sleepy")
    written = items(run, events)
    garbage = [(written[4][0], b"\xc3\x01not-an-event"), (history_key(*run, 6), b"{}")]

    report = check_runs([*written[:4], *garbage])

    # The unreadable records hold their ids (no gap is reported); only their content is lost.
    assert [(p.event_id, p.message.split(":")[0]) for p in report.problems] == [
        (5, "undecodable value"), (6, "undecodable value")]
    assert report.histories[run] == events[:4]


def test_another_record_type_in_the_history_is_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "hello")
    state = engine.workflow(NS, "hello")
    assert state is not None
    written = [*items(run, events), (history_key(*run, 12), encode_run(state.runs[run[2]]))]

    report = check_runs(written)

    only_problem(report, run, 12, "not a history event but a ostinato.state.MutableState")


def test_a_key_and_record_that_disagree_on_the_event_id_are_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "sleepy")
    written = items(run, events)
    written[4] = (written[4][0], encode({**events[4], "event_id": 9}))

    report = check_runs(written)

    only_problem(report, run, 5, "the record says event_id 9, its key 5")


def test_attributes_of_another_type_are_a_problem_not_an_exception(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "sleepy")
    events[4] = {**events[4], "event_type": ev.TIMER_FIRED}  # still TimerStartedEventAttributes

    report = check_runs(items(run, events))

    only_problem(report, run, 5, "TIMER_FIRED carries TimerStartedEventAttributes")
    assert report.histories[run] == events[:4]


def test_a_history_that_does_not_begin_with_its_start_is_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "sleepy")
    events[0] = event(ev.WORKFLOW_EXECUTION_SIGNALED, 1, signal_name="early")

    report = check_runs(items(run, events))

    assert (run, 1, "the first event must be WORKFLOW_EXECUTION_STARTED") in [
        (p.run, p.event_id, p.message) for p in report.problems]


def test_records_out_of_order_are_a_problem(engine: InMemoryEngine) -> None:
    run, events = history_of(engine, "sleepy")
    written = items(run, events)

    report = check_runs([*written[:2], written[3], written[2], written[4]])

    assert found(report)[0] == (4, "gap: event(s) 3 missing before it")
    assert (3, "out of order: arrives after event 4") in found(report)


def test_a_malformed_key_is_a_problem_filed_under_no_run(engine: InMemoryEngine) -> None:
    report = check_runs([("default/hello/00000000000000000001", b""), ("", b""), ("a/b/c/7", b""),
                         ("a/b%zz/c/00000000000000000001", b""), ("a/b/c/\udcff" + "0" * 19, b"")])

    assert [p.run for p in report.problems] == [NO_RUN] * 5
    assert [p.message.partition(": ")[2] for p in report.problems] == [
        "3 components, expected ns/workflow_id/run_id/event_id", "the record has no key",
        "event id '7' is not 20 digits", "malformed escape '%zz' in key component 'b%zz': expected %25 or %2F",
        "not UTF-8"]
    assert report.runs == 0


def test_a_successor_without_history_is_a_problem(engine: InMemoryEngine) -> None:
    first = next(run for run in engine.histories if run[1] == "looper" and run != run_of(engine, "looper"))

    report = check_runs(items(first, engine.histories[first]))

    successor = ev.attributes(engine.histories[first][-1])["new_execution_run_id"]
    only_problem(report, first, 5, f"names run {successor} as its successor, which has no history")


# -- nothing in the records makes it raise ---------------------------------------------------------------------

_CLEAN = records(_run_workflows())
_edits = st.lists(st.tuples(st.sampled_from(["drop", "repeat", "swap", "cut", "flip", "tombstone", "rekey"]),
                            st.integers(0, len(_CLEAN) - 1), st.integers(0, 10_000)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(_edits)
def test_damage_is_reported_never_raised(edits: list[tuple[str, int, int]]) -> None:
    damaged: list[Item] = list(_CLEAN)
    for op, i, n in edits:
        i %= len(damaged) or 1
        if not damaged:
            break
        key, value = damaged[i]
        if op == "drop":
            del damaged[i]
        elif op == "repeat":
            damaged.insert(n % len(damaged), damaged[i])
        elif op == "swap":
            j = n % len(damaged)
            damaged[i], damaged[j] = damaged[j], damaged[i]
        elif op == "cut" and value is not None:
            damaged[i] = (key, value[: n % (len(value) + 1)])
        elif op == "flip" and value:
            at = n % len(value)
            damaged[i] = (key, value[:at] + bytes([value[at] ^ (1 + n % 255)]) + value[at + 1:])
        elif op == "tombstone":
            damaged[i] = (key, None)
        elif op == "rekey":
            damaged[i] = (key[: n % (len(key) + 1)] + key[n % (len(key) + 1):][::-1], value)

    report = check_runs(damaged)

    # Some damage is invisible (a run cut short looks like a run still open); what matters is that none raises.
    assert report.records == len(damaged)
    assert report.ok or damaged != _CLEAN
