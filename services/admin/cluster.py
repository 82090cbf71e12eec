"""Cluster administration: create the topics of DESIGN.md §3, record the settings, report status."""

from __future__ import annotations

import getpass
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from ostinato.kafka.clients import admin_client, idempotent_producer, reader, wait_for_brokers
from ostinato.schemas import codec
from ostinato.schemas.cluster import SETTINGS_KEY, ClusterSettings
from ostinato.schemas.topics import DEFAULT_REPLY_PARTITIONS, Topic, TopicSpec, catalogue, topic_name


class ClusterError(RuntimeError):
    """The cluster is not in a state the request can work with; the message says what to do."""


@dataclass
class InitResult:
    settings: ClusterSettings
    created: list[str] = field(default_factory=list)
    reconfigured: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    recorded: bool = False


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    controller: bool


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]
    under_replicated: int


@dataclass
class ClusterStatus:
    bootstrap: str
    cluster_id: str | None
    brokers: list[BrokerInfo]
    settings: ClusterSettings | None
    topics: list[TopicInfo]


def read_settings(bootstrap: str, prefix: str, timeout: float = 15.0) -> ClusterSettings | None:
    """The settings recorded by `cluster init`, or None for a cluster never initialised under `prefix`."""
    admin = admin_client(bootstrap)
    wait_for_brokers(admin, bootstrap, timeout)
    return _read_settings(admin, bootstrap, prefix, timeout)


def _read_settings(admin: AdminClient, bootstrap: str, prefix: str, timeout: float) -> ClusterSettings | None:
    topic = topic_name(prefix, Topic.CLUSTER)
    if topic not in admin.list_topics(timeout=timeout).topics:
        return None
    # Settings are written outside transactions; reading uncommitted keeps a hung transaction of another writer
    # of this topic (shard ownership) from stalling every reader at its last stable offset.
    # A short fetch wait: the end (a transaction marker after the last record) is seen from an empty fetch, which
    # the broker would otherwise hold for 500 ms on every server start.
    consumer = reader(bootstrap, f"{prefix}-cluster-reader", isolation="read_uncommitted",
                      overrides={"fetch.wait.max.ms": 20})
    try:
        tp = TopicPartition(topic, 0)
        _, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        if high == 0:
            return None
        consumer.assign([TopicPartition(topic, 0, 0)])
        settings: ClusterSettings | None = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.05)
            if (settings is None and msg is not None and msg.error() is None and msg.key() == SETTINGS_KEY.encode()
                    and msg.value() is not None):
                # The first record wins: two racing inits both write, and everyone must agree on one of them.
                settings = ClusterSettings.decode(msg.value())
            # Transaction markers occupy offsets without being delivered: stop on position, not on a last record.
            if consumer.position([tp])[0].offset >= high:
                return settings
        raise ClusterError(f"timed out reading {topic} at {bootstrap}")
    finally:
        consumer.close()


def init_cluster(
    bootstrap: str,
    prefix: str,
    shards: int | None,
    replication_factor: int | None = None,
    reply_partitions: int | None = None,
    timeout: float = 30.0,
) -> InitResult:
    """Create or repair every topic and record the settings; safe to run any number of times.

    The shard count is fixed at creation because workflow ids hash to shards forever: asking for another one
    fails instead of silently re-sharding.
    """
    admin = admin_client(bootstrap)
    brokers = wait_for_brokers(admin, bootstrap, timeout)
    existing = _read_settings(admin, bootstrap, prefix, timeout)
    if existing is not None:
        _check_against(existing, bootstrap, shards, replication_factor, reply_partitions)
        settings = existing
    else:
        if shards is None:
            raise ClusterError(f"cluster '{prefix}' is not initialised yet: --shards is required")
        if shards < 1:
            raise ClusterError(f"--shards must be at least 1, not {shards}")
        if replication_factor is not None and replication_factor < 1:
            raise ClusterError(f"--replication-factor must be at least 1, not {replication_factor}")
        if reply_partitions is not None and reply_partitions < 1:
            raise ClusterError(f"--reply-partitions must be at least 1, not {reply_partitions}")
        rf = replication_factor if replication_factor is not None else min(3, brokers)
        if rf > brokers:
            raise ClusterError(f"replication factor {rf} needs {rf} brokers; {bootstrap} has {brokers}")
        settings = ClusterSettings(
            topic_prefix=prefix, shards=shards, replication_factor=rf,
            reply_partitions=reply_partitions or DEFAULT_REPLY_PARTITIONS,
            created_at_ms=int(time.time() * 1000), created_by=f"{getpass.getuser()}@{socket.gethostname()}",
        )
    specs = catalogue(prefix, settings.shards, settings.replication_factor, settings.reply_partitions)
    result = InitResult(settings=settings)
    _ensure_topics(admin, specs, settings.replication_factor, result, timeout)
    _publish_schemas(bootstrap, prefix, timeout)
    if existing is None:
        _write_settings(bootstrap, prefix, settings, timeout)
        winner = _read_settings(admin, bootstrap, prefix, timeout)
        if winner != settings:  # another init wrote first: its settings are the cluster's
            if winner is None:
                raise ClusterError(f"cluster settings written to {topic_name(prefix, Topic.CLUSTER)} did not read back")
            _check_against(winner, bootstrap, shards, replication_factor, reply_partitions)
            result.settings = winner
        else:
            result.recorded = True
    return result


