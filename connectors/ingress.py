"""Kafka ingress: records of any topic start and signal workflows, exactly once (`ingress_mapping.py` says how a
record maps; this module moves it).

Per mapping, one consumer in the group `<prefix>-ingress-<name>` (so it scales with the source's partitions across
servers) and one transactional producer. A batch of source records becomes commands on `<prefix>.commands` (to the
workflow's shard) and dead letters, produced in one transaction with the source offsets
(`send_offsets_to_transaction` with the consumer's group metadata: a member that lost its partitions is fenced by
the group coordinator, KIP-447). A crash anywhere aborts the open transaction; the next owner of the partition
resumes from the committed offsets, so every record becomes exactly one command.

The transactional id is stable per process (`<prefix>-ingress-<name>-<instance>`, the server's owner id): a
restarted server fences and aborts its crashed incarnation's transaction at once. Until then that transaction
hides every later record of the commands partitions it wrote to, from every processor; so the transaction timeout
is short (`OSTINATO_TXN_TIMEOUT_MS`, 2 s, as the processors').
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge

from ostinato.connectors.ingress_mapping import (
    IngressConfig,
    IngressMapping,
    Record,
    Unmappable,
    dead_letter_headers,
    prefetch_schemas,
    translate,
)
from ostinato.connectors.outcomes import OutcomeSource, OutcomeStream, ensure_topic, outcome_counter
from ostinato.connectors.registry_wait import RegistryWait
from ostinato.connectors.schema_registry import RegistryUnavailable
from ostinato.connectors.transactional import OPERATION_TIMEOUT_S, TransactionalLoop
from ostinato.kafka.clients import admin_client
from ostinato.schemas.cluster import ClusterSettings
from ostinato.schemas.topics import MAX_RECORD_BYTES, Topic, topic_name

log = logging.getLogger("ostinato.ingress")
TXN_TIMEOUT_MS = int(os.environ.get("OSTINATO_TXN_TIMEOUT_MS", "2000"))
BATCH = 500
POLL_S = 0.1
LAG_EVERY_S = 1.0


class IngressMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.records = Counter("ostinato_ingress_records", "Source records taken, by mapping and outcome (command "
                               "or dead_letter).", ["mapping", "outcome"], registry=registry)
        self.lag = Gauge("ostinato_ingress_lag", "Source records not yet taken, by mapping (this process's "
                         "partitions).", ["mapping"], registry=registry)
        self.aborts = Counter("ostinato_ingress_aborts", "Ingress transactions aborted, by mapping.", ["mapping"],
                              registry=registry)
        self.registry_retries = Counter(
            "ostinato_ingress_registry_unavailable", "Batches taken back because the schema registry could not be "
            "reached, by mapping (nothing is dead-lettered; the batch is retried with backoff).", ["mapping"],
            registry=registry)
        self.registry_waiting = Gauge("ostinato_ingress_registry_waiting", "1 while a mapping waits for its schema "
                                      "registry to come back.", ["mapping"], registry=registry)


class MappingRunner(TransactionalLoop):
    """One mapping's consume-translate-produce loop, in its own thread."""

    kind = "ingress"

    def __init__(self, bootstrap: str, settings: ClusterSettings, mapping: IngressMapping, instance: str,
                 metrics: IngressMetrics, on_failure: Callable[[str, BaseException], None] | None = None,
                 namespace_known: Callable[[str], bool] | None = None) -> None:
        prefix = settings.topic_prefix
        super().__init__(bootstrap, mapping.name, f"{prefix}-{mapping.group}", f"{prefix}-ingress-{mapping.name}-"
                         f"{instance}", on_failure, transaction_timeout_ms=TXN_TIMEOUT_MS)
        self.settings, self.mapping, self.metrics = settings, mapping, metrics
        self.namespace_known = namespace_known
        self.commands_topic = topic_name(prefix, Topic.COMMANDS)
        self.registry_wait = RegistryWait(mapping.name, metrics.registry_retries.labels(mapping.name),
                                          metrics.registry_waiting.labels(mapping.name), self._stop)

    def run(self) -> None:
        ensure_dead_letter_topic(self.bootstrap, self.mapping, self.settings.replication_factor)
        consumer = self.consumer(**{"enable.auto.offset.store": False, "fetch.max.bytes": MAX_RECORD_BYTES * 4})
        producer = self.producer()
        consumer.subscribe([self.mapping.topic])
        log.info("ingress %s: %s -> %s (%s), group %s", self.mapping.name, self.mapping.topic, self.mapping.action,
                 self.commands_topic, self.group)
        lag_at = 0.0
        try:
            while not self._stop.is_set():
                messages = consumer.consume(BATCH, timeout=POLL_S)
                records = [m for m in messages if m.error() is None]
                for m in messages:
                    if m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
                        log.warning("ingress %s: consuming %s: %s", self.mapping.name, self.mapping.topic,
                                    m.error().str())
                if records:
                    try:
                        # Schemas are fetched before the transaction: a slow registry never holds one open.
                        prefetch_schemas(self.mapping, [(m.key(), m.value()) for m in records])
                        self._transaction(producer, consumer, records)
                        self.registry_wait.succeeded()
                    except RegistryUnavailable as exc:
                        rewind(consumer, records)
                        first = records[0]
                        self.registry_wait.failed(exc, f"{first.topic()}/{first.partition()}/{first.offset()}")
                    except KafkaException as exc:
                        self.metrics.aborts.labels(self.mapping.name).inc()
                        producer = self.recover(producer, consumer, exc)
                if time.monotonic() - lag_at >= LAG_EVERY_S:
                    lag_at = time.monotonic()
                    self.metrics.lag.labels(self.mapping.name).set(lag_of(consumer))
        finally:
            consumer.close()
            producer.flush(5)

    def _transaction(self, producer: Producer, consumer: KafkaConsumer, records: Sequence[Message]) -> None:
        producer.begin_transaction()
        try:
            commands, dead = self._produce(producer, records)
        except RegistryUnavailable:  # a schema the prefetch did not keep: nothing of this batch may commit
            producer.abort_transaction(OPERATION_TIMEOUT_S)  # a KafkaException here is recovered as any other
            raise
        self.commit(producer, consumer, records)
        self.metrics.records.labels(self.mapping.name, "command").inc(commands)
        if dead:
            self.metrics.records.labels(self.mapping.name, "dead_letter").inc(dead)

    def _produce(self, producer: Producer, records: Sequence[Message]) -> tuple[int, int]:
        """Each record's command or dead letter into the open transaction; (commands, dead letters)."""
        now = time.time_ns() // 1_000_000
        commands = dead = 0
        for msg in records:
            record = Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                            tuple(msg.headers() or ()))
            try:
                command = translate(self.mapping, record, self.settings.shards, now)
                if self.namespace_known is not None and not self.namespace_known(command.namespace):
                    raise Unmappable(f"namespace {command.namespace!r} is not registered (`ostinato namespace "
                                     "register`); the API would not see the run")
            except RegistryUnavailable:
                raise  # not the record's fault: the whole batch is taken back and retried, never dead-lettered
            except Exception as exc:  # noqa: BLE001 - whatever a record does to the mapping, it is one dead letter
                why = str(exc) if isinstance(exc, Unmappable) else f"the mapping failed: {type(exc).__name__}: {exc}"
                value = record.value
                if value is not None and len(value) + len(record.key or b"") > MAX_RECORD_BYTES:
                    why, value = f"{why} (the value, {len(value):,} bytes, is left out: too large)", None
                producer.produce(self.mapping.dead_letters, value, record.key,
                                 headers=dead_letter_headers(self.mapping, record, why))
                dead += 1
            else:
                producer.produce(self.commands_topic, command.value, command.key, partition=command.partition)
                commands += 1
            producer.poll(0)
        return commands, dead


