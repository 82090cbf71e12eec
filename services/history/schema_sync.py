"""Schemas between processes of different versions (a rolling upgrade): learn the writer schemas others published
to `<prefix>.schemas`, so their records decode here, and publish ours before writing a single record with them."""

from __future__ import annotations

import json
import logging
import time

from confluent_kafka import KafkaError, TopicPartition

from ostinato.kafka.clients import reader
from ostinato.schemas import codec
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.cluster import ClusterError, produce_all

log = logging.getLogger("ostinato.schemas")


def sync_schemas(bootstrap: str, prefix: str, timeout: float = 30.0) -> tuple[int, int]:
    """Returns (writer schemas learned, schemas published)."""
    topic = topic_name(prefix, Topic.SCHEMAS)
    registry = codec.registry()
    # Published by admin tools outside transactions: read uncommitted, to the high watermark.
    consumer = reader(bootstrap, f"{prefix}-schema-sync", isolation="read_uncommitted")
    published: set[str] = set()
    learned = 0
    try:
        tp = TopicPartition(topic, 0)
        _, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        position = 0
        while position < high:
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out reading {topic} ({position} of {high} records)")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise ClusterError(f"reading {topic}: {msg.error().str()}")
                position = max(position, msg.offset())
                continue
            position = msg.offset() + 1
            if msg.key() is None or msg.value() is None:
                continue
            fingerprint = msg.key().decode()
            published.add(fingerprint)
            if not _known(registry, fingerprint):
                learned += _learn(registry, msg.value())
    finally:
        consumer.close()
    ours = [(i.fingerprint.hex().encode(), i.canonical.encode()) for i in registry.schemas
            if i.fingerprint.hex() not in published]
    if ours:
        produce_all(bootstrap, topic, ours, timeout)
    if learned or ours:
        log.info("schemas: learned %d writer schema(s) from %s, published %d", learned, topic, len(ours))
    return learned, len(ours)


def _known(registry: codec.SchemaRegistry, fingerprint: str) -> bool:
    try:
        return registry.knows_writer(bytes.fromhex(fingerprint))
    except ValueError:
        return True  # not a fingerprint: nothing to learn from it


def _learn(registry: codec.SchemaRegistry, value: bytes) -> int:
    try:
        registry.add_writer_schema(json.loads(value))
        return 1
    except (ValueError, KeyError, TypeError) as exc:
        # A record type this version does not know (added by a newer one): its records are rejected as unknown.
        log.debug("schemas: cannot use a published schema (%s)", exc)
        return 0
