"""Reset on both engines: a workflow broken at step 3 by a bad deploy is reset to before that step (or to its first
workflow task) and finishes with the fixed code, still seeing the signals it received."""

from __future__ import annotations

import pytest

from ostinato.client import ResetType
from ostinato.exceptions import RPCError, WorkflowFailureError
from ostinato.worker import Replayer
from tests.e2e.sdk_scenarios.conftest import ScenarioEnv
from tests.e2e.sdk_scenarios.reset_workflows import FulfilBuggy, FulfilFixed, pack, pick
from tests.e2e.sdk_scenarios.test_scenarios import attrs, kinds, only

ACTIVITIES = [pick, pack]


async def _broken_run(env: ScenarioEnv) -> tuple[str, str]:
    """Run the buggy code to its failure after two signals: (workflow id, run id)."""
    async with env.worker(workflows=[FulfilBuggy], activities=ACTIVITIES):
        handle = await env.client.start_workflow(FulfilBuggy.run, id=env.workflow_id("fulfil"),
                                                 task_queue=env.task_queue)
        await handle.signal(FulfilBuggy.add, "apple")
        await handle.signal(FulfilBuggy.add, "pear")
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    assert handle.run_id is not None
    return handle.id, handle.run_id


async def test_reset_before_step_three_continues_with_fixed_code(env: ScenarioEnv) -> None:
    workflow_id, base = await _broken_run(env)
    handle = env.client.get_workflow_handle(workflow_id, run_id=base)
    history = await handle.fetch_history()
    point = only(history, "WORKFLOW_TASK_COMPLETED")[-1]["event_id"]  # the task that failed the workflow
    new = await handle.reset(point, reason="fixed step 3")
    assert new != base
    async with env.worker(workflows=[FulfilFixed], activities=ACTIVITIES):
        result = await env.client.get_workflow_handle(workflow_id, run_id=new).result()
    assert result == "picked apple,pear; packed apple,pear; shipped apple,pear"
    copied = await env.client.get_workflow_handle(workflow_id, run_id=new).fetch_history()
    assert copied[:point - 1] == history[:point - 1]  # the old history up to the cut, event for event
    failed = copied[point - 1]
    assert (failed["event_type"], attrs(failed)["cause"]) == ("WORKFLOW_TASK_FAILED", "RESET_WORKFLOW")
    assert (attrs(failed)["base_run_id"], attrs(failed)["new_run_id"]) == (base, new)
    assert len(only(copied, "ACTIVITY_TASK_COMPLETED")) == 2  # steps 1 and 2 were not run again
    # The new run's history replays with the fixed code: the copy is what that code commands up to the cut.
    assert Replayer(workflows=[FulfilFixed]).replay(copied, workflow_id=workflow_id, run_id=new).ok
    assert (await handle.describe()).reset_run_id == new
    assert kinds(await handle.fetch_history())[-1] == "WORKFLOW_EXECUTION_FAILED"  # the base run is untouched


async def test_reset_to_the_first_task_reapplies_the_signals(env: ScenarioEnv) -> None:
    workflow_id, base = await _broken_run(env)
    handle = env.client.get_workflow_handle(workflow_id, run_id=base)
    new = await handle.reset(reset_type=ResetType.FIRST_WORKFLOW_TASK, reason="fixed step 3")
    async with env.worker(workflows=[FulfilFixed], activities=ACTIVITIES):
        result = await env.client.get_workflow_handle(workflow_id, run_id=new).result()
    assert result == "picked apple,pear; packed apple,pear; shipped apple,pear"
    history = await env.client.get_workflow_handle(workflow_id, run_id=new).fetch_history()
    signals = [env.client.data_converter.decode_one(attrs(e)["input"]) for e in
               only(history, "WORKFLOW_EXECUTION_SIGNALED")]
    assert signals == ["apple", "pear"]
    with pytest.raises(RPCError):  # a point that is no completed workflow task
        await handle.reset(1)
