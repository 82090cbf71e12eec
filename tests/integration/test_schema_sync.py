"""A process learns writer schemas a newer version published, and publishes its own when they are missing."""

from __future__ import annotations

import io
import json
import uuid

from confluent_kafka.admin import NewTopic
from fastavro import schemaless_writer

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import admin_client
from ostinato.schemas import codec
from ostinato.services.admin.cluster import init_cluster, produce_all
from ostinato.services.history.schema_sync import sync_schemas

OWNER = "ostinato.cluster.ShardOwner"


def _newer_shard_owner() -> codec.SchemaInfo:
    """ShardOwner as a later version might write it: one more field, with a default (Avro-compatible)."""
    source = json.loads(codec.registry().schema(OWNER).canonical)
    source["fields"].append({"name": f"zone_{uuid.uuid4().hex[:6]}", "type": "string", "default": ""})
    return codec.SchemaRegistry().add_writer_schema(source)


def test_a_newer_writer_schema_is_learned_and_its_records_decode(kafka: KafkaCluster, topic_prefix: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=1)
    newer = _newer_shard_owner()
    produce_all(kafka.bootstrap, f"{topic_prefix}.schemas", [(newer.fingerprint.hex().encode(),
                                                                newer.canonical.encode())], 10)
    body = io.BytesIO()
    record = {"shard": 0, "owner_id": "p", "read_endpoint": "http://x", "generation": 1, "updated_at_ms": 2,
              newer.source["fields"][-1]["name"]: "eu-1"}
    schemaless_writer(body, newer.parsed, record)
    data = codec.MAGIC + newer.fingerprint + body.getvalue()
    assert not codec.registry().knows_writer(newer.fingerprint)
    learned, published = sync_schemas(kafka.bootstrap, topic_prefix)
    assert (learned, published) == (1, 0)
    name, decoded = codec.decode(data)
    assert name == OWNER and decoded["owner_id"] == "p" and "zone" not in json.dumps(decoded)


def test_missing_schemas_are_published(kafka: KafkaCluster, topic_prefix: str) -> None:
    topic = f"{topic_prefix}.schemas"
    admin = admin_client(kafka.bootstrap)  # kept alive until the topic exists
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    learned, published = sync_schemas(kafka.bootstrap, topic_prefix)
    assert learned == 0 and published == len(codec.registry().schemas)
    assert sync_schemas(kafka.bootstrap, topic_prefix) == (0, 0)
