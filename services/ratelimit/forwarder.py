"""The rate limiter: releases rate-limited queues' activity tasks from their held topics into the task topics at the
queue's rate, shared by every worker of the queue (docs/architecture.md, "Rate limits").

Every server runs one, in the consumer group `<prefix>-rate-limiter` subscribed to all held topics
(`<prefix>.held.<queue>.activity`). Each batch of released tasks and the held topics' offsets past them commit in one
transaction (connectors/transactional.py), so a task is released exactly once whatever crashes. A partition whose
queue has no token left is sought back to its first task not released and paused until the bucket refills.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from ostinato.connectors.transactional import TransactionalLoop
from ostinato.kafka.task_topics import TaskTopics
from ostinato.schemas.partitioner import partition_for
from ostinato.schemas.topics import TaskKind, held_topic_pattern, queue_of_held_topic, task_topic_name
from ostinato.streams.rate import TokenBucket, share

log = logging.getLogger("ostinato.ratelimit")
TXN_TIMEOUT_MS = 10_000
MAX_BATCH = 500
IDLE_POLL_S = 0.1


class Held(Protocol):
    """What the release plan needs of a held record (a confluent-kafka `Message` is one)."""

    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...


H = TypeVar("H", bound=Held)


def plan_release(messages: Sequence[H], allow: Callable[[str], bool],
                 queue_of: Callable[[str], str | None]) -> tuple[list[H], dict[tuple[str, int], int]]:
    """Which held records go now, in order: per partition, the records before the first whose queue `allow`
    refuses (a partition is FIFO; nothing overtakes a held record). Also, per partition that stopped, the offset
    to read again from. A record of a topic that is no held topic (None from `queue_of`) goes."""
    released: list[H] = []
    stopped: dict[tuple[str, int], int] = {}
    for msg in messages:
        where = (msg.topic() or "", msg.partition() or 0)
        if where in stopped:
            continue
        queue = queue_of(where[0])
        if queue is None or allow(queue):
            released.append(msg)
        else:
            stopped[where] = msg.offset() or 0
    return released, stopped


class RateLimiter(TransactionalLoop):
    """One server's share of releasing held activity tasks. `limits()` is the cluster's current setting
    (queue -> activities per second, from `<prefix>.cluster`); a queue without one is released at once (its
    limit was lifted while tasks waited)."""

    kind = "rate-limiter"

    def __init__(self, bootstrap: str, prefix: str, task_topics: TaskTopics, limits: Callable[[], Mapping[str, float]],
                 instance: str, on_failure: Callable[[str, BaseException], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(bootstrap, "held", f"{prefix}-rate-limiter", f"{prefix}-rate-limiter-{instance}", on_failure,
                         transaction_timeout_ms=TXN_TIMEOUT_MS)
        self.prefix = prefix
        self.task_topics = task_topics
        self.limits = limits
        self.clock = clock
        self.buckets: dict[str, TokenBucket] = {}
        self.paused: dict[tuple[str, int], float] = {}  # partition -> when its queue has a token again
        self.partitions: dict[str, int] = {}  # held topic -> partition count
        self.released = 0

    def run(self) -> None:
        consumer = self.consumer(**{"topic.metadata.refresh.interval.ms": 1000, "fetch.wait.max.ms": 50})
        consumer.subscribe([held_topic_pattern(self.prefix)])
        producer = self.producer()
        try:
            while not self._stop.is_set():
                self._resume_due(consumer)
                producer = self._step(consumer, producer)
        finally:
            producer.flush(5)
            consumer.close()

    def _step(self, consumer: Consumer, producer: Producer) -> Producer:
        """One batch: release what the queues' buckets allow, hold back the rest."""
        batch = consumer.consume(MAX_BATCH, self._poll_timeout())
        for m in batch:
            if m.error() is not None:
                log.debug("rate limiter: %s", m.error())
        messages = [m for m in batch if m.error() is None]
        if not messages:
            return producer
        now = self.clock()
        owned = self._owned(consumer.assignment())
        released, stopped = plan_release(messages, lambda q: self._allow(q, now, owned),
                                         lambda t: queue_of_held_topic(self.prefix, t))
        for (topic, partition), offset in stopped.items():
            tp = TopicPartition(topic, partition, offset)
            consumer.seek(tp)
            consumer.pause([tp])
            bucket = self.buckets.get(queue_of_held_topic(self.prefix, topic) or "")
            self.paused[(topic, partition)] = now + (bucket.wait(now) if bucket else IDLE_POLL_S)
        return self._release(producer, consumer, released) if released else producer

    def _release(self, producer: Producer, consumer: Consumer, released: list[Message]) -> Producer:
        """Produce `released` into their task topics and commit them with the held offsets past them."""
        try:
            producer.begin_transaction()
            for msg in released:
                queue = queue_of_held_topic(self.prefix, msg.topic() or "") or ""
                topic = task_topic_name(self.prefix, queue, TaskKind.ACTIVITY)
                key = msg.key() or b""
                producer.produce(topic, msg.value(), key,
                                 partition=partition_for(key.decode(), self.task_topics.partitions(topic)))
            self.commit(producer, consumer, released)
            self.released += len(released)
        except KafkaException as exc:
            self.paused.clear()  # every assigned partition goes back to its committed offset
            consumer.resume(consumer.assignment())
            producer = self.recover(producer, consumer, exc)
        return producer

    def _allow(self, queue: str, now: float, owned: Mapping[str, tuple[int, int]]) -> bool:
        """Whether one more task of `queue` may go now (taking its token)."""
        limit = self.limits().get(queue)
        mine, total = owned.get(queue, (1, 1))
        rate = share(limit, mine, total) if limit else 0.0
        if rate <= 0:
            self.buckets.pop(queue, None)
            return True
        bucket = self.buckets.get(queue)
        if bucket is None:
            bucket = self.buckets[queue] = TokenBucket.per_second(rate, now)
        elif bucket.rate != rate:
            bucket.set_rate(rate, now)
        return bucket.take(now)

    def _owned(self, assignment: list[TopicPartition]) -> dict[str, tuple[int, int]]:
        """Per queue: how many of its held topic's partitions this limiter owns, and how many there are."""
        counts: dict[str, int] = {}
        for tp in assignment:
            counts[tp.topic] = counts.get(tp.topic, 0) + 1
        out = {}
        for topic, mine in counts.items():
            queue = queue_of_held_topic(self.prefix, topic)
            if queue is not None:
                out[queue] = (mine, self._partition_count(topic))
        return out

    def _partition_count(self, topic: str) -> int:
        known = self.partitions.get(topic)
        if known is None:
            known = self.partitions[topic] = self.task_topics.partitions(topic)
        return known

    def _poll_timeout(self) -> float:
        if not self.paused:
            return IDLE_POLL_S
        return max(0.0, min(IDLE_POLL_S, min(self.paused.values()) - self.clock()))

    def _resume_due(self, consumer: Consumer) -> None:
        """Resume the paused partitions whose queue has a token again (and forget those no longer ours)."""
        if not self.paused:
            return
        now = self.clock()
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        due = [where for where, at in self.paused.items() if at <= now or where not in assigned]
        for where in due:
            del self.paused[where]
        resume = [TopicPartition(t, p) for t, p in due if (t, p) in assigned]
        if resume:
            consumer.resume(resume)
