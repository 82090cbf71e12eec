"""`workflow.publish` exactly once (issue 22): a workflow publishes events to a Kafka topic while its server is
killed with SIGKILL; a read_committed consumer of the topic sees every event once, in workflow order, and a replay
of the history produces nothing again. A topic the servers do not allow fails the workflow task with the reason."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from ostinato import activity, workflow
from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import admin_client
from ostinato.services.admin.checker import check_history
from ostinato.services.admin.cluster import init_cluster
from ostinato.worker import Worker
from tests.tools.servers import ServerProcess
from tests.tools.topics import read_committed

SHARDS = 2
QUEUE = "egress"
PARTITIONS = 3


@activity.defn
async def tick(n: int) -> int:
    return n


@workflow.defn
class Publisher:
    @workflow.run
    async def run(self, job: dict) -> int:
        topic, count = job["topic"], job["count"]
        for i in range(count):
            await workflow.publish(topic, {"i": i}, headers={"source": "test"})
            if i % 10 == 9:  # a workflow task per ten events: the kill lands between some of them
                await workflow.execute_activity(tick, i, start_to_close_timeout=timedelta(seconds=30))
        return count


@workflow.defn
class Forbidden:
    @workflow.run
    async def run(self) -> None:
        await workflow.publish("payments", "nope")


def _read(kafka: KafkaCluster, topic: str) -> list[tuple[int, dict, dict]]:
    """(partition, value, headers) of every committed record."""
    return [(m.partition(), json.loads(m.value()), dict(m.headers() or []))
            for m in read_committed(kafka.bootstrap, topic)]


def _run(kafka: KafkaCluster, prefix: str, tmp_path: Path, count: int) -> None:
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    topic = f"{prefix}-orders-events"
    admin = admin_client(kafka.bootstrap)  # kept: a collected client cancels its futures
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    server = ServerProcess(kafka.bootstrap, prefix, tmp_path / "data", tmp_path / "server.log",
                           extra_args=("--egress-topics", f"{prefix}-orders-*")).start()
    server.wait_owning(SHARDS)
    workflow_id = f"publisher-{uuid.uuid4().hex[:6]}"

    async def scenario() -> tuple[int, str]:
        client = await Client.connect(server.url)
        async with Worker(client, task_queue=QUEUE, workflows=[Publisher, Forbidden], activities=[tick]):
            handle = await client.start_workflow(Publisher.run, {"topic": topic, "count": count}, id=workflow_id,
                                                 task_queue=QUEUE)
            # SIGKILL the server once a third of the events are out, and start it again.
            deadline = time.monotonic() + 120
            while len(await asyncio.to_thread(_read, kafka, topic)) < count // 3:
                assert time.monotonic() < deadline, "the workflow did not publish"
                await asyncio.sleep(0.2)
            await asyncio.to_thread(server.kill)
            await asyncio.to_thread(server.start)
            result = await asyncio.wait_for(handle.result(), 240)
            forbidden = await client.start_workflow(Forbidden.run, id=f"forbidden-{uuid.uuid4().hex[:6]}",
                                                    task_queue=QUEUE)
            deadline = time.monotonic() + 60
            reason = ""
            while not reason and time.monotonic() < deadline:
                for event in await forbidden.fetch_history():
                    if event["event_type"] == "WORKFLOW_TASK_FAILED":
                        reason = event["attributes"][1]["failure"]["message"]
                await asyncio.sleep(0.3)
            return result, reason

    try:
        result, reason = asyncio.run(scenario())
    finally:
        server.stop()
    assert result == count
    assert "not allowed on this cluster" in reason and "payments" in reason, reason
    records = _read(kafka, topic)
    assert [value["i"] for _, value, _ in records] == list(range(count)), "each event once, in workflow order"
    assert len({partition for partition, _, _ in records}) == 1  # keyless: the workflow's own partition
    assert all(headers == {"source": b"test"} for _, _, headers in records)
    report = check_history(kafka.bootstrap, prefix, timeout=60)
    assert report.ok, report.problems[:20]


def test_published_events_are_exactly_once_across_a_kill(kafka: KafkaCluster, topic_prefix: str,
                                                         tmp_path: Path) -> None:
    _run(kafka, topic_prefix, tmp_path, count=200)


@pytest.mark.chaos_full
def test_published_events_are_exactly_once_across_a_kill_full(kafka: KafkaCluster, topic_prefix: str,
                                                              tmp_path: Path) -> None:
    _run(kafka, topic_prefix, tmp_path, count=1_000)
