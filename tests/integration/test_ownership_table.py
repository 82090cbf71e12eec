"""The ownership table reads the cluster topic to its end, then follows it with a steady (long) fetch wait.

After catching up it swaps its short-wait consumer for one that waits as long as the other steady readers; the
records written after the swap must still arrive, none skipped. Real broker.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import base_config
from ostinato.schemas import codec, wire
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.cluster import init_cluster
from ostinato.services.admin.ownership import OwnershipTable


def announce(producer: Producer, topic: str, shard: int, owner: str) -> None:
    record = {"shard": shard, "owner_id": owner, "read_endpoint": f"http://{owner}", "generation": 1,
              "updated_at_ms": 1}
    producer.produce(topic, codec.encode(wire.SHARD_OWNER, record), f"shard/{shard}".encode(), partition=0)
    producer.flush(10)


def owner_of(table: OwnershipTable, shard: int, expected: str, timeout: float = 10.0) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = table.owner(shard)
        if found is not None and found["owner_id"] == expected:
            return expected
        time.sleep(0.02)
    found = table.owner(shard)
    return None if found is None else str(found["owner_id"])


def test_records_written_after_catching_up_are_all_read(kafka: KafkaCluster, topic_prefix: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    topic = topic_name(topic_prefix, Topic.CLUSTER)
    producer = Producer(base_config(kafka.bootstrap, "test-ownership"))
    announce(producer, topic, 0, "first")
    table = OwnershipTable(kafka.bootstrap, topic_prefix).start()
    try:
        assert table.caught_up.wait(10)
        assert owner_of(table, 0, "first") == "first"
        assert table._settled  # what follows is read by the steady consumer
        for n in range(5):  # one at a time: each must arrive through the steady consumer
            announce(producer, topic, n % 2, f"owner-{n}")
            assert owner_of(table, n % 2, f"owner-{n}") == f"owner-{n}"
        assert owner_of(table, 0, "owner-4") == "owner-4"
        assert owner_of(table, 1, "owner-3") == "owner-3"
    finally:
        table.stop()
