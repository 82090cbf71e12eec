"""A Kafka test worker: reads a queue's task topics, answers with `programs`, and commits only what was answered.

It stands in for the SDK worker in acceptance tests, speaking only the wire contract of DESIGN.md §5: Avro
records, the partitioner and two kinds of topic. Offsets are committed after the commands they caused are
acknowledged, so a task is never lost between Kafka and the worker (it may be answered twice: the processor
rejects the stale duplicate).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from ostinato.kafka.clients import admin_client, base_config, idempotent_producer, wait_for_brokers
from ostinato.kafka.task_topics import TaskTopics
from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import workflow_key
from ostinato.schemas.topics import MAX_RECORD_BYTES, Topic, topic_name
from ostinato.services.admin.cluster import read_settings
from tests.tools.programs import UnknownTypeError, decide_task, run_activity

log = logging.getLogger("ostinato.tests.worker")

Record = dict[str, Any]
REPLIES_SUFFIX = "." + Topic.REPLIES.value
BATCH = 500  # records answered per flush + commit: one round trip each, whatever the batch size
FLUSH_TIMEOUT_S = 30.0
_IGNORED_ERRORS = (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART)


class InjectedFailure(RuntimeError):
    """An activity attempt failed on purpose (`activity_failure_rate`)."""


# -- the wire, shared with `workload` ---------------------------------------------------------------------------

def command_record(namespace: str, workflow_id: str, name: str, body: Record, *, run_id: str = "",
                   identity: str, request_id: str | None = None) -> Record:
    """An `ostinato.command.Command` envelope as `InMemoryEngine._send` builds it, but answered by nobody
    (`reply_partition` None) and stamped with the wall clock (informational only: the owner's clock decides)."""
    return {
        "namespace": namespace, "workflow_id": workflow_id, "run_id": run_id,
        "request_id": request_id or uuid.uuid4().hex, "identity": identity, "time_ms": int(time.time() * 1000),
        "reply_partition": None, "body": (name if "." in name else wire.COMMAND_PREFIX + name, body),
    }


def produce_command(producer: Producer, prefix: str, shards: int, command: Record,
                    on_delivery: Callable[[KafkaError | None, Message], None] | None = None) -> None:
    """Produce a command to its shard: partition given explicitly, never left to the client's partitioner."""
    key = workflow_key(command["namespace"], command["workflow_id"])
    value = codec.encode(wire.COMMAND, command)
    kwargs: dict[str, Any] = {"on_delivery": on_delivery} if on_delivery is not None else {}
    while True:
        try:
            producer.produce(topic_name(prefix, Topic.COMMANDS), value=value, key=key.encode(),
                             partition=partition_for(key, shards), **kwargs)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.1)


def ensure_task_topics(bootstrap: str, prefix: str, queue: str, timeout: float = 30.0) -> list[str]:
    """Create the queue's workflow and activity task topics unless they exist (whoever comes first wins).

    The replication factor is the cluster's recorded one, or min(3, brokers) before `cluster init`, which is
    what `cluster init` itself would pick.
    """
    brokers = wait_for_brokers(admin_client(bootstrap), bootstrap, timeout)
    settings = read_settings(bootstrap, prefix, timeout)
    rf = settings.replication_factor if settings is not None else min(3, brokers)
    return TaskTopics(bootstrap, prefix, rf).ensure_queue(queue)


# -- the worker -------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class WorkerStats:
    """What a worker has done; commands count once Kafka acknowledged them."""

    workflow_tasks: int = 0
    activity_tasks: int = 0
    query_tasks: int = 0
    unreadable: int = 0
    workflow_task_failures: int = 0
    activity_failures: int = 0
    commands_sent: int = 0
    replies_sent: int = 0
    commits: int = 0


