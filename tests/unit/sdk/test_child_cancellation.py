"""Child cancellation as Temporal's Python SDK has it (issue 17): `ChildWorkflowHandle.cancel()`, the four
`ChildWorkflowCancellationType`s, and a parent's cancellation reaching the child it awaits."""

from __future__ import annotations

import asyncio

import pytest

from ostinato import workflow
from ostinato.client import WorkflowExecutionStatus
from ostinato.exceptions import CancelledError, ChildWorkflowError, WorkflowFailureError
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker
from ostinato.workflow import ChildWorkflowCancellationType, ParentClosePolicy
from tests.unit.sdk.support import run_async

Q = "children"



@workflow.defn
class Forever:
    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


@workflow.defn
class CancelsItsChild:
    @workflow.run
    async def run(self, kind: str) -> str:
        child = await workflow.start_child_workflow(Forever.run, id=f"{workflow.info().workflow_id}-child",
                                                    cancellation_type=ChildWorkflowCancellationType(kind))
        assert child.cancel() and not child.cancel()
        try:
            await child
        except ChildWorkflowError as error:
            return f"child error caused by {type(error.cause).__name__}"
        except asyncio.CancelledError:
            return "cancelled at once"
        return "no error"


@workflow.defn
class AwaitsItsChild:
    @workflow.run
    async def run(self, kind: str) -> None:
        await workflow.execute_child_workflow(Forever.run, id=f"{workflow.info().workflow_id}-child",
                                              cancellation_type=ChildWorkflowCancellationType(kind),
                                              parent_close_policy=ParentClosePolicy.ABANDON)


async def _status(env: WorkflowEnvironment, workflow_id: str) -> WorkflowExecutionStatus | None:
    return (await env.client.get_workflow_handle(workflow_id).describe()).status


@pytest.mark.parametrize(("kind", "answer", "child"), [
    ("WAIT_CANCELLATION_COMPLETED", "child error caused by CancelledError", "CANCELED"),
    ("WAIT_CANCELLATION_REQUESTED", "cancelled at once", "CANCELED"),
    # Asked, but the parent returns at once, and closing it terminates the child (parent close policy TERMINATE)
    # before the child's own cancellation completes.
    ("TRY_CANCEL", "cancelled at once", "TERMINATED"),
    ("ABANDON", "cancelled at once", "TERMINATED"),  # never asked; the parent close policy ends it
])
@run_async
async def test_a_parent_cancels_its_child(kind: str, answer: str, child: str) -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[CancelsItsChild, Forever]):
        workflow_id = f"parent-{kind.lower()}"
        assert await env.client.execute_workflow(CancelsItsChild.run, kind, id=workflow_id, task_queue=Q) == answer
        handle = env.client.get_workflow_handle(f"{workflow_id}-child")
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        assert (await _status(env, f"{workflow_id}-child")) == child
        asked = any(e["event_type"] == "WORKFLOW_EXECUTION_CANCEL_REQUESTED" for e in await handle.fetch_history())
        assert asked == (kind != "ABANDON")


@pytest.mark.parametrize(("kind", "child"), [
    ("WAIT_CANCELLATION_COMPLETED", "CANCELED"),
    ("TRY_CANCEL", "CANCELED"),
    ("ABANDON", "RUNNING"),  # parent close policy ABANDON: nobody ends it
])
@run_async
async def test_a_cancelled_parent_reaches_the_child_it_awaits(kind: str, child: str) -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[AwaitsItsChild, Forever]):
        workflow_id = f"awaits-{kind.lower()}"
        parent = await env.client.start_workflow(AwaitsItsChild.run, kind, id=workflow_id, task_queue=Q)
        child_handle = env.client.get_workflow_handle(f"{workflow_id}-child")
        for _ in range(200):  # until the child runs
            try:
                if (await child_handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    break
            except Exception:  # noqa: BLE001 - not started yet
                pass
            await asyncio.sleep(0.01)
        await parent.cancel()
        with pytest.raises(WorkflowFailureError) as ended:
            await parent.result()
        assert ended.value.status == "CANCELED"  # a failure caused by the cancellation cancels the run
        if child == "RUNNING":
            assert (await _status(env, f"{workflow_id}-child")) == WorkflowExecutionStatus.RUNNING
        else:
            with pytest.raises(WorkflowFailureError) as child_ended:
                await child_handle.result()
            assert child_ended.value.status == child
            assert isinstance(child_ended.value.cause, CancelledError)
