"""Owner reads see the writes their clients were told of, on a real broker.

A client learns a command is done from a record of the transaction that did it (the start's reply, or its history
read committed), so as soon as the commit is on the broker. The processor thread writes that transaction to the
shard's store only when its commit call has returned and, with pipelined transactions, when it has finished what
it was deciding meanwhile. A read in that gap found nothing: CI saw `result` of a run just started answer 404 "no
workflow". Here every commit returns a second late, so each transaction is readable on the broker for a second
before it lands: a read in that second must wait for the landing, not deny the run.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from confluent_kafka import Consumer, TopicPartition

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import base_config
from ostinato.services.admin.cluster import init_cluster, read_settings
from ostinato.services.frontend import api
from ostinato.services.frontend.reads import ReadContext, add_routes
from ostinato.services.history.processor import ProcessorOptions
from ostinato.services.history.waiters import HistoryWaiters
from tests.tools.held_commits import HeldCommitProcessor
from tests.tools.workload import start_workflows, wait_closed

LATE_S = 1.0
NS = "default"


def _committed_history_of(bootstrap: str, topic: str, workflow_id: str, timeout: float) -> float:
    """Wait until the workflow's first history record is readable committed (what its client sees); when."""
    consumer = Consumer({**base_config(bootstrap, "ryw-watch"), "group.id": "ryw-watch", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0)])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None and workflow_id.encode() in (msg.key() or b""):
                return time.monotonic()
    finally:
        consumer.close()
    raise TimeoutError(f"no committed history of {workflow_id} in {timeout:.0f} s")


@pytest.mark.parametrize("pipeline", [True, False], ids=["pipelined", "in-series"])
def test_a_read_right_after_the_commit_finds_the_run(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path,
                                                     pipeline: bool) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=1)
    settings = read_settings(kafka.bootstrap, topic_prefix)
    assert settings is not None
    waiters = HistoryWaiters()
    options = ProcessorOptions(data_dir=tmp_path / "processor", pipeline=pipeline)
    options.on_history = waiters.notify
    proc = HeldCommitProcessor(kafka.bootstrap, settings, options, hold_s=LATE_S, after=True)
    thread = threading.Thread(target=proc.run, daemon=True)
    thread.start()
    app = web.Application()
    add_routes(app, ReadContext(1, proc, None, {proc.owner_id}, waiters))
    app.router.add_get("/api/v1/namespaces/{namespace}/workflows/{workflow_id}/result", api.result)

    async def reads() -> list[tuple[str, int, float]]:
        waiters.bind(asyncio.get_running_loop())
        loop = asyncio.get_running_loop()
        answers = []
        async with TestClient(TestServer(app)) as client:
            for path in ("", "/history", "/result?timeout_ms=100"):
                [wf] = start_workflows(kafka.bootstrap, topic_prefix, 1, 1, "idle", "nobody-polls-this-queue")
                seen = await loop.run_in_executor(None, _committed_history_of, kafka.bootstrap, proc.history_topic,
                                                  wf, 30.0)
                response = await client.get(f"/api/v1/namespaces/{NS}/workflows/{wf}{path}")
                answers.append((path, response.status, time.monotonic() - seen))
            never = await client.get(f"/api/v1/namespaces/{NS}/workflows/never-started")
            answers.append(("never", never.status, 0.0))
        return answers

    try:
        assert proc.restored.wait(60)
        [warm] = start_workflows(kafka.bootstrap, topic_prefix, 1, 1, "idle", "nobody-polls-this-queue",
                                 run_timeout_ms=1)
        wait_closed(kafka.bootstrap, topic_prefix, [warm], timeout=60)  # the shard is owned and committing
        proc.hold.set()
        answers = asyncio.run(reads())
    finally:
        proc.hold.clear()
        proc.stop()
        thread.join(30)
    print(answers)
    for path, status, waited in answers[:-1]:
        assert status in (200, 504), (path, status)  # found; a result poll of the open run times out
        assert waited >= 0.3, (path, waited)  # it was read inside the late second, so it waited for the landing
    assert answers[-1][1] == 404  # absence is still answered, once what was begun has landed
