"""The broker under test is real: transactions commit and abort, and read_committed tells them apart."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import admin_client


def _read_all(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}", "isolation.level": isolation,
        "enable.partition.eof": True, "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, f"no end of partition seen on {topic} ({isolation})"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return values
            values.append(msg.value())
    finally:
        consumer.close()


def test_read_committed_sees_exactly_the_committed_batch(kafka: KafkaCluster, topic_prefix: str) -> None:
    topic = f"{topic_prefix}.txn"
    admin = admin_client(kafka.bootstrap)  # kept in a variable: a collected client cancels its futures
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{topic_prefix}-txn"})
    producer.init_transactions(30)

    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"committed-{i}".encode())
    producer.commit_transaction(30)

    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, value=f"aborted-{i}".encode())
    producer.flush(30)  # the aborted records really reach the log before the abort
    producer.abort_transaction(30)

    committed = [f"committed-{i}".encode() for i in range(3)]
    assert _read_all(kafka.bootstrap, topic, "read_committed") == committed
    # The same log read without isolation shows the aborted records too: the filtering above is the broker's.
    assert _read_all(kafka.bootstrap, topic, "read_uncommitted") == [*committed, b"aborted-0", b"aborted-1"]
