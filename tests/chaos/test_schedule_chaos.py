"""A schedule survives `kill -9` of its server (issue 21): an every-second schedule runs, the server is killed and
started again, and the schedule's history shows every second's action taken exactly once (the ones due while the
server was down caught up on restart), each action's workflow with exactly one run, and the history checker clean."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from ostinato.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)
from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.checker import check_history
from ostinato.services.admin.cluster import init_cluster
from ostinato.worker import Worker
from tests.e2e.sdk_scenarios.schedule_workflows import Stamp
from tests.tools.servers import ServerProcess

SHARDS = 2
QUEUE = "schedules"


async def _started_actions(client: Client, schedule_id: str) -> list[dict]:
    """Every action the schedule's history records as started, in order."""
    history = await client.get_workflow_handle(f"ostinato-schedule:{schedule_id}").fetch_history()
    return [action for event in history if event["event_type"] == "SCHEDULE_PROGRESSED"
            for action in event["attributes"][1]["started"]]


def _run(kafka: KafkaCluster, prefix: str, tmp_path: Path, seconds_before: float, seconds_down: float,
         seconds_after: float) -> None:
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    server = ServerProcess(kafka.bootstrap, prefix, tmp_path / "data", tmp_path / "server.log").start()
    server.wait_owning(SHARDS)
    schedule_id = f"every-second-{uuid.uuid4().hex[:6]}"

    async def scenario() -> tuple[list[dict], list[list[dict]]]:
        client = await Client.connect(server.url)
        async with Worker(client, task_queue=QUEUE, workflows=[Stamp]):
            handle = await client.create_schedule(schedule_id, Schedule(
                action=ScheduleActionStartWorkflow(Stamp.run, "tick", id=f"tick-{schedule_id}", task_queue=QUEUE),
                spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=1))]),
                # ALLOW_ALL: the seconds missed while down all start on restart (SKIP would skip all but one).
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL)))
            await asyncio.sleep(seconds_before)
            await asyncio.to_thread(server.kill)
            await asyncio.sleep(seconds_down)  # actions fall due while nobody owns the shard
            await asyncio.to_thread(server.start)
            await asyncio.to_thread(server.wait_owning, SHARDS)
            await asyncio.sleep(seconds_after)
            await handle.pause(note="enough")
            deadline = time.monotonic() + 60
            while (await handle.describe()).info.running_actions:
                assert time.monotonic() < deadline, "the schedule's runs did not finish"
                await asyncio.sleep(0.2)
            actions = await _started_actions(client, schedule_id)
            histories = [await client.get_workflow_handle(a["workflow_id"]).fetch_history() for a in actions]
            await handle.delete()
            return actions, histories

    try:
        actions, histories = asyncio.run(scenario())
    finally:
        server.stop()
    nominal = [a["schedule_time_ms"] for a in actions]
    assert len(nominal) >= seconds_before + seconds_down, nominal
    assert [b - a for a, b in itertools.pairwise(nominal)] == [1000] * (len(nominal) - 1), "a second missed or doubled"
    assert len({a["workflow_id"] for a in actions}) == len(actions)
    for history in histories:  # each action's workflow ran once, to completion, started by the schedule
        assert [e["event_type"] for e in history].count("WORKFLOW_EXECUTION_STARTED") == 1
        assert history[-1]["event_type"] == "WORKFLOW_EXECUTION_COMPLETED"
    report = check_history(kafka.bootstrap, prefix, timeout=60)
    assert report.ok, report.problems[:20]


def test_schedule_survives_a_kill(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    _run(kafka, topic_prefix, tmp_path, seconds_before=2, seconds_down=2, seconds_after=2)


@pytest.mark.chaos_full
def test_schedule_survives_a_kill_full(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    _run(kafka, topic_prefix, tmp_path, seconds_before=20, seconds_down=15, seconds_after=20)
