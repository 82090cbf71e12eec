"""Update deciders: admission, speculative tasks that leave no trace when every update is rejected, acceptance and
completion in history, de-duplication, limits, updates arriving mid-task, closing runs, and update-with-start.
Every step goes through `Harness`, which replays the history and compares the durable state byte for byte."""

from __future__ import annotations

from typing import Any

from ostinato.streams.actions import DispatchWorkflowTask
from ostinato.streams.config import Config
from ostinato.streams.records import workflow_task
from ostinato.streams.writer import Step
from tests.unit.core.support import wf_command
from tests.unit.core.task_support import (
    COMPLETE,
    Command,
    Flow,
    Record,
    failure,
    of,
    payload,
    rejected,
    reply,
    started_flow,
    task_failed_reply,
    types,
    with_limits,
)

TASK_EVENTS = ["WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED"]


def idle_flow(config: Config | None = None) -> Flow:
    flow = started_flow(config)
    flow.complete_task()
    assert flow.run.workflow_task is None
    return flow


def update(flow: Flow, update_id: str = "u1", name: str = "add", **envelope: Any) -> Step:
    return flow.send("UpdateWorkflowExecution", {"update_id": update_id, "name": name, "input": [payload(b"3")]},
                     **envelope)


def accept(update_id: str = "u1") -> Command:
    return wf_command("AcceptUpdateCommand", {"update_id": update_id})


def complete(update_id: str = "u1", **outcome: Any) -> Command:
    return wf_command("CompleteUpdateCommand", {"update_id": update_id, **outcome})


def rejection(update_id: str = "u1", message: str = "too many items") -> Record:
    return {"update_id": update_id, "failure": failure(message)}


def carried(flow: Flow) -> list[str]:
    task = flow.run.workflow_task
    assert task is not None
    action = DispatchWorkflowTask(flow.run.namespace, flow.run.workflow_id, flow.run_id, task.task_queue,
                                  task.scheduled_event_id, task.started_event_id, task.attempt,
                                  flow.run.last_workflow_task_started_event_id, task.transient)
    history = [e for r, e in flow.history if r == flow.run_id]
    record = workflow_task(flow.run, action, history, flow.config)
    assert record is not None
    return [u["update_id"] for u in record["updates"]]


def test_an_update_to_an_idle_run_is_admitted_and_carried_by_a_speculative_task() -> None:
    flow = idle_flow()
    before = len(flow.history)
    step = update(flow)
    assert reply(step)[0].endswith("Accepted") and not step.events and len(flow.history) == before
    task = flow.run.workflow_task
    assert task is not None and task.transient and task.speculative and task.attempt == 1
    assert len(of(step, DispatchWorkflowTask)) == 1 and carried(flow) == ["u1"]


def test_a_speculative_task_whose_updates_are_all_rejected_leaves_no_event() -> None:
    flow = idle_flow()
    events = flow.events()
    update(flow)
    step = flow.complete_task(rejected_updates=[rejection()])
    assert not step.events and flow.events() == events and flow.run.workflow_task is None
    assert [u["update_id"] for u in flow.run.rejected_updates] == ["u1"]
    assert flow.run.rejected_updates[0]["failure"]["message"] == "too many items"
    assert not flow.run.admitted_updates and not flow.run.updates


def test_an_accepted_update_is_written_with_its_task_and_completes_later() -> None:
    flow = idle_flow()
    update(flow)
    step = flow.complete_task(accept())
    assert types(step) == [*TASK_EVENTS, "WORKFLOW_EXECUTION_UPDATE_ACCEPTED"]
    accepted = step.events[-1][1]
    assert accepted["attributes"][1]["name"] == "add" and accepted["attributes"][1]["input"] == [payload(b"3")]
    assert flow.run.updates["u1"].accepted_event_id == accepted["event_id"]
    assert not flow.run.admitted_updates and flow.run.workflow_task is None
    flow.signal("go")  # a later task completes it
    step = flow.complete_task(complete(result=[payload(b"4")]))
    assert types(step)[-1] == "WORKFLOW_EXECUTION_UPDATE_COMPLETED"
    assert flow.run.updates["u1"].completed_event_id == step.events[-1][1]["event_id"]


def test_accept_and_complete_in_one_answer() -> None:
    flow = idle_flow()
    update(flow)
    step = flow.complete_task(accept(), complete(failure=failure("refused by the handler")))
    assert types(step)[-2:] == ["WORKFLOW_EXECUTION_UPDATE_ACCEPTED", "WORKFLOW_EXECUTION_UPDATE_COMPLETED"]
    assert step.events[-1][1]["attributes"][1]["failure"]["message"] == "refused by the handler"


def test_the_same_update_id_joins_the_first_update() -> None:
    flow = idle_flow()
    update(flow)
    again = update(flow)
    assert reply(again)[0].endswith("Accepted") and len(flow.run.admitted_updates) == 1
    flow.complete_task(accept(), complete())
    assert reply(update(flow))[0].endswith("Accepted") and flow.run.workflow_task is None  # completed: known
    flow2 = idle_flow()
    update(flow2)
    flow2.complete_task(rejected_updates=[rejection()])
    assert reply(update(flow2))[0].endswith("Accepted") and not flow2.run.admitted_updates  # rejected: known


