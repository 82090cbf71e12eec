"""Worker versioning on the time-skipping environment: pinned runs stay on the build that started them (their
activities too), auto-upgrade runs move to the current build at their next task, new runs go to the current build,
and describe shows each run's behaviour and build. The same core routes on a cluster (tests/integration)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.client import WorkflowHandle
from ostinato.common import VersioningBehavior, WorkerDeploymentVersion
from ostinato.exceptions import RPCError
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker, WorkerDeploymentConfig
from tests.unit.sdk.support import run_async

Q = "versioned"


@activity.defn(name="where")
async def where_a() -> str:
    return "A"


@activity.defn(name="where")
async def where_b() -> str:
    return "B"


class _Waits:
    def __init__(self) -> None:
        self.go = False

    async def _run(self) -> str:
        first = workflow.info().get_current_build_id()
        await workflow.wait_condition(lambda: self.go)
        where = str(await workflow.execute_activity("where", start_to_close_timeout=workflow_timeout()))
        # the first activation's build, as it ran (a replay on another build sees it too), and the current one's
        assert workflow.info().get_current_build_id() == where, (first, where)
        return f"{first}>{where}" if first != where else where

    @workflow.signal
    def proceed(self) -> None:
        self.go = True


def workflow_timeout() -> Any:
    from datetime import timedelta

    return timedelta(seconds=30)


@workflow.defn(versioning_behavior=VersioningBehavior.PINNED)
class Pinned(_Waits):
    @workflow.run
    async def run(self) -> str:
        return await self._run()


@workflow.defn(versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class Upgrading(_Waits):
    @workflow.run
    async def run(self) -> str:
        return await self._run()


async def _first_task_done(handle: WorkflowHandle) -> None:
    for _ in range(500):
        if (await handle.describe()).versioning_info.build_id:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the run's first task never completed")


async def _builds(handle: WorkflowHandle) -> list[str]:
    return [e["attributes"][1]["build_id"] async for e in handle.fetch_history_events()
            if e["event_type"] == "WORKFLOW_TASK_COMPLETED"]


@run_async
async def test_pinned_runs_stay_on_their_build_and_auto_upgrade_runs_move() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        client = env.client
        await client.set_current_deployment_version(Q, "A")
        async with Worker(client, task_queue=Q, workflows=[Pinned, Upgrading], activities=[where_a], build_id="A",
                          use_worker_versioning=True):
            pinned = await client.start_workflow(Pinned.run, id="pinned", task_queue=Q)
            moving = await client.start_workflow(Upgrading.run, id="moving", task_queue=Q)
            await _first_task_done(pinned)
            await _first_task_done(moving)
            info = (await pinned.describe()).versioning_info
            assert (info.behavior, info.pinned_build, info.build_id) == (VersioningBehavior.PINNED, "A", "A")
            assert (await moving.describe()).versioning_info.behavior is VersioningBehavior.AUTO_UPGRADE

            described = await client.set_current_deployment_version(Q, "B")
            assert (described.current_build, described.revision) == ("B", 2)
            config = WorkerDeploymentConfig(WorkerDeploymentVersion("svc", "B"),
                                            default_versioning_behavior=VersioningBehavior.PINNED)
            async with Worker(client, task_queue=Q, workflows=[Pinned, Upgrading], activities=[where_b],
                              deployment_config=config):
                fresh = await client.start_workflow(Pinned.run, id="fresh", task_queue=Q)
                for handle in (pinned, moving, fresh):
                    await handle.signal("proceed")
                assert await pinned.result() == "A"  # its activity went to its own build's workers too
                assert await moving.result() == "A>B"  # began on A, moved to B at its next task
                assert await fresh.result() == "B"
        assert set(await _builds(pinned)) == {"A"}
        assert (await _builds(moving))[0] == "A" and (await _builds(moving))[-1] == "B"
        assert set(await _builds(fresh)) == {"B"}
        assert (await client.describe_task_queue_versioning(Q)).current_build == "B"


@run_async
async def test_a_ramp_and_its_promotion() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        client = env.client
        await client.set_current_deployment_version(Q, "A")
        ramp = await client.set_ramping_deployment_version(Q, "B", 100)
        assert (ramp.current_build, ramp.ramping_build, ramp.ramping_percentage) == ("A", "B", 100.0)
        async with Worker(client, task_queue=Q, workflows=[Upgrading], activities=[where_b], build_id="B",
                          use_worker_versioning=True):
            handle = await client.start_workflow(Upgrading.run, id="ramped", task_queue=Q)
            await handle.signal("proceed")
            assert await handle.result() == "B"
        promoted = await client.set_current_deployment_version(Q, "B")
        assert (promoted.current_build, promoted.ramping_build, promoted.ramping_percentage) == ("B", "", 0.0)


def test_worker_options_are_checked() -> None:
    async def check() -> None:
        async with await WorkflowEnvironment.start_time_skipping() as env:
            with pytest.raises(ValueError, match="needs a build_id"):
                Worker(env.client, task_queue=Q, workflows=[Pinned], use_worker_versioning=True)
            with pytest.raises(ValueError, match="not both"):
                Worker(env.client, task_queue=Q, workflows=[Pinned], build_id="A", deployment_config=(
                    WorkerDeploymentConfig(WorkerDeploymentVersion("svc", "A"))))
            with pytest.raises(ValueError, match="characters a Kafka topic name cannot carry"):
                Worker(env.client, task_queue=Q, workflows=[Pinned], build_id="a/b", use_worker_versioning=True)
            with pytest.raises(RPCError, match="characters"):
                await env.client.set_current_deployment_version(Q, "a b")

    asyncio.run(check())
