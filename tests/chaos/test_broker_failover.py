"""Losing one broker of three: replicated topics keep taking transactional writes and keep serving them."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import admin_client
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.cluster import cluster_status, init_cluster


def _commit_batch(producer: Producer, topic: str, label: str, count: int, partitions: int) -> list[bytes]:
    values = [f"{label}-{i}".encode() for i in range(count)]
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % partitions)
    producer.commit_transaction(60)
    return values


def _read_committed(bootstrap: str, topic: str, partitions: int) -> set[bytes]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}", "isolation.level": "read_committed",
        "enable.partition.eof": True, "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: set[bytes] = set()
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"only partitions {sorted(at_end)} reached their end"
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
            else:
                seen.add(msg.value())
    finally:
        consumer.close()
    return seen


def _leader_of(bootstrap: str, topic: str, partition: int) -> int:
    admin = admin_client(bootstrap)
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader


def test_replicated_topic_survives_a_killed_broker(kafka3: KafkaCluster, topic_prefix: str) -> None:
    shards = 3
    result = init_cluster(kafka3.bootstrap, topic_prefix, shards=shards)
    assert result.settings.replication_factor == 3
    commands = topic_name(topic_prefix, Topic.COMMANDS)
    status = cluster_status(kafka3.bootstrap, topic_prefix)
    assert {t.name: (t.replication_factor, t.configs["min.insync.replicas"]) for t in status.topics}[commands] == (
        3, "2")

    producer = Producer({
        "bootstrap.servers": kafka3.bootstrap, "transactional.id": f"{topic_prefix}-failover",
        "transaction.timeout.ms": 60000,
    })
    producer.init_transactions(60)
    before = _commit_batch(producer, commands, "before", 30, shards)

    victim = _leader_of(kafka3.bootstrap, commands, 0)
    kafka3.kill_node(victim)
    try:
        # The producer now talks to a cluster missing the leader of partition 0 (and perhaps its transaction
        # coordinator): the commit must still succeed once leadership moves, with two replicas in sync.
        after = _commit_batch(producer, commands, "after", 30, shards)
        new_leader = _leader_of(kafka3.bootstrap, commands, 0)
        assert new_leader not in (victim, -1)
        assert _read_committed(kafka3.bootstrap, commands, shards) == set(before + after)
    finally:
        kafka3.start_node(victim)
