"""The rate limiter: releases rate-limited queues' activity tasks from their held topics into the task topics at the
queue's rate, shared by every worker of the queue (docs/architecture.md, "Rate limits").

Every server runs one, in the consumer group `<prefix>-rate-limiter` subscribed to all held topics
(`<prefix>.held.<queue>.activity`). Fetched tasks wait in memory, in order per partition, until their queue's bucket
has a token; each batch of released tasks and the held topics' offsets past them commit in one transaction
(connectors/transactional.py), so a task is released exactly once whatever crashes: what waited in memory is read
again from the committed offsets by whoever owns the partition next. A partition with `MAX_WAITING` tasks in memory
is paused.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from ostinato.connectors.transactional import TransactionalLoop
from ostinato.kafka.clients import STEADY_FETCH_WAIT_MS
from ostinato.kafka.task_topics import TaskTopics
from ostinato.schemas.partitioner import partition_for
from ostinato.schemas.topics import TaskKind, held_topic_pattern, queue_of_held_topic, task_topic_name
from ostinato.streams.rate import TokenBucket, share
from ostinato.streams.versioning import unversioned_queue

# The limiter's bucket holds half a second of the rate: a round (fetch, produce, commit) can take that long on a busy
# server, and a smaller bucket would drop the tokens earned meanwhile, holding the queue below its limit.
BURST_S = 0.5

log = logging.getLogger("ostinato.ratelimit")
TXN_TIMEOUT_MS = 10_000
MAX_BATCH = 500
MAX_WAITING = 1_000  # tasks in memory per partition before it is paused
IDLE_POLL_S = 0.1
MIN_POLL_S = 0.002


class Held(Protocol):
    """What the release plan needs of a held record (a confluent-kafka `Message` is one)."""

    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...


H = TypeVar("H", bound=Held)
Where = tuple[str, int]


def take_released(waiting: Mapping[Where, deque[H]], allow: Callable[[str], bool],
                  queue_of: Callable[[str], str | None]) -> list[H]:
    """The waiting tasks that go now, taken off the front of their partition's queue while `allow` gives their
    task queue a token: a partition is FIFO, nothing overtakes a waiting task. A record of a topic that is no held
    topic (None from `queue_of`) goes."""
    released: list[H] = []
    for (topic, _partition), tasks in waiting.items():
        queue = queue_of(topic)
        while tasks and (queue is None or allow(queue)):
            released.append(tasks.popleft())
    return released


class RateLimiter(TransactionalLoop):
    """One server's share of releasing held activity tasks. `limits()` is the cluster's current setting
    (queue -> activities per second, from `<prefix>.cluster`); a queue without one is released at once (its
    limit was lifted while tasks waited)."""

    kind = "rate-limiter"

    def __init__(self, bootstrap: str, prefix: str, task_topics: TaskTopics, limits: Callable[[], Mapping[str, float]],
                 instance: str, on_failure: Callable[[str, BaseException], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # The transactional id is stable per data directory (a restart fences its crashed predecessor) and under the
        # processors' `<prefix>-processor-` prefix, which the server's ACLs already grant (docs/security.md).
        super().__init__(bootstrap, "held", f"{prefix}-rate-limiter", f"{prefix}-processor-{instance}-rate-limiter",
                         on_failure, transaction_timeout_ms=TXN_TIMEOUT_MS)
        self.prefix = prefix
        self.task_topics = task_topics
        self.limits = limits
        self.clock = clock
        self.buckets: dict[str, TokenBucket] = {}
        self.waiting: dict[Where, deque[Message]] = {}  # fetched, not yet released, per held partition
        self.paused: set[Where] = set()
        self.partitions: dict[str, int] = {}  # held topic -> partition count
        self.released = 0

    def run(self) -> None:
        consumer = self.consumer(**{"topic.metadata.refresh.interval.ms": 1000,
                                    "fetch.wait.max.ms": STEADY_FETCH_WAIT_MS})
        producer = self._first_producer()
        if producer is None:
            return
        consumer.subscribe([held_topic_pattern(self.prefix)], on_revoke=self._forget, on_lost=self._forget)
        try:
            while not self._stop.is_set():
                producer = self._step(consumer, producer)
        finally:
            producer.flush(5)
            consumer.close()

    def _first_producer(self) -> Producer | None:
        """The transactional producer, waiting out a transaction coordinator not ready yet (a busy or starting
        broker): a server must not stop for that. None when stopped meanwhile."""
        delay = 0.5
        while not self._stop.is_set():
            try:
                return self.producer()
            except KafkaException as exc:
                if exc.args[0].fatal():
                    raise
                log.warning("rate limiter: no transactional producer yet (%s); retrying in %.1fs", exc, delay)
                self._stop.wait(delay)
                delay = min(5.0, delay * 2)
        return None

    def _forget(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions taken away: their waiting tasks are the next owner's to read again (nothing was committed)."""
        for tp in partitions:
            self.waiting.pop((tp.topic, tp.partition), None)
            self.paused.discard((tp.topic, tp.partition))

    def _step(self, consumer: Consumer, producer: Producer) -> Producer:
        """One round: fetch, release what the queues' buckets allow, keep the rest waiting."""
        for msg in consumer.consume(MAX_BATCH, self._poll_timeout()):
            if msg.error() is not None:
                log.debug("rate limiter: %s", msg.error())
                continue
            self.waiting.setdefault((msg.topic() or "", msg.partition() or 0), deque()).append(msg)
        self._flow(consumer)
        if not any(self.waiting.values()):
            return producer
        now = self.clock()
        owned = self._owned(consumer.assignment())
        released = take_released(self.waiting, lambda q: self._allow(q, now, owned),
                                 lambda t: queue_of_held_topic(self.prefix, t))
        return self._release(producer, consumer, released) if released else producer

    def _flow(self, consumer: Consumer) -> None:
        """Pause a partition with `MAX_WAITING` tasks in memory, resume it once it has room again."""
        full = {where for where, tasks in self.waiting.items() if len(tasks) >= MAX_WAITING}
        if full - self.paused:
            consumer.pause([TopicPartition(t, p) for t, p in full - self.paused])
        if self.paused - full:
            consumer.resume([TopicPartition(t, p) for t, p in self.paused - full])
        self.paused = full

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
            self.waiting.clear()  # every assigned partition is read again from its committed offset
            if self.paused:
                consumer.resume([TopicPartition(t, p) for t, p in self.paused])
                self.paused = set()
            producer = self.recover(producer, consumer, exc)
        return producer

    def _allow(self, queue: str, now: float, owned: Mapping[str, tuple[int, int]]) -> bool:
        """Whether one more task of `queue` may go now (taking its token)."""
        # A build's tasks (`q.build-A`, worker versioning) share their queue's limit and its one bucket, so two
        # builds draining at once release the queue's rate, not twice it.
        base = unversioned_queue(queue)
        limits = self.limits()
        limit = limits.get(base) or limits.get(queue)
        mine, total = owned.get(base, (1, 1))
        rate = share(limit, mine, total) if limit else 0.0
        if rate <= 0:
            self.buckets.pop(base, None)
            return True
        bucket = self.buckets.get(base)
        if bucket is None:
            bucket = self.buckets[base] = TokenBucket.per_second(rate, now, BURST_S)
        elif bucket.rate != rate:
            bucket.set_rate(rate, now, BURST_S)
        return bucket.take(now)

    def _owned(self, assignment: list[TopicPartition]) -> dict[str, tuple[int, int]]:
        """Per queue (its builds' held topics counted with it): how many of its held partitions this limiter owns,
        and how many there are in the topics it owns any of."""
        counts: dict[str, int] = {}
        for tp in assignment:
            counts[tp.topic] = counts.get(tp.topic, 0) + 1
        out: dict[str, tuple[int, int]] = {}
        for topic, mine in counts.items():
            queue = queue_of_held_topic(self.prefix, topic)
            if queue is not None:
                had_mine, had_total = out.get(unversioned_queue(queue), (0, 0))
                out[unversioned_queue(queue)] = (had_mine + mine, had_total + self._partition_count(topic))
        return out

    def _partition_count(self, topic: str) -> int:
        known = self.partitions.get(topic)
        if known is None:
            known = self.partitions[topic] = self.task_topics.partitions(topic)
        return known

    def _poll_timeout(self) -> float:
        """Idle: wait for tasks. Tasks waiting: only until the first of their buckets has a token."""
        now = self.clock()
        queues = {unversioned_queue(q) for (t, _), tasks in self.waiting.items()
                  if tasks and (q := queue_of_held_topic(self.prefix, t)) is not None}
        waits = [self.buckets[q].wait(now) for q in queues if q in self.buckets]
        if not waits:
            return MIN_POLL_S if any(self.waiting.values()) else IDLE_POLL_S
        return max(MIN_POLL_S, min(IDLE_POLL_S, min(waits)))
