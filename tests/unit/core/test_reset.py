"""Reset in the pure core (through the in-memory engine, which keeps history): the new run's history is the base
run's up to the cut, a RESET_WORKFLOW task failure, the signals after the cut, and a fresh task; the base run is
terminated and names the new run; replaying the new run's history rebuilds its state."""

from __future__ import annotations

from typing import Any

import pytest

from ostinato.streams import events as ev
from ostinato.streams.appliers import replay
from ostinato.streams.engine import InMemoryEngine
from ostinato.streams.model import Workflow, durable_bytes
from tests.unit.core.test_engine import body, payload, started_run_id, types, workflow_task

Record = dict[str, Any]
NS, Q, WF = "default", "orders", "reset-1"
TIMER = ("StartTimerCommand", {"timer_id": "t", "start_to_fire_timeout_ms": 60_000})


def _history_with_two_tasks_and_signals(engine: InMemoryEngine) -> str:
    """Start, answer task 1 (a timer), signal twice, answer task 2 (nothing): a run to reset."""
    run_id = started_run_id(engine.start_workflow(NS, WF, "Order", Q))
    engine.complete_workflow_task(workflow_task(engine), [TIMER])
    engine.signal(NS, WF, "shipped", [payload("a")])
    engine.signal(NS, WF, "shipped", [payload("b")])
    engine.complete_workflow_task(workflow_task(engine))
    return run_id


def _task_of(engine: InMemoryEngine, run_id: str, queue: str = Q) -> Record:
    """The next workflow task of `run_id`, dropping stale ones of other runs as a worker would."""
    task = workflow_task(engine, queue)
    while task["run_id"] != run_id:
        task = workflow_task(engine, queue)
    return task


def _completed_ids(events: list[Record]) -> list[int]:
    return [e["event_id"] for e in events if e["event_type"] == ev.WORKFLOW_TASK_COMPLETED]


@pytest.mark.parametrize("how", ["event_id", "FIRST_WORKFLOW_TASK"])
def test_reset_to_first_task_copies_history_fails_the_task_and_reapplies_signals(how: str) -> None:
    engine = InMemoryEngine()
    base = _history_with_two_tasks_and_signals(engine)
    old = engine.history(NS, WF, base)
    first = _completed_ids(old)[0]
    reply = engine.reset(NS, WF, event_id=first, reason="bad deploy") if how == "event_id" else \
        engine.reset(NS, WF, reset_type=how, reason="bad deploy")
    kind, record = body(reply)
    assert kind == "Accepted", record
    new = record["run_id"]
    assert new != base and engine.current_run_id(NS, WF) == new
    history = engine.history(NS, WF, new)
    cut = first - 1
    assert history[:cut] == old[:cut]  # the copy, event for event
    assert types(history[cut:]) == [ev.WORKFLOW_TASK_FAILED, ev.WORKFLOW_EXECUTION_SIGNALED,
                                    ev.WORKFLOW_EXECUTION_SIGNALED, ev.WORKFLOW_TASK_SCHEDULED]
    failed = ev.attributes(history[cut])
    assert (failed["cause"], failed["base_run_id"], failed["new_run_id"]) == ("RESET_WORKFLOW", base, new)
    # The base run is terminated, and names the run that replaced it.
    assert types(engine.history(NS, WF, base))[-1] == ev.WORKFLOW_EXECUTION_TERMINATED
    base_state = engine.describe(NS, WF, base)
    assert base_state is not None and base_state["status"] == "TERMINATED" and base_state["reset_run_id"] == new
    # The new run's state is exactly the replay of its history.
    workflow = engine.workflow(NS, WF)
    assert workflow is not None
    rebuilt = replay(Workflow(NS, WF), [(new, e) for e in history])
    assert durable_bytes(rebuilt.runs[new]) == durable_bytes(workflow.runs[new])
    # The workflow goes on: a worker gets the new run's task with its whole history.
    task = _task_of(engine, new)
    engine.complete_workflow_task(task, [("CompleteWorkflowExecutionCommand", {"result": [payload("done")]})])
    assert types(engine.history(NS, WF, new))[-1] == ev.WORKFLOW_EXECUTION_COMPLETED


def test_reset_without_reapply_drops_later_signals_and_last_type_keeps_the_timer() -> None:
    engine = InMemoryEngine()
    _history_with_two_tasks_and_signals(engine)
    _, record = body(engine.reset(NS, WF, reset_type="FIRST_WORKFLOW_TASK", reapply_signals=False))
    assert ev.WORKFLOW_EXECUTION_SIGNALED not in types(engine.history(NS, WF, record["run_id"]))
    # Reset the new run to its last task: the timer an earlier task started is in the copy, so still pending.
    engine.complete_workflow_task(_task_of(engine, record["run_id"]), [TIMER])
    engine.signal(NS, WF, "shipped", [payload("c")])
    engine.complete_workflow_task(_task_of(engine, record["run_id"]))
    _, again = body(engine.reset(NS, WF, reset_type="LAST_WORKFLOW_TASK"))
    state = engine.describe(NS, WF, again["run_id"])
    assert state is not None and [t["timer_id"] for t in state["timers"]] == ["t"]


