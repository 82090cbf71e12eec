"""The commands batch jobs and resets send: every operation makes a Command the codec accepts, with the request id
a retried chunk repeats; bad reset points and operations are refused before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from ostinato.schemas import codec, wire
from ostinato.sdk.batch import BatchCancel, BatchReset, BatchSignal, BatchTerminate, operation_record
from ostinato.sdk.batch_workflow import _command_body
from ostinato.sdk.client import ResetType
from ostinato.sdk.data import DEFAULT
from ostinato.sdk.reset import reset_body


class _Client:
    data_converter = DEFAULT


@pytest.mark.parametrize(("action", "command"), [
    (BatchTerminate("gc"), "TerminateWorkflowExecution"),
    (BatchCancel(), "RequestCancelWorkflowExecution"),
    (BatchSignal("approve", [1, "two"]), "SignalWorkflowExecution"),
    (BatchReset("first", "fix"), "ResetWorkflowExecution"),
    (BatchReset("LAST_WORKFLOW_TASK", reapply=False), "ResetWorkflowExecution"),
])
def test_each_operation_is_a_valid_command(action: Any, command: str) -> None:
    body = _command_body(_Client(), operation_record(action))
    assert body[0] == wire.command_type(command)
    record = wire.command("default", "order-1", body, run_id="r-1", request_id="batch/job-1/r-1",
                          identity="batch/job-1", time_ms=0)
    name, decoded = codec.decode(codec.encode(wire.COMMAND, record))
    assert (name, decoded["request_id"], decoded["body"][0]) == (wire.COMMAND, "batch/job-1/r-1", body[0])


def test_a_bad_reset_type_is_refused() -> None:
    with pytest.raises(ValueError, match="reset_type"):
        operation_record(BatchReset("middle"))


@pytest.mark.parametrize(("event_id", "reset_type", "expected"), [
    (7, None, {"event_id": 7, "reset_type": "UNSPECIFIED"}),
    (None, ResetType.FIRST_WORKFLOW_TASK, {"event_id": 0, "reset_type": "FIRST_WORKFLOW_TASK"}),
    (None, "last", {"event_id": 0, "reset_type": "LAST_WORKFLOW_TASK"}),
])
def test_reset_bodies(event_id: int | None, reset_type: Any, expected: dict[str, Any]) -> None:
    body = reset_body(event_id, reset_type, "why", True)
    assert {k: body[k] for k in expected} == expected
    codec.encode(wire.command_type("ResetWorkflowExecution"), body)  # the wire takes it


@pytest.mark.parametrize(("event_id", "reset_type"), [(None, None), (3, "first"), (0, None), (-1, None)])
def test_reset_needs_exactly_one_valid_point(event_id: int | None, reset_type: Any) -> None:
    with pytest.raises(ValueError):
        reset_body(event_id, reset_type, "", True)


def test_a_job_acts_in_its_own_namespace_under_its_own_id_whatever_its_spec_says() -> None:
    """The server's batch worker may write every namespace: a spec naming another namespace (or job) is overruled
    by the job run's own, so a writer of one namespace cannot act on another's runs through a job."""
    import asyncio

    from ostinato import activity
    from ostinato.sdk.batch_workflow import BATCH_TASK_QUEUE, BatchOperation
    from ostinato.testing import WorkflowEnvironment
    from ostinato.worker import Worker

    seen: list[tuple[str, str]] = []

    @activity.defn(name="ostinato.batch.count")
    async def count(spec: dict[str, Any]) -> int:
        seen.append((spec["namespace"], spec["job_id"]))
        return 0

    @activity.defn(name="ostinato.batch.page")
    async def page(args: dict[str, Any]) -> dict[str, Any]:
        seen.append((args["spec"]["namespace"], args["spec"]["job_id"]))
        return {"targets": [], "token": ""}

    async def go() -> None:
        async with await WorkflowEnvironment.start_time_skipping() as env, Worker(
                env.client, task_queue=BATCH_TASK_QUEUE, workflows=[BatchOperation], activities=[count, page]):
            spec = {"namespace": "someone-else", "job_id": "not-me", "query": "", "operation": {"kind": "cancel"}}
            await env.client.execute_workflow(BatchOperation.run, spec, id="job-1", task_queue=BATCH_TASK_QUEUE)

    asyncio.run(go())
    assert seen and set(seen) == {("default", "job-1")}