def test_updates_on_closed_or_unknown_runs_are_refused() -> None:
    flow = started_flow()
    flow.complete_task(COMPLETE)
    assert rejected(update(flow)) == "ALREADY_CLOSED"
    assert rejected(update(Flow())) == "NOT_FOUND"
    assert rejected(update(idle_flow(), update_id="")) == "INVALID_ARGUMENT"


def test_an_update_arriving_while_a_task_runs_waits_for_the_next_one() -> None:
    flow = started_flow()  # its first task is in flight
    update(flow)
    assert carried(flow) == []  # the task in flight was dispatched before
    step = flow.complete_task()
    assert flow.run.workflow_task is not None and flow.run.workflow_task.speculative
    assert len(of(step, DispatchWorkflowTask)) == 1 and carried(flow) == ["u1"]


def test_a_closing_answer_must_see_updates_that_arrived_while_it_ran() -> None:
    flow = started_flow()
    update(flow)
    step = flow.complete_task(COMPLETE)
    assert "UNHANDLED_COMMAND" in task_failed_reply(step) and flow.run.open


def test_an_update_the_answer_does_not_mention_is_refused_as_not_handled() -> None:
    flow = idle_flow()
    update(flow)
    flow.complete_task(wf_command("StartTimerCommand", {"timer_id": "t", "start_to_fire_timeout_ms": 50}))
    assert [u["failure"]["type"] for u in flow.run.rejected_updates] == ["UpdateNotHandled"]


def test_answers_about_updates_the_task_did_not_carry_fail_the_task() -> None:
    flow = idle_flow()
    update(flow)
    assert "BAD_COMMAND" in task_failed_reply(flow.complete_task(accept("other")))
    flow2 = idle_flow()
    update(flow2)
    assert "BAD_COMMAND" in task_failed_reply(flow2.complete_task(complete()))
    flow3 = idle_flow()
    update(flow3)
    assert "BAD_COMMAND" in task_failed_reply(flow3.complete_task(accept(), rejected_updates=[rejection()]))


def test_updates_in_flight_are_limited() -> None:
    flow = idle_flow(with_limits(max_updates_in_flight=2))
    update(flow, "u1")
    update(flow, "u2")
    assert rejected(update(flow, "u3")) == "LIMIT_EXCEEDED"


def test_an_event_during_a_speculative_task_turns_it_into_a_real_one_carrying_the_update() -> None:
    flow = idle_flow()
    update(flow)
    step = flow.signal("poke")
    task = flow.run.workflow_task
    assert task is not None and not task.transient and not task.speculative
    assert types(step) == ["WORKFLOW_EXECUTION_SIGNALED", "WORKFLOW_TASK_SCHEDULED"] and carried(flow) == ["u1"]


def test_a_speculative_task_that_times_out_is_retried_carrying_its_updates() -> None:
    flow = idle_flow()
    update(flow)
    flow.fire_kind("WORKFLOW_TASK_TIMEOUT")
    task = flow.run.workflow_task
    assert task is not None and task.transient and not task.speculative and task.attempt == 2
    assert carried(flow) == ["u1"]


def test_a_run_that_closes_refuses_its_admitted_updates() -> None:
    flow = idle_flow()
    update(flow)
    flow.send("TerminateWorkflowExecution", {"reason": "ops"}, run_id=flow.run_id)
    assert not flow.run.admitted_updates
    assert [u["failure"]["type"] for u in flow.run.rejected_updates] == ["WorkflowClosed"]


def _update_with_start(flow: Flow, policy: str = "USE_EXISTING", update_id: str = "u1") -> Step:
    return flow.send("UpdateWithStartWorkflowExecution", {
        "start": {"workflow_type": "Order", "task_queue": "orders", "id_conflict_policy": policy},
        "update": {"update_id": update_id, "name": "add"}})


def test_update_with_start_starts_a_run_whose_first_task_carries_the_update() -> None:
    flow = Flow()
    step = _update_with_start(flow)
    assert reply(step) == ("ostinato.reply.WorkflowStarted", {"run_id": flow.run_id, "started": True})
    assert types(step) == ["WORKFLOW_EXECUTION_STARTED", "WORKFLOW_TASK_SCHEDULED"] and carried(flow) == ["u1"]


def test_update_with_start_updates_a_running_workflow_with_use_existing() -> None:
    flow = idle_flow()
    run_id = flow.run_id
    step = _update_with_start(flow)
    assert reply(step) == ("ostinato.reply.WorkflowStarted", {"run_id": run_id, "started": False})
    assert carried(flow) == ["u1"] and flow.run_id == run_id


def test_update_with_start_policies() -> None:
    flow = idle_flow()
    assert rejected(_update_with_start(flow, "FAIL")) == "ALREADY_STARTED"
    assert rejected(_update_with_start(flow, "TERMINATE_EXISTING")) == "INVALID_ARGUMENT"


def test_update_with_start_refuses_a_cron_workflow() -> None:
    """Its first run would wait for the schedule's next time, and the update with it (Temporal refuses it too)."""
    flow = Flow()
    step = flow.send("UpdateWithStartWorkflowExecution", {
        "start": {"workflow_type": "Order", "task_queue": "orders", "id_conflict_policy": "FAIL",
                  "cron_schedule": "@yearly"},
        "update": {"update_id": "u1", "name": "add"}})
    assert rejected(step) == "INVALID_ARGUMENT" and types(step) == []
