"""Task queue backlog as metrics: every few seconds, per task queue and kind, the tasks not yet consumed and the age of
the oldest, exported on `/metrics` so an alert can fire on them (`task-queue describe` answers the same on request).

Read from Kafka's own bookkeeping, nothing stored: the worker group's committed offsets, the partitions' ends
(read_committed) and the records in between, counted (transaction markers occupy offsets too) up to `SCAN_LIMIT` per
partition and estimated from offsets beyond. A rate-limited queue's held activity tasks (waiting for the rate limiter,
`<prefix>.held.<queue>.activity`) count as that queue's activity backlog: they wait as much as the others.

Every server runs the collector; the figures are the cluster's, so alert on `max by (task_queue, kind)`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ostinato.kafka.clients import base_config
from ostinato.kafka.task_topics import worker_group
from ostinato.schemas.topics import TaskKind, queue_of_held_topic
from ostinato.services.admin.lag import GroupPositions, offsets

log = logging.getLogger("ostinato.backlog")
INTERVAL_S = 5.0  # OSTINATO_BACKLOG_INTERVAL_S
TIMEOUT_S = 10.0
SCAN_TIMEOUT_S = 2.0  # per partition and round: a slow read gives an estimate, not a stalled collector
SCAN_LIMIT = 1_000  # records counted one by one per partition and round; beyond, the offset difference stands in
BACKLOG = "ostinato_task_queue_backlog"
AGE = "ostinato_task_queue_backlog_age_seconds"


@dataclass(frozen=True)
class Source:
    """One topic whose unconsumed records are a queue's backlog, and the group that consumes it."""

    queue: str
    kind: TaskKind
    topic: str
    group: str


@dataclass
class Backlog:
    tasks: int = 0
    oldest_ms: int | None = None  # epoch ms of the oldest waiting task

    def add(self, tasks: int, first_ms: int | None) -> None:
        self.tasks += tasks
        if first_ms is not None:
            self.oldest_ms = first_ms if self.oldest_ms is None else min(self.oldest_ms, first_ms)


def sources(topics: list[str], prefix: str) -> list[Source]:
    """The task and held topics among `topics`, each with the group whose offsets say what is consumed."""
    found = []
    head = f"{prefix}.tasks."
    for topic in topics:
        held = queue_of_held_topic(prefix, topic)
        if held is not None:
            found.append(Source(held, TaskKind.ACTIVITY, topic, f"{prefix}-rate-limiter"))
            continue
        if not topic.startswith(head):
            continue
        queue, _, kind = topic[len(head):].rpartition(".")
        if queue and kind in (TaskKind.WORKFLOW.value, TaskKind.ACTIVITY.value):
            found.append(Source(queue, TaskKind(kind), topic, worker_group(prefix, queue)))
    return found


def age_seconds(oldest_ms: int | None, now_ms: int) -> float:
    """The oldest waiting task's age; zero when nothing waits (so an alert on age clears when the queue drains)."""
    return 0.0 if oldest_ms is None else max(0.0, (now_ms - oldest_ms) / 1000)


class BacklogCollector(Collector):
    """Measures in a daemon thread every `interval_s`; `/metrics` reads the last measurement."""

    def __init__(self, bootstrap: str, prefix: str, interval_s: float = INTERVAL_S) -> None:
        self.bootstrap, self.prefix, self.interval_s = bootstrap, prefix, interval_s
        self._latest: dict[tuple[str, str], Backlog] = {}
        self._measured_ms = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ostinato-backlog", daemon=True)

    def start(self) -> BacklogCollector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            latest, measured = dict(self._latest), self._measured_ms
        backlog = GaugeMetricFamily(BACKLOG, "Tasks of a task queue not yet taken by a worker (for a rate-limited "
                                    "queue's activities, with those the rate limiter holds), by queue and kind.",
                                    labels=["task_queue", "kind"])
        age = GaugeMetricFamily(AGE, "Age of the oldest task of a task queue not yet taken by a worker, in seconds "
                                "(0 when none waits), by queue and kind.", labels=["task_queue", "kind"])
        for (queue, kind), b in sorted(latest.items()):
            backlog.add_metric([queue, kind], b.tasks)
            age.add_metric([queue, kind], age_seconds(b.oldest_ms, measured))
        yield backlog
        yield age

    def snapshot(self) -> dict[tuple[str, str], Backlog]:
        with self._lock:
            return dict(self._latest)

    def _run(self) -> None:
        admin = AdminClient(base_config(self.bootstrap, "ostinato-backlog"))
        consumer = Consumer({**base_config(self.bootstrap, "ostinato-backlog"), "group.id": f"{self.prefix}-backlog",
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "enable.partition.eof": True, "fetch.wait.max.ms": 50})
        groups = GroupPositions(self.bootstrap, "ostinato-backlog")
        try:
            while not self._stop.is_set():
                try:
                    measured = self.measure(admin, consumer, groups)
                    with self._lock:
                        self._latest, self._measured_ms = measured, time.time_ns() // 1_000_000
                except KafkaException as exc:
                    log.warning("measuring task queue backlogs: %s", exc)
                self._stop.wait(self.interval_s)
        finally:
            consumer.close()
            groups.close()

    def measure(self, admin: AdminClient, consumer: Consumer, groups: GroupPositions,
                ) -> dict[tuple[str, str], Backlog]:
        """Every queue's backlog now (queues whose topics exist; a queue never used has none)."""
        topics = list(admin.list_topics(timeout=TIMEOUT_S).topics.items())
        partitions = {name: sorted(meta.partitions) for name, meta in topics if meta.error is None and meta.partitions}
        out: dict[tuple[str, str], Backlog] = {}
        for source in sources(sorted(partitions), self.prefix):
            parts = partitions[source.topic]
            entry = out.setdefault((source.queue, source.kind.value), Backlog())
            positions = groups.read(source.group, source.topic, parts, TIMEOUT_S)
            starts = offsets(admin, source.topic, parts, OffsetSpec.earliest(), TIMEOUT_S)
            ends = offsets(admin, source.topic, parts, OffsetSpec.latest(), TIMEOUT_S)
            for p in parts:
                position = max(positions.get(p, starts.get(p, 0)), starts.get(p, 0))
                if ends.get(p, 0) > position:
                    entry.add(*_waiting(consumer, TopicPartition(source.topic, p, position), ends[p]))
        return out


def _waiting(consumer: Consumer, start: TopicPartition, end: int) -> tuple[int, int | None]:
    """Records from `start` to `end` (counted up to SCAN_LIMIT, estimated beyond) and the first one's timestamp;
    (0, None) when only transaction markers lie there."""
    consumer.assign([start])
    count, first = 0, None
    deadline = time.monotonic() + SCAN_TIMEOUT_S
    try:
        while count < SCAN_LIMIT and time.monotonic() < deadline:
            done = False
            for msg in consumer.consume(min(500, SCAN_LIMIT - count), 0.2):
                err = msg.error()
                if err is not None:
                    done = done or err.code() == KafkaError._PARTITION_EOF  # the end: only markers were left
                elif (msg.offset() or 0) < end:
                    first = int(msg.timestamp()[1]) if first is None else first
                    count += 1
                    done = done or (msg.offset() or 0) + 1 >= end
            if done:
                break
        if count >= SCAN_LIMIT:
            count = end - start.offset
        return count, first
    finally:
        consumer.unassign()
