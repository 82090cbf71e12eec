"""The test worker and the workload driver speak the wire contract on a real broker.

The in-memory engine plays the processor here: task records it builds are produced to Kafka, and the commands
the worker answers with are read back and submitted to it, so the wire shapes meet the real core.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import idempotent_producer, reader
from ostinato.schemas import codec, partition_for
from ostinato.schemas.keys import activity_task_key, history_key, workflow_key
from ostinato.schemas.topics import TaskKind, Topic, task_topic_name, topic_name
from ostinato.services.admin.cluster import init_cluster
from ostinato.streams.engine import InMemoryEngine
from tests.tools.programs import from_payload, to_payload
from tests.tools.worker import TestWorker, ensure_task_topics
from tests.tools.workload import start_workflows, wait_closed, wait_closed_events

Record = dict[str, Any]
SHARDS, NS, Q = 4, "default", "tools"


class Tail:
    """Reads new records of every partition of a topic, remembering where it stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = reader(bootstrap, f"tail-{topic}")
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def take(self, n: int, timeout: float = 30.0) -> list[tuple[int, str, Record]]:
        """The next `n` records as (partition, key, decoded value)."""
        out: list[tuple[int, str, Record]] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            assert time.monotonic() < deadline, f"only {len(out)} of {n} records within {timeout}s"
            for msg in self.consumer.consume(n - len(out), 0.2):
                if msg.error() is None:
                    out.append((msg.partition(), msg.key().decode(), codec.decode(msg.value())[1]))
                else:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
        return out

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def cluster(kafka: KafkaCluster, topic_prefix: str) -> str:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    return topic_prefix


@pytest.fixture
def commands(kafka: KafkaCluster, cluster: str) -> Iterator[Tail]:
    tail = Tail(kafka.bootstrap, topic_name(cluster, Topic.COMMANDS), SHARDS)
    yield tail
    tail.close()


def _produce_tasks(producer: Producer, prefix: str, engine: InMemoryEngine) -> int:
    """Move every task the engine queued onto the Kafka task topics, keyed as the processor keys them."""
    moved = 0
    while (polled := engine.poll_workflow_task(Q)) is not None:
        name, task = polled
        producer.produce(task_topic_name(prefix, Q, TaskKind.WORKFLOW), codec.encode(name, task),
                         workflow_key(task["namespace"], task["workflow_id"]).encode())
        moved += 1
    while (activity := engine.poll_activity_task(Q)) is not None:
        producer.produce(task_topic_name(prefix, Q, TaskKind.ACTIVITY), codec.encode("ostinato.task.ActivityTask",
                         activity), activity_task_key(activity["namespace"], activity["workflow_id"],
                                                      activity["activity_id"]).encode())
        moved += 1
    assert producer.flush(30) == 0
    return moved


def _body(command: Record) -> tuple[str, Record]:
    name, body = command["body"]
    return name.rpartition(".")[2], body


def test_start_workflows_puts_each_command_on_its_shard(kafka: KafkaCluster, cluster: str, commands: Tail) -> None:
    ids = start_workflows(kafka.bootstrap, cluster, SHARDS, 12, "hello", Q, input=lambda i: f"user-{i}",
                          run_timeout_ms=60_000)

    records = commands.take(12)

    assert len(set(ids)) == 12 and sorted(r[2]["workflow_id"] for r in records) == sorted(ids)
    for partition, key, command in records:
        assert key == workflow_key(NS, command["workflow_id"])
        assert partition == partition_for(key, SHARDS)
        name, body = _body(command)
        assert (name, body["workflow_type"], body["task_queue"], body["run_timeout_ms"]) == (
            "StartWorkflowExecution", "hello", Q, 60_000)
        assert from_payload(body["input"][0]) == f"user-{ids.index(command['workflow_id'])}"
        assert command["reply_partition"] is None and command["time_ms"] > 0
    assert len({r[2]["request_id"] for r in records}) == 12
    assert {r[0] for r in records} != {records[0][0]}, "12 ids over 4 shards should not all land on one"


def test_worker_answers_tasks_the_engine_accepts(kafka: KafkaCluster, cluster: str, commands: Tail) -> None:
    """hello through Kafka: each round, the engine's tasks go to the task topics and the worker's answers back."""
    engine = InMemoryEngine(shards=SHARDS)
    engine.start_workflow(NS, "via-kafka", "hello", Q, [to_payload("Kafka")])
    producer = idempotent_producer(kafka.bootstrap, "test-tasks")
    ensure_task_topics(kafka.bootstrap, cluster, Q)
    answered: list[str] = []
    with TestWorker(kafka.bootstrap, cluster, SHARDS, Q) as worker:
        # Round 1: the workflow task. Round 2: the activity (started + completed). Round 3: the closing task.
        for expected in (1, 2, 1):
            assert _produce_tasks(producer, cluster, engine) == 1
            for partition, key, command in commands.take(expected):
                assert partition == partition_for(key, SHARDS) and key == workflow_key(NS, "via-kafka")
                assert command["identity"] == worker.identity and command["run_id"]
                answered.append(_body(command)[0])
                engine.submit(command)
            engine.run_until_idle()
        stats = worker.wait_for(lambda s: s.commits >= 3)

    assert answered == ["RespondWorkflowTaskCompleted", "RecordActivityTaskStarted", "RespondActivityTaskCompleted",
                        "RespondWorkflowTaskCompleted"]
    assert not engine.rejections, engine.rejected
    visibility = engine.visibility_of(NS, "via-kafka")
    assert visibility is not None and visibility["status"] == "COMPLETED"
    result = engine.history(NS, "via-kafka")[-1]["attributes"][1]["result"]
    assert from_payload(result[0]) == "Hello, Kafka"
    assert (stats.workflow_tasks, stats.activity_tasks, stats.commands_sent) == (2, 1, 4)
    _assert_all_committed(kafka.bootstrap, worker.group, cluster)