def _check_against(existing: ClusterSettings, bootstrap: str, shards: int | None, replication_factor: int | None,
                   reply_partitions: int | None) -> None:
    """Fail when an explicit request contradicts what the cluster was created with; silence would mislead."""
    prefix = existing.topic_prefix
    if shards is not None and shards != existing.shards:
        raise ClusterError(
            f"cluster '{prefix}' at {bootstrap} was initialised with {existing.shards} shards, not {shards}. "
            "The shard count is fixed at creation (workflow ids hash to shards); run init with "
            f"--shards {existing.shards}, or use another --prefix for a new cluster."
        )
    for flag, asked, recorded in (("--replication-factor", replication_factor, existing.replication_factor),
                                  ("--reply-partitions", reply_partitions, existing.reply_partitions)):
        if asked is not None and asked != recorded:
            raise ClusterError(
                f"cluster '{prefix}' at {bootstrap} was initialised with {flag} {recorded}, not {asked}; "
                "changing it after creation is not supported"
            )


def _ensure_topics(admin: AdminClient, specs: list[TopicSpec], rf: int, result: InitResult, timeout: float) -> None:
    present = _create_missing(admin, specs, rf, result, timeout)
    for spec in specs:
        partitions = len(present[spec.name].partitions)
        if partitions != spec.partitions:
            raise ClusterError(
                f"topic {spec.name} exists with {partitions} partitions but this cluster needs {spec.partitions}. "
                "It was created by something else; delete it or use another --prefix."
            )
    for spec in specs:
        if spec.name in result.created:
            continue
        current = _topic_configs(admin, spec.name, timeout)
        drift = {k: v for k, v in spec.configs.items() if current.get(k) != v}
        if drift:
            resource = ConfigResource(
                ResourceType.TOPIC, spec.name,
                incremental_configs=[
                    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in drift.items()
                ],
            )
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(timeout=timeout)
            result.reconfigured.append(spec.name)
        else:
            result.unchanged.append(spec.name)


def _create_missing(
    admin: AdminClient, specs: list[TopicSpec], rf: int, result: InitResult, timeout: float
) -> dict[str, Any]:
    """Create absent topics until metadata shows them all; returns that metadata.

    A topic still being deleted answers "already exists" yet is about to vanish, so creation is retried
    until the topic is really there rather than trusting one answer.
    """
    deadline = time.monotonic() + timeout
    while True:
        present = admin.list_topics(timeout=timeout).topics
        missing = [s for s in specs if s.name not in present]
        if not missing:
            return present
        if time.monotonic() > deadline:
            raise ClusterError(f"topics {', '.join(s.name for s in missing)} did not appear within {timeout:.0f}s")
        futures = admin.create_topics(
            [NewTopic(s.name, num_partitions=s.partitions, replication_factor=rf, config=s.configs) for s in missing],
            request_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result()
                result.created.append(name)
            except KafkaException as exc:
                code = exc.args[0].code()
                if code not in (KafkaError.TOPIC_ALREADY_EXISTS, KafkaError.REQUEST_TIMED_OUT):
                    raise ClusterError(f"could not create topic {name}: {exc.args[0].str()}") from None
        time.sleep(0.2)


def _topic_configs(admin: AdminClient, topic: str, timeout: float) -> dict[str, str]:
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=timeout)
    entries = next(iter(futures.values())).result(timeout=timeout)
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def _write_settings(bootstrap: str, prefix: str, settings: ClusterSettings, timeout: float) -> None:
    produce_all(bootstrap, topic_name(prefix, Topic.CLUSTER), [(SETTINGS_KEY.encode(), settings.encode())], timeout)


def _publish_schemas(bootstrap: str, prefix: str, timeout: float) -> None:
    """Every shipped schema, keyed by the fingerprint records carry, so a consumer with only Kafka can decode.

    The value is the schema's Parsing Canonical Form: complete (named types inlined) and enough to read
    records written with it. Re-publishing is harmless: the topic is compacted by fingerprint.
    """
    records = [(info.fingerprint.hex().encode(), info.canonical.encode()) for info in codec.registry().schemas]
    produce_all(bootstrap, topic_name(prefix, Topic.SCHEMAS), records, timeout)


def produce_all(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], timeout: float) -> None:
    producer = idempotent_producer(bootstrap, "ostinato-admin")
    errors: list[KafkaError] = []
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    remaining = producer.flush(timeout)
    if remaining or errors:
        detail = errors[0].str() if errors else "not acknowledged in time"
        raise ClusterError(f"could not write to {topic}: {detail}")


def cluster_status(bootstrap: str, prefix: str, timeout: float = 15.0) -> ClusterStatus:
    admin = admin_client(bootstrap)
    wait_for_brokers(admin, bootstrap, timeout)
    described = admin.describe_cluster(request_timeout=timeout).result()
    controller_id = described.controller.id if described.controller else None
    brokers = sorted(
        (BrokerInfo(n.id, n.host, n.port, n.id == controller_id) for n in described.nodes),
        key=lambda b: b.node_id,
    )
    settings = _read_settings(admin, bootstrap, prefix, timeout)
    metadata = admin.list_topics(timeout=timeout)
    topics = []
    for name in sorted(t for t in metadata.topics if t.startswith(f"{prefix}.")):
        parts = metadata.topics[name].partitions.values()
        configs = _topic_configs(admin, name, timeout)
        keep = ("cleanup.policy", "retention.ms", "min.insync.replicas")
        topics.append(TopicInfo(
            name=name,
            partitions=len(parts),
            replication_factor=max((len(p.replicas) for p in parts), default=0),
            configs={k: configs[k] for k in keep if k in configs},
            under_replicated=sum(1 for p in parts if len(p.isrs) < len(p.replicas)),
        ))
    return ClusterStatus(bootstrap, described.cluster_id, brokers, settings, topics)
