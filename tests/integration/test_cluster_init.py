"""`cluster init` creates the topics of DESIGN.md §3 as specified, records the settings and is idempotent."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import admin_client
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.cluster import ClusterError, cluster_status, init_cluster, read_settings
from tests.conftest import run_cli


def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = admin_client(bootstrap)
    entries = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    return {k: e.value for k, e in next(iter(entries.values())).result(30).items()}


def _partitions(bootstrap: str, topic: str) -> int:
    return len(admin_client(bootstrap).list_topics(timeout=10).topics[topic].partitions)


def test_init_creates_every_topic_with_its_partitions_and_configs(kafka: KafkaCluster, topic_prefix: str) -> None:
    result = init_cluster(kafka.bootstrap, topic_prefix, shards=6, reply_partitions=3)

    assert result.recorded
    assert sorted(result.created) == sorted(topic_name(topic_prefix, t) for t in Topic)
    b = kafka.bootstrap
    for per_shard in (Topic.COMMANDS, Topic.HISTORY, Topic.STATE, Topic.VISIBILITY):
        assert _partitions(b, topic_name(topic_prefix, per_shard)) == 6
    assert _partitions(b, topic_name(topic_prefix, Topic.REPLIES)) == 3
    assert _partitions(b, topic_name(topic_prefix, Topic.CLUSTER)) == 1
    assert _partitions(b, topic_name(topic_prefix, Topic.SCHEMAS)) == 1
    for compacted in (Topic.HISTORY, Topic.STATE, Topic.VISIBILITY, Topic.CLUSTER, Topic.SCHEMAS):
        assert _configs(b, topic_name(topic_prefix, compacted))["cleanup.policy"] == "compact"
    commands = _configs(b, topic_name(topic_prefix, Topic.COMMANDS))
    assert (commands["cleanup.policy"], commands["retention.ms"]) == ("delete", str(7 * 24 * 3600 * 1000))
    assert _configs(b, topic_name(topic_prefix, Topic.REPLIES))["cleanup.policy"] == "delete"

    settings = read_settings(b, topic_prefix)
    assert settings is not None
    assert (settings.shards, settings.replication_factor, settings.reply_partitions) == (6, 1, 3)


def test_init_is_idempotent_and_repairs(kafka: KafkaCluster, topic_prefix: str) -> None:
    first = init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    # Someone deletes a topic and changes a config behind our back: init puts both right.
    admin = admin_client(kafka.bootstrap)
    admin.delete_topics([topic_name(topic_prefix, Topic.REPLIES)])[topic_name(topic_prefix, Topic.REPLIES)].result(30)
    history = topic_name(topic_prefix, Topic.HISTORY)
    resource = ConfigResource(ResourceType.TOPIC, history, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)

    second = init_cluster(kafka.bootstrap, topic_prefix, shards=2)

    assert not second.recorded
    assert second.settings == first.settings
    assert second.created == [topic_name(topic_prefix, Topic.REPLIES)]
    assert history in second.reconfigured
    assert _configs(kafka.bootstrap, history)["cleanup.policy"] == "compact"
    third = init_cluster(kafka.bootstrap, topic_prefix, shards=None)  # shards optional once recorded
    assert third.created == [] and third.reconfigured == [] and len(third.unchanged) == len(Topic)


def test_another_shard_count_fails_clearly(kafka: KafkaCluster, topic_prefix: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=3)
    with pytest.raises(ClusterError, match="initialised with 3 shards, not 5"):
        init_cluster(kafka.bootstrap, topic_prefix, shards=5)

    cli = run_cli("cluster", "init", "--shards", "5", "--kafka", kafka.bootstrap, "--prefix", topic_prefix)
    assert cli.returncode == 1
    assert "initialised with 3 shards, not 5" in cli.stderr
    assert "Traceback" not in cli.stderr


def test_existing_topics_with_wrong_partitions_are_refused(kafka: KafkaCluster, topic_prefix: str) -> None:
    from confluent_kafka.admin import NewTopic

    commands = topic_name(topic_prefix, Topic.COMMANDS)
    admin = admin_client(kafka.bootstrap)
    admin.create_topics([NewTopic(commands, 2, 1)])[commands].result(30)
    with pytest.raises(ClusterError, match=f"{commands} exists with 2 partitions but this cluster needs 4"):
        init_cluster(kafka.bootstrap, topic_prefix, shards=4)


def test_new_cluster_needs_a_shard_count(kafka: KafkaCluster, topic_prefix: str) -> None:
    with pytest.raises(ClusterError, match="--shards is required"):
        init_cluster(kafka.bootstrap, topic_prefix, shards=None)


def test_status_shows_brokers_shards_and_topics(kafka: KafkaCluster, topic_prefix: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    status = cluster_status(kafka.bootstrap, topic_prefix)
    assert [b.port for b in status.brokers] == [kafka.nodes[0].port]
    assert status.settings is not None and status.settings.shards == 2
    assert {t.name for t in status.topics} == {topic_name(topic_prefix, t) for t in Topic}

    cli = run_cli("cluster", "status", "--kafka", kafka.bootstrap, "--prefix", topic_prefix)
    assert cli.returncode == 0, cli.stderr
    assert "2 shards" in cli.stdout
    assert topic_name(topic_prefix, Topic.HISTORY) in cli.stdout


def _read_topic(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while (msg := consumer.poll(10)) is not None:
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF
                return out
            out.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    raise AssertionError(f"no end of {topic} seen")


def test_a_consumer_with_only_kafka_decodes_the_settings(kafka: KafkaCluster, topic_prefix: str) -> None:
    """Schemas published by init suffice: no Ostinato code is used to decode below."""
    import io

    from fastavro import parse_schema, schemaless_reader
    from fastavro.schema import fingerprint

    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    schemas = {key.decode(): value.decode() for key, value in _read_topic(kafka.bootstrap, f"{topic_prefix}.schemas")}
    for fp, canonical in schemas.items():
        assert fingerprint(canonical, "CRC-64-AVRO") == fp
    ((key, value),) = _read_topic(kafka.bootstrap, f"{topic_prefix}.cluster")
    assert key == b"settings" and value[:2] == b"\xc3\x01"
    writer = parse_schema(json.loads(schemas[value[2:10].hex()]))
    record = schemaless_reader(io.BytesIO(value[10:]), writer, None)
    assert (record["topic_prefix"], record["shards"]) == (topic_prefix, 2)


def test_racing_inits_agree_on_the_first_settings_written(kafka: KafkaCluster, topic_prefix: str) -> None:
    """Two inits that both saw no settings both write; the first record is the cluster's for everyone."""
    from dataclasses import replace

    from ostinato.services.admin.cluster import _write_settings

    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    first = read_settings(kafka.bootstrap, topic_prefix)
    assert first is not None
    _write_settings(kafka.bootstrap, topic_prefix, replace(first, shards=7), timeout=30)  # the loser's write

    assert read_settings(kafka.bootstrap, topic_prefix) == first
    with pytest.raises(ClusterError, match="initialised with 2 shards, not 7"):
        init_cluster(kafka.bootstrap, topic_prefix, shards=7)


def test_settings_that_cannot_change_are_not_silently_ignored(kafka: KafkaCluster, topic_prefix: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2, reply_partitions=2)
    with pytest.raises(ClusterError, match="--reply-partitions 2, not 5"):
        init_cluster(kafka.bootstrap, topic_prefix, shards=2, reply_partitions=5)
    with pytest.raises(ClusterError, match="--replication-factor 1, not 3"):
        init_cluster(kafka.bootstrap, topic_prefix, shards=2, replication_factor=3)
    with pytest.raises(ClusterError, match="at least 1"):
        init_cluster(kafka.bootstrap, f"{topic_prefix}x", shards=2, replication_factor=0)
