"""The rate limiter killed with -9 while it releases a rate-limited queue's activity tasks (issue 21): after the
restart every task is released exactly once (the task topic holds as many records as the held topic, read_committed)
and every activity ran. Deselected by default (`chaos_full`): the rate limit tests cover the path without the kill."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas.topics import TaskKind, held_topic_name, task_topic_name
from ostinato.worker import Worker
from tests.integration.rate_limit_app import FanOut, call_api
from tests.tools.servers import ServerProcess


def _records(bootstrap: str, topic: str) -> int:
    """Committed records on `topic` (read, not the watermarks: transaction markers take offsets)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex}",
                         "enable.partition.eof": True, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records, ended = 0, set()
        while len(ended) < len(partitions):
            msg = consumer.poll(10)
            assert msg is not None, f"{topic} did not reach its end"
            if msg.error() is None:
                records += 1
            else:
                ended.add(msg.partition())
        return records
    finally:
        consumer.close()


@pytest.mark.chaos_full
def test_a_rate_limiter_killed_mid_release_releases_each_task_once(kafka: KafkaCluster, topic_prefix: str,
                                                                    server: ServerProcess) -> None:
    queue, n = f"chaos-{uuid.uuid4().hex[:6]}", 40
    request = urllib.request.Request(
        f"{server.url}/api/v1/namespaces/default/task-queues/{queue}/rate-limit", method="PUT",
        data=json.dumps({"activities_per_second": 8}).encode(), headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).read()

    killed_at: list[float] = []

    async def go() -> list[float]:
        client = await Client.connect(server.url)
        async with Worker(client, task_queue=queue, workflows=[FanOut], activities=[call_api]):
            handle = await client.start_workflow(FanOut.run, n, id=f"chaos-{uuid.uuid4().hex[:6]}", task_queue=queue)
            await asyncio.sleep(2.5)  # the limiter is releasing (40 tasks at 8/s take 5 s)
            killed_at.append(time.time())
            server.kill()
            await asyncio.sleep(0.5)
            server.start()
            await asyncio.to_thread(server.wait_owning, 2)
            return await asyncio.wait_for(handle.result(), 120)

    started = time.monotonic()
    starts = asyncio.run(go())
    assert len(starts) == n
    assert min(starts) < killed_at[0] < max(starts)  # killed mid-release: some ran before, some after
    held = _records(kafka.bootstrap, held_topic_name(topic_prefix, queue))
    released = _records(kafka.bootstrap, task_topic_name(topic_prefix, queue, TaskKind.ACTIVITY))
    assert held == released == n, (held, released, time.monotonic() - started)
