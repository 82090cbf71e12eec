"""Reading a whole topic as a downstream consumer would: every committed record, partition by partition."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import KafkaError, Message, TopicPartition

from ostinato.kafka.clients import reader


def read_committed(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Message]:
    """Every committed record of `topic` (read_committed), up to the partitions' ends as they are now, in offset
    order per partition; [] for a topic that does not exist yet."""
    consumer = reader(bootstrap, f"test-read-{uuid.uuid4().hex[:8]}")
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in meta.partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        out: list[Message] = []
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout
        while len(done) < len(ends) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is None:
                    out.append(msg)
                    if msg.offset() + 1 >= ends[msg.partition()]:
                        done.add(msg.partition())
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
        return out
    finally:
        consumer.close()
