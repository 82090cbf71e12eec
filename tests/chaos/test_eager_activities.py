"""Eager activity dispatch on real Kafka with the SDK worker (issue 15): the activity comes back in the workflow
task completion's reply; a worker may decline (then the activity topic carries it); and a worker killed with -9
between the reply and running the activity loses nothing: the start-to-close timeout retries it elsewhere, and the
activity ran once (counted outside the engine)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas.topics import TaskKind, task_topic_name
from ostinato.sdk._http import HttpService
from tests.conftest import REPO
from tests.e2e.cli_app import Counted
from tests.tools.servers import ServerProcess

QUEUE = "cli-eager"


def _worker(server: ServerProcess, log: Path, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "ostinato", "worker", "tests.e2e.cli_app:eager_worker", "--server",
                             server.url], cwd=REPO, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, **env})


def _run(server: ServerProcess, marker_dir: Path, timeout: float = 90) -> tuple[str, list[dict]]:
    async def go() -> tuple[str, list[dict]]:
        async with await HttpService.connect(server.url) as service:
            client = Client(service)
            handle = await client.start_workflow(Counted.run, str(marker_dir), id=f"eager-{uuid.uuid4().hex[:6]}",
                                                 task_queue=QUEUE)
            result = await asyncio.wait_for(handle.result(), timeout)
            return result, await service.history("default", handle.id, "")

    return asyncio.run(go())


def _task_records(bootstrap: str, prefix: str, kind: TaskKind) -> int:
    """Records on one of the queue's task topics (read, not the watermarks: transaction markers take offsets)."""
    topic = task_topic_name(prefix, QUEUE, kind)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex}",
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records, ended = 0, set()
        while len(ended) < len(partitions):
            msg = consumer.poll(10)
            assert msg is not None, "the activity topic did not reach its end"
            if msg.error() is None:
                records += 1
            else:
                ended.add(msg.partition())
        return records
    finally:
        consumer.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "declined"])
def test_the_activity_takes_the_eager_path_unless_declined(kafka: KafkaCluster, topic_prefix: str,
                                                           server: ServerProcess, tmp_path: Path, eager: bool) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    worker = _worker(server, tmp_path / "worker.log", OSTINATO_EAGER_ACTIVITIES="1" if eager else "0")
    try:
        result, history = _run(server, marks)
    finally:
        _stop(worker)
    assert result == "attempt 1"
    assert len(list(marks.iterdir())) == 1
    assert [e["event_type"] for e in history].count("ACTIVITY_TASK_COMPLETED") == 1
    # Eager: the activity came back in the first task's reply, and the second workflow task in the activity
    # answer's reply (the worker caches the workflow); only the first task used a topic.
    assert _task_records(kafka.bootstrap, topic_prefix, TaskKind.ACTIVITY) == (0 if eager else 1)
    assert _task_records(kafka.bootstrap, topic_prefix, TaskKind.WORKFLOW) == (1 if eager else 2)


def test_a_worker_killed_after_the_eager_reply_loses_nothing(kafka: KafkaCluster, topic_prefix: str,
                                                              server: ServerProcess, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    doomed = _worker(server, tmp_path / "doomed.log", OSTINATO_FAULT_POINT="worker-after-eager-reply")
    rescuer: subprocess.Popen[bytes] | None = None
    try:
        async def start() -> str:
            async with await HttpService.connect(server.url) as service:
                handle = await Client(service).start_workflow(Counted.run, str(marks), id="doomed-1", task_queue=QUEUE)
                return handle.id

        asyncio.run(start())
        assert doomed.wait(60) == -9, "the worker did not die at the fault point"
        assert list(marks.iterdir()) == []  # it died holding the started activity, before running it
        rescuer = _worker(server, tmp_path / "rescuer.log")

        async def finish() -> tuple[str, list[dict]]:
            async with await HttpService.connect(server.url) as service:
                handle = Client(service).get_workflow_handle("doomed-1")
                return await asyncio.wait_for(handle.result(), 90), await service.history("default", "doomed-1", "")

        result, history = asyncio.run(finish())
    finally:
        _stop(doomed)
        if rescuer is not None:
            _stop(rescuer)
    assert result == "attempt 2"  # the first attempt timed out (start-to-close 2 s) and was retried
    assert [p.name.split("-pid-")[0] for p in marks.iterdir()] == ["attempt-2"]  # executed once in all
    types = [e["event_type"] for e in history]
    assert types.count("ACTIVITY_TASK_COMPLETED") == 1 and "WORKFLOW_EXECUTION_COMPLETED" in types