def _assert_all_committed(bootstrap: str, group: str, prefix: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for kind in TaskKind:
            topic = task_topic_name(prefix, Q, kind)
            for tp in consumer.committed([TopicPartition(topic, p) for p in range(4)], timeout=10):
                high = consumer.get_watermark_offsets(tp, timeout=10)[1]
                assert tp.offset == high or (high == 0 and tp.offset < 0), (topic, tp.partition, tp.offset, high)
    finally:
        consumer.close()


def test_failures_are_reported_not_raised(kafka: KafkaCluster, cluster: str, commands: Tail) -> None:
    """An injected activity failure and an unknown workflow type become failure commands; the worker lives on."""
    engine = InMemoryEngine(shards=SHARDS)
    engine.start_workflow(NS, "unlucky", "hello", Q)
    polled = engine.poll_workflow_task(Q)
    assert polled is not None
    engine.complete_workflow_task(polled[1], [("ScheduleActivityTaskCommand", {
        "activity_id": "greet", "activity_type": "greet", "start_to_close_timeout_ms": 10_000})])
    engine.start_workflow(NS, "mystery", "no-such-program", Q)
    producer = idempotent_producer(kafka.bootstrap, "test-tasks")
    ensure_task_topics(kafka.bootstrap, cluster, Q)
    with TestWorker(kafka.bootstrap, cluster, SHARDS, Q, activity_failure_rate=1.0) as worker:
        assert _produce_tasks(producer, cluster, engine) == 2
        records = [c for _, _, c in commands.take(3)]
        stats = worker.wait_for(lambda s: s.commands_sent == 3)

    answers = {(c["workflow_id"], _body(c)[0]): _body(c)[1] for c in records}
    assert set(answers) == {("unlucky", "RecordActivityTaskStarted"), ("unlucky", "RespondActivityTaskFailed"),
                            ("mystery", "RespondWorkflowTaskFailed")}
    assert answers["unlucky", "RespondActivityTaskFailed"]["failure"]["type"] == "InjectedFailure"
    assert answers["mystery", "RespondWorkflowTaskFailed"]["cause"] == "UNKNOWN_WORKFLOW_TYPE"
    assert (stats.activity_failures, stats.workflow_task_failures) == (1, 1)
    for command in records:  # in partition order, so each workflow's answers keep their order
        engine.submit(command)
    engine.run_until_idle()
    assert not engine.rejections, engine.rejected


def test_wait_closed_reports_terminal_events_and_names_open_workflows(kafka: KafkaCluster, cluster: str) -> None:
    engine = InMemoryEngine(shards=SHARDS)
    engine.start_workflow(NS, "done", "hello", Q)
    engine.start_workflow(NS, "open", "hello", Q)
    polled = engine.poll_workflow_task(Q)
    assert polled is not None and polled[1]["workflow_id"] == "done"
    engine.complete_workflow_task(polled[1], [("CompleteWorkflowExecutionCommand", {"result": [to_payload(7)]})])
    producer = idempotent_producer(kafka.bootstrap, "test-history")
    for wf in ("done", "open"):
        run_id = engine.current_run_id(NS, wf)
        for event in engine.history(NS, wf):
            producer.produce(topic_name(cluster, Topic.HISTORY), codec.encode("ostinato.history.HistoryEvent", event),
                             history_key(NS, wf, run_id, event["event_id"]).encode(),
                             partition=partition_for(workflow_key(NS, wf), SHARDS))
    assert producer.flush(30) == 0

    assert wait_closed(kafka.bootstrap, cluster, ["done"], NS, timeout=30) == {"done": "WORKFLOW_EXECUTION_COMPLETED"}
    event = wait_closed_events(kafka.bootstrap, cluster, ["done"], NS, timeout=30)["done"]
    assert from_payload(event["attributes"][1]["result"][0]) == 7
    with pytest.raises(TimeoutError, match=r"1 of 2 workflows still open .* e\.g\. open"):
        wait_closed(kafka.bootstrap, cluster, ["done", "open"], NS, timeout=2)


def test_a_query_is_answered_with_a_failure_on_its_reply_partition(kafka: KafkaCluster, cluster: str) -> None:
    engine = InMemoryEngine(shards=SHARDS)
    engine.start_workflow(NS, "asked", "sleep", Q)
    polled = engine.poll_workflow_task(Q)
    assert polled is not None
    engine.complete_workflow_task(polled[1], [])
    request_id = engine.query(NS, "asked", "status")
    producer = idempotent_producer(kafka.bootstrap, "test-tasks")
    ensure_task_topics(kafka.bootstrap, cluster, Q)
    replies = Tail(kafka.bootstrap, topic_name(cluster, Topic.REPLIES), 8)
    try:
        with TestWorker(kafka.bootstrap, cluster, SHARDS, Q) as worker:
            assert _produce_tasks(producer, cluster, engine) == 1
            [(partition, key, reply)] = replies.take(1)
            worker.wait_for(lambda s: s.replies_sent == 1 and s.query_tasks == 1)
    finally:
        replies.close()

    assert (partition, key, reply["request_id"]) == (0, request_id, request_id)
    name, body = reply["body"]
    assert name == "ostinato.reply.QueryResult" and body["failure"]["type"] == "QueryNotSupported"