def rewind(consumer: KafkaConsumer, records: Sequence[Message]) -> None:
    """Seek each partition of the batch back to its first record, so the batch is taken again (and nothing past it
    is committed) while the consumer keeps polling."""
    firsts: dict[tuple[str, int], int] = {}
    for msg in records:
        firsts.setdefault((msg.topic(), msg.partition()), msg.offset())
    for (topic, partition), offset in firsts.items():
        with contextlib.suppress(KafkaException):  # revoked meanwhile: its next owner resumes from the commit
            consumer.seek(TopicPartition(topic, partition, offset))


def lag_of(consumer: KafkaConsumer) -> int:
    """Records behind the end of the assigned partitions (as the consumer last heard of the end)."""
    total = 0
    assignment = consumer.assignment()
    if not assignment:
        return 0
    for tp in consumer.position(assignment):
        if tp.offset < 0:  # nothing fetched since the assignment: the position is not known yet, nor the lag
            continue
        try:
            _, high = consumer.get_watermark_offsets(tp, cached=True)
        except KafkaException:
            continue
        if high >= 0:
            total += max(0, high - tp.offset)
    return total


def ensure_dead_letter_topic(bootstrap: str, mapping: IngressMapping, replication: int) -> None:
    """Create the dead-letter topic (as many partitions as the source) if it does not exist yet."""
    topics = admin_client(bootstrap).list_topics(timeout=OPERATION_TIMEOUT_S).topics
    source = topics.get(mapping.topic)
    partitions = len(source.partitions) if source is not None and source.partitions else 1
    ensure_topic(bootstrap, mapping.dead_letters, partitions, replication)


class Ingress:
    """Every mapping and outcomes stream of an ingress file, each in its own thread. `outcome_source` reads a closed
    run's outcome from the cluster's API (needed only when the file has `outcomes:`)."""

    def __init__(self, bootstrap: str, settings: ClusterSettings, config: IngressConfig, instance: str,
                 registry: CollectorRegistry, on_failure: Callable[[str, BaseException], None] | None = None,
                 outcome_source: OutcomeSource | None = None,
                 namespace_known: Callable[[str], bool] | None = None) -> None:
        metrics = IngressMetrics(registry)
        self.runners: list[MappingRunner | OutcomeStream] = [
            MappingRunner(bootstrap, settings, m, instance, metrics, on_failure, namespace_known)
            for m in config.mappings]
        if config.outcomes:
            if outcome_source is None:
                raise ValueError("outcomes streams need a source of outcomes (the cluster's API)")
            counter = outcome_counter(registry)
            self.runners += [OutcomeStream(bootstrap, settings.topic_prefix, spec, instance, outcome_source, counter,
                                           settings.shards, settings.replication_factor, on_failure)
                             for spec in config.outcomes]

    def start(self) -> Ingress:
        for runner in self.runners:
            runner.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        for runner in self.runners:
            runner._stop.set()  # all at once, then each joined
        for runner in self.runners:
            runner.stop(timeout_s)