class TestWorker:
    """Answers the tasks of one queue from a background thread, with the programs of `tests.tools.programs`.

    Workers of one queue (same prefix) form the consumer group `<prefix>-test-worker-<queue>` and share its
    partitions. `activity_failure_rate` fails that share of activity attempts on purpose (seeded by `seed`), so
    tests exercise retries. The processor may be down: commands simply wait in the commands topic.
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, bootstrap: str, prefix: str, shards: int, task_queue: str, *,
                 activity_failure_rate: float = 0.0, identity: str | None = None, seed: int | None = None,
                 batch: int = BATCH) -> None:
        if not 0.0 <= activity_failure_rate <= 1.0:
            raise ValueError(f"activity_failure_rate must be in [0, 1], not {activity_failure_rate}")
        self.bootstrap, self.prefix, self.shards, self.task_queue = bootstrap, prefix, shards, task_queue
        self.activity_failure_rate = activity_failure_rate
        self.identity = identity or f"test-worker-{uuid.uuid4().hex[:8]}"
        self.group = f"{prefix}-test-worker-{task_queue}"
        self.batch = batch
        self.error: BaseException | None = None
        self._random = random.Random(seed)
        self._undelivered: list[KafkaError] = []  # delivery errors of the batch in hand
        self._stats = WorkerStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._joined = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> TestWorker:
        """Create the task topics if needed, start the thread, and return once the group assigned partitions
        (possibly none, when the group has more workers than partitions)."""
        if self._thread is not None:
            raise RuntimeError("this worker was already started")
        topics = ensure_task_topics(self.bootstrap, self.prefix, self.task_queue, timeout)
        self._thread = threading.Thread(target=self._run, args=(topics,), name=f"test-worker-{self.task_queue}",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._joined.wait(0.05):
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"test worker died while starting: {self.error!r}") from self.error
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"test worker got no partition assignment of group {self.group} in {timeout}s")
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the batch in hand (answered and committed), leave the group, and re-raise a thread failure."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"test worker did not stop within {timeout}s")
        if self.error is not None:
            raise RuntimeError(f"test worker failed: {self.error!r}") from self.error

    def __enter__(self) -> TestWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the counters."""
        with self._lock:
            return dataclasses.replace(self._stats)

    def wait_for(self, condition: Callable[[WorkerStats], bool], timeout: float = 30.0) -> WorkerStats:
        """Wait until `condition(stats)` holds; raise TimeoutError with the last stats otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats
            if condition(stats):
                return stats
            if self.error is not None:
                raise RuntimeError(f"test worker failed: {self.error!r}") from self.error
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s; worker stats: {stats}")
            time.sleep(0.02)

    def _count(self, **increments: int) -> None:
        with self._lock:
            for name, n in increments.items():
                setattr(self._stats, name, getattr(self._stats, name) + n)

    # -- the loop -------------------------------------------------------------------------------------------

    def _run(self, topics: list[str]) -> None:
        consumer = Consumer({
            **base_config(self.bootstrap, self.identity),
            "group.id": self.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",  # tasks written before the first worker joined are still ours
            "partition.assignment.strategy": "cooperative-sticky",
            "fetch.max.bytes": MAX_RECORD_BYTES * 2,
        })
        producer = idempotent_producer(self.bootstrap, self.identity)
        try:
            consumer.subscribe(topics, on_assign=lambda c, p: self._joined.set())
            while not self._stop.is_set():
                messages = consumer.consume(num_messages=self.batch, timeout=0.1)
                self._handle_batch(consumer, producer, messages)
        except BaseException as exc:  # surfaced by stop() and wait_for(); a silent dead thread hides the cause
            log.exception("test worker %s failed", self.identity)
            self.error = exc
        finally:
            producer.flush(FLUSH_TIMEOUT_S)
            consumer.close()

    def _handle_batch(self, consumer: Consumer, producer: Producer, messages: list[Message]) -> None:
        """Answer every task of the batch, wait for Kafka to acknowledge all answers, then commit the batch.

        If an answer cannot be delivered the batch is not committed: the consumer rewinds to its first record,
        so its tasks are answered again.
        """
        self._undelivered = []
        first: dict[tuple[str, int], int] = {}
        next_offsets: dict[tuple[str, int], int] = {}
        for msg in messages:
            err, topic, partition, offset = msg.error(), msg.topic(), msg.partition(), msg.offset()
            if err is not None or topic is None or partition is None or offset is None:
                if err is not None and err.code() not in _IGNORED_ERRORS:
                    log.warning("consumer error: %s", err)
                continue
            first.setdefault((topic, partition), offset)
            next_offsets[topic, partition] = offset + 1
            self._handle(producer, msg)
        if not next_offsets:
            return
        if not self._flush(producer) or self._undelivered:
            log.warning("%d answers undelivered (%s): re-reading the batch", len(self._undelivered),
                        self._undelivered[:1])
            for (topic, partition), offset in first.items():
                consumer.seek(TopicPartition(topic, partition, offset))
            return
        try:
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in next_offsets.items()],
                            asynchronous=False)
            self._count(commits=1)
        except KafkaException as exc:  # e.g. a rebalance took the partitions: their new owner answers again
            log.warning("commit failed, tasks may be answered twice: %s", exc)

    @staticmethod
    def _flush(producer: Producer) -> bool:
        """Wait until every answer produced so far is acknowledged (or failed); False if that takes too long."""
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while producer.flush(1.0) > 0:
            if time.monotonic() > deadline:
                return False
        return True

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self._count(**{"replies_sent" if (msg.topic() or "").endswith(REPLIES_SUFFIX) else "commands_sent": 1})
        else:
            self._undelivered.append(err)

    def _handle(self, producer: Producer, msg: Message) -> None:
        try:
            name, task = codec.decode(msg.value())
        except (codec.DecodeError, TypeError) as exc:
            log.warning("unreadable record at %s[%d]@%d: %s", msg.topic(), msg.partition(), msg.offset(), exc)
            self._count(unreadable=1)
            return
        if name == wire.WORKFLOW_TASK:
            self._count(workflow_tasks=1)
            self._answer_workflow_task(producer, task)
        elif name == wire.ACTIVITY_TASK:
            self._count(activity_tasks=1)
            self._answer_activity_task(producer, task)
        elif name == wire.QUERY_TASK:
            self._count(query_tasks=1)
            self._answer_query(producer, task)
        else:
            self._count(unreadable=1)

    def _send(self, producer: Producer, task: Record, name: str, body: Record) -> None:
        command = command_record(task["namespace"], task["workflow_id"], name, body, run_id=task["run_id"],
                                 identity=self.identity)
        produce_command(producer, self.prefix, self.shards, command, self._delivered)

    def _answer_workflow_task(self, producer: Producer, task: Record) -> None:
        attempt = {"scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"]}
        try:
            commands = decide_task(task)
        except Exception as exc:  # noqa: BLE001 - a broken program fails the task (history untouched), as in the SDK
            unknown = isinstance(exc, UnknownTypeError)
            cause = "UNKNOWN_WORKFLOW_TYPE" if unknown else "WORKFLOW_WORKER_UNHANDLED_FAILURE"
            self._count(workflow_task_failures=1)
            self._send(producer, task, "RespondWorkflowTaskFailed", {
                **attempt, "cause": cause, "failure": {"message": str(exc), "type": type(exc).__name__}})
            return
        self._send(producer, task, "RespondWorkflowTaskCompleted", {**attempt, "commands": commands})

    def _answer_activity_task(self, producer: Producer, task: Record) -> None:
        attempt = {"scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"]}
        self._send(producer, task, "RecordActivityTaskStarted", attempt)
        try:
            if self._random.random() < self.activity_failure_rate:
                raise InjectedFailure(f"injected failure of attempt {task['attempt']}")
            result = run_activity(task)
        except Exception as exc:  # noqa: BLE001 - an activity's error is reported to the engine, not raised
            unknown = isinstance(exc, UnknownTypeError)
            self._count(activity_failures=1)
            self._send(producer, task, "RespondActivityTaskFailed", {**attempt, "failure": {
                "message": str(exc), "type": "UnknownActivityType" if unknown else type(exc).__name__,
                "non_retryable": unknown}})
            return
        self._send(producer, task, "RespondActivityTaskCompleted", {**attempt, "result": result})

    def _answer_query(self, producer: Producer, task: Record) -> None:
        """The programs keep no state to query: answer at once with a failure rather than let the caller wait."""
        reply = {"request_id": task["request_id"], "namespace": task["namespace"], "workflow_id": task["workflow_id"],
                 "body": (wire.QUERY_RESULT, {"result": [], "failure": {
                     "message": f"the test worker answers no queries ({task['query_type']!r})",
                     "type": "QueryNotSupported"}})}
        producer.produce(topic_name(self.prefix, Topic.REPLIES), value=codec.encode(wire.REPLY, reply),
                         key=task["request_id"].encode(), partition=task["reply_partition"],
                         on_delivery=self._delivered)
