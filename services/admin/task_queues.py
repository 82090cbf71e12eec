"""`task-queue describe`: a queue's backlog (consumer lag of its worker group), the age of its oldest waiting task
and the workers in the group, per task kind, and the activity tasks its rate limit holds back. Read from Kafka's own
bookkeeping: nothing extra is stored."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from ostinato.kafka.clients import base_config
from ostinato.kafka.task_topics import worker_group
from ostinato.schemas.topics import TaskKind, held_topic_name, task_queue_problem, task_topic_name
from ostinato.services.admin.lag import GroupPositions

TIMEOUT_S = 10.0
SCAN_LIMIT = 10_000  # tasks counted one by one per partition before estimating


def describe_task_queue(bootstrap: str, prefix: str, queue: str) -> dict[str, Any]:
    """Backlog and oldest task age per kind, and the group's members. Raises ValueError for an invalid name."""
    problem = task_queue_problem(queue)
    if problem:
        raise ValueError(problem)
    admin = AdminClient(base_config(bootstrap, "ostinato-task-queues"))
    group = worker_group(prefix, queue)
    out: dict[str, Any] = {"task_queue": queue, "group": group, "workers": _members(admin, group)}
    consumer = Consumer({**base_config(bootstrap, "ostinato-task-queues"), "group.id": f"{group}-inspect",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    groups = GroupPositions(bootstrap, "ostinato-task-queues")
    try:
        for kind in TaskKind:
            out[kind.value] = _backlog(admin, consumer, groups, group, task_topic_name(prefix, queue, kind))
        # a rate-limited queue's activity tasks the rate limiter has not released yet (docs/architecture.md §7)
        out["held"] = _backlog(admin, consumer, groups, f"{prefix}-rate-limiter", held_topic_name(prefix, queue))
    finally:
        consumer.close()
        groups.close()
    return out


def _members(admin: AdminClient, group: str) -> list[dict[str, str]]:
    try:
        described = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
    except KafkaException:
        return []
    return [{"member_id": m.member_id, "client_id": m.client_id, "host": m.host} for m in described.members]


def _backlog(admin: AdminClient, consumer: Consumer, groups: GroupPositions, group: str, topic: str,
             ) -> dict[str, Any]:
    meta = admin.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        return {"exists": False, "partitions": 0, "backlog": 0, "oldest_age_ms": None}
    tps = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
    offsets = groups.read(group, topic, [tp.partition for tp in tps], TIMEOUT_S)
    backlog, oldest = 0, None
    now_ms = time.time_ns() // 1_000_000
    for tp in tps:
        low, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S, cached=False)
        position = offsets.get(tp.partition, -1)
        position = low if position < 0 else max(position, low)
        if high <= position:
            continue
        count, stamp = _count(consumer, TopicPartition(topic, tp.partition, position), high)
        backlog += count
        if stamp is not None:
            oldest = max(oldest or 0, now_ms - stamp)
    return {"exists": True, "partitions": len(tps), "backlog": backlog, "oldest_age_ms": oldest}


def _count(consumer: Consumer, start: TopicPartition, high: int) -> tuple[int, int | None]:
    """Tasks between the group's position and the end, and the first one's timestamp. Counted, not subtracted:
    transaction markers occupy offsets too. Past SCAN_LIMIT tasks the offset difference stands in (an upper bound)."""
    consumer.assign([start])
    count, first = 0, None
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while count < SCAN_LIMIT and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                position = consumer.position([start])[0].offset
                if position >= high:
                    break
                continue
            if msg.error() is not None:
                continue
            if first is None:
                first = int(msg.timestamp()[1])
            count += 1
            if msg.offset() + 1 >= high:
                break
        if count >= SCAN_LIMIT:
            count = high - start.offset
        return count, first
    finally:
        consumer.unassign()