def test_reset_to_a_closed_run_and_a_retried_request() -> None:
    engine = InMemoryEngine()
    base = _history_with_two_tasks_and_signals(engine)
    engine.terminate(NS, WF, "gone")
    first = body(engine.reset(NS, WF, reset_type="FIRST_WORKFLOW_TASK", run_id=base, request_id="r-1"))[1]
    again = body(engine.reset(NS, WF, reset_type="FIRST_WORKFLOW_TASK", run_id=base, request_id="r-1"))[1]
    assert first["run_id"] == again["run_id"]  # the same request resets once
    assert sum(1 for e in engine.history(NS, WF, base) if e["event_type"] == ev.WORKFLOW_EXECUTION_TERMINATED) == 1


@pytest.mark.parametrize(("event_id", "reset_type", "code"), [
    (3, "UNSPECIFIED", "INVALID_ARGUMENT"),  # WORKFLOW_TASK_STARTED, not a completed task
    (999, "UNSPECIFIED", "INVALID_ARGUMENT"),
    (0, "UNSPECIFIED", "INVALID_ARGUMENT"),
])
def test_reset_refuses_points_that_are_not_completed_tasks(event_id: int, reset_type: str, code: str) -> None:
    engine = InMemoryEngine()
    _history_with_two_tasks_and_signals(engine)
    kind, record = body(engine.reset(NS, WF, event_id=event_id, reset_type=reset_type))
    assert (kind, record["code"]) == ("Rejected", code)


def test_reset_of_an_unknown_workflow_is_not_found() -> None:
    kind, record = body(InMemoryEngine().reset(NS, "nobody", reset_type="LAST_WORKFLOW_TASK"))
    assert (kind, record["code"]) == ("Rejected", "NOT_FOUND")


def test_reset_with_a_child_in_flight_is_refused() -> None:
    engine = InMemoryEngine()
    started_run_id(engine.start_workflow(NS, WF, "Order", Q))
    engine.complete_workflow_task(workflow_task(engine), [("StartChildWorkflowExecutionCommand", {
        "workflow_id": "child-1", "workflow_type": "Child", "task_queue": "kids"})])
    engine.signal(NS, WF, "shipped", [payload("a")])
    engine.complete_workflow_task(workflow_task(engine))
    kind, record = body(engine.reset(NS, WF, reset_type="LAST_WORKFLOW_TASK"))
    assert (kind, record["code"]) == ("Rejected", "INVALID_ARGUMENT"), record


def test_reset_readmits_updates_accepted_after_the_cut_so_the_new_code_handles_them() -> None:
    """Temporal's default reapply type re-applies updates too: the new run's first task carries the update the base
    run accepted after the point; without reapply it does not."""
    from ostinato.schemas import wire

    for reapply in (True, False):
        engine = InMemoryEngine()
        wf = f"{WF}-{reapply}"
        base = started_run_id(engine.start_workflow(NS, wf, "Order", Q))
        engine.complete_workflow_task(workflow_task(engine), [TIMER])
        engine.submit(wire.command(NS, wf, ("ostinato.command.UpdateWorkflowExecution", {
            "update_id": "u1", "name": "add", "input": [payload("3")], "header": {}, "first_execution_run_id": ""}),
            run_id=base, request_id="upd-1", identity="client", time_ms=engine.clock.now_ms))
        engine.run_until_idle()
        engine.complete_workflow_task(workflow_task(engine), [("AcceptUpdateCommand", {"update_id": "u1"})])
        assert ev.WORKFLOW_EXECUTION_UPDATE_ACCEPTED in types(engine.history(NS, wf, base))
        first = _completed_ids(engine.history(NS, wf, base))[0]
        kind, record = body(engine.reset(NS, wf, event_id=first, reapply_signals=reapply))
        assert kind == "Accepted", record
        new = record["run_id"]
        run = engine.workflow(NS, wf).runs[new]  # type: ignore[union-attr]
        assert [u["update_id"] for u in run.admitted_updates] == (["u1"] if reapply else [])
        task = _task_of(engine, new)
        assert [u["update_id"] for u in task.get("updates") or []] == (["u1"] if reapply else [])
        assert ev.WORKFLOW_EXECUTION_UPDATE_ACCEPTED not in types(engine.history(NS, wf, new))
