"""A timeout is not judged while the completion that would pre-empt it sits unreadable in Kafka (issue 16).

A crashed producer's open transaction on a shard's commands partition hides every record after it from
read_committed readers until the coordinator aborts it. A worker's completion written behind it must win over the
workflow task timeout that falls due meanwhile.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas import codec, wire
from ostinato.schemas.keys import shard_for, workflow_key
from ostinato.schemas.topics import TaskKind, task_topic_name
from ostinato.services.admin.checker import check_history
from ostinato.services.admin.cluster import init_cluster
from tests.tools.programs import complete, to_payload
from tests.tools.servers import ServerProcess
from tests.tools.worker import command_record, ensure_task_topics, produce_command
from tests.tools.workload import start_workflows, wait_closed

SHARDS = 2
QUEUE = "held"
# The test must answer the task before its timeout falls due and open the rogue transaction first; at a load of 15+
# that took more than the 1 s this used to allow (the task timed out before the answer, and the run never closed).
TASK_TIMEOUT_MS = 5_000
ROGUE_TXN_TIMEOUT_MS = 12_000  # how long the "crashed" producer's transaction stays open: well past the timeout


@pytest.fixture
def server(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> Iterator[ServerProcess]:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    srv = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    srv.wait_owning(SHARDS)
    yield srv
    srv.stop()


def _take_task(bootstrap: str, prefix: str, timeout: float = 30.0) -> dict:
    """Read the dispatched workflow task; assigned, not subscribed, so no group join eats into the task timeout."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-probe", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    topic = task_topic_name(prefix, QUEUE, TaskKind.WORKFLOW)
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                name, task = codec.decode(msg.value() or b"")
                assert name == wire.WORKFLOW_TASK
                return task
        raise AssertionError("no workflow task was dispatched")
    finally:
        consumer.close()


def test_a_completion_behind_an_open_transaction_beats_the_task_timeout(kafka: KafkaCluster, topic_prefix: str,
                                                                       server: ServerProcess) -> None:
    ensure_task_topics(kafka.bootstrap, topic_prefix, QUEUE)
    [wf] = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 1, "hello", QUEUE, task_timeout_ms=TASK_TIMEOUT_MS)
    task = _take_task(kafka.bootstrap, topic_prefix)

    # A producer that dies with its transaction open: one record on the workflow's shard, never committed.
    shard = shard_for("default", wf, SHARDS)
    rogue = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{topic_prefix}-rogue",
                      "transaction.timeout.ms": ROGUE_TXN_TIMEOUT_MS})
    rogue.init_transactions(30)
    rogue.begin_transaction()
    other = command_record("default", "someone-else", "SignalWorkflowExecution",
                           {"signal_name": "x", "input": []}, identity="rogue")
    rogue.produce(f"{topic_prefix}.commands", codec.encode(wire.COMMAND, other), workflow_key("default", "x").encode(),
                  partition=shard)
    rogue.flush(10)
    opened = time.monotonic()

    # The worker's answer, written in time (well before the task timeout) but behind the open transaction.
    worker = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    answer = command_record("default", wf, "RespondWorkflowTaskCompleted", {
        "scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"],
        "commands": [complete([to_payload("done")])], "force_create_new_task": False, "sdk_flags": [],
        "build_id": ""}, run_id=task["run_id"], identity="worker")
    produce_command(worker, topic_prefix, SHARDS, answer)
    assert worker.flush(10) == 0
    due_ms = task["deadline_ms"]
    answered_ms = int(time.time() * 1000)
    assert answered_ms < due_ms, f"the answer was written {answered_ms - due_ms} ms after the timeout fell due: " \
                                 "this machine was too slow for the test to mean anything"

    closed = wait_closed(kafka.bootstrap, topic_prefix, [wf], timeout=60)
    waited = time.monotonic() - opened
    assert closed == {wf: "WORKFLOW_EXECUTION_COMPLETED"}
    # It closed only once the coordinator aborted the transaction, long after the task timeout fell due...
    assert int(time.time() * 1000) > due_ms + 2_000 and waited > ROGUE_TXN_TIMEOUT_MS / 1000 / 2, waited
    # ...and the timeout never fired: the completion was read first.
    report = check_history(kafka.bootstrap, topic_prefix, timeout=60)
    assert report.ok, report.problems[:10]
    events = [e["event_type"] for h in report.histories.values() for e in h]
    assert "WORKFLOW_TASK_TIMED_OUT" not in events, events
    text = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
    held = re.search(r"^ostinato_processor_timeouts_held_total (\S+)$", text, re.M)
    assert held is not None and float(held.group(1)) > 0
    assert re.search(r"timeouts held for \d+ ms", server.tail(400))
