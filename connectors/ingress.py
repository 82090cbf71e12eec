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

import logging
import os
import threading
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
    translate,
)
from ostinato.connectors.outcomes import OutcomeSource, OutcomeStream, ensure_topic, outcome_counter
from ostinato.kafka.clients import admin_client, base_config
from ostinato.schemas.cluster import ClusterSettings
from ostinato.schemas.topics import MAX_RECORD_BYTES, Topic, topic_name

log = logging.getLogger("ostinato.ingress")
TXN_TIMEOUT_MS = int(os.environ.get("OSTINATO_TXN_TIMEOUT_MS", "2000"))
OPERATION_TIMEOUT_S = 30.0
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


class MappingRunner:
    """One mapping's consume-translate-produce loop, in its own thread."""

    def __init__(self, bootstrap: str, settings: ClusterSettings, mapping: IngressMapping, instance: str,
                 metrics: IngressMetrics, on_failure: Callable[[str, BaseException], None] | None = None,
                 namespace_known: Callable[[str], bool] | None = None) -> None:
        self.bootstrap, self.settings, self.mapping, self.metrics = bootstrap, settings, mapping, metrics
        self.on_failure = on_failure
        self.namespace_known = namespace_known
        self.group = f"{settings.topic_prefix}-{mapping.group}"
        self.transactional_id = f"{settings.topic_prefix}-ingress-{mapping.name}-{instance}"
        self.commands_topic = topic_name(settings.topic_prefix, Topic.COMMANDS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run_guarded, name=f"ostinato-ingress-{mapping.name}",
                                        daemon=True)
        self.failure: BaseException | None = None
        self.ready = threading.Event()

    def start(self) -> MappingRunner:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run_guarded(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            log.exception("ingress mapping %s stopped with an error", self.mapping.name)
            self.failure = exc
            if self.on_failure is not None:
                self.on_failure(self.mapping.name, exc)

    def _producer(self) -> Producer:
        producer = Producer({
            **base_config(self.bootstrap, self.transactional_id),
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "enable.idempotence": True, "acks": "all", "linger.ms": 1,
            "message.max.bytes": MAX_RECORD_BYTES + 64 * 1024,
        })
        producer.init_transactions(OPERATION_TIMEOUT_S)  # fences this instance's crashed incarnation
        return producer

    def run(self) -> None:
        ensure_dead_letter_topic(self.bootstrap, self.mapping, self.settings.replication_factor)
        consumer = KafkaConsumer({
            **base_config(self.bootstrap, f"{self.transactional_id}-consumer"),
            "group.id": self.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "fetch.max.bytes": MAX_RECORD_BYTES * 4,
        })
        producer = self._producer()
        consumer.subscribe([self.mapping.topic])
        self.ready.set()
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
                        self._transaction(producer, consumer, records)
                    except KafkaException as exc:
                        producer = self._recover(producer, consumer, exc)
                if time.monotonic() - lag_at >= LAG_EVERY_S:
                    lag_at = time.monotonic()
                    self.metrics.lag.labels(self.mapping.name).set(lag_of(consumer))
        finally:
            consumer.close()
            producer.flush(5)

    def _transaction(self, producer: Producer, consumer: KafkaConsumer, records: Sequence[Message]) -> None:
        producer.begin_transaction()
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
        positions = {}
        for msg in records:
            positions[(msg.topic(), msg.partition())] = msg.offset() + 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(positions.items())]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), OPERATION_TIMEOUT_S)
        producer.commit_transaction(OPERATION_TIMEOUT_S)
        self.metrics.records.labels(self.mapping.name, "command").inc(commands)
        if dead:
            self.metrics.records.labels(self.mapping.name, "dead_letter").inc(dead)

    def _recover(self, producer: Producer, consumer: KafkaConsumer, exc: KafkaException) -> Producer:
        """Abort, and take the batch again from the committed offsets (a new producer if this one is fenced or
        failed). Kafka being briefly away (a broker restarting) is waited out with backoff, never fatal."""
        err = exc.args[0]
        log.warning("ingress %s: transaction failed (%s); aborting and resuming from the committed offsets",
                    self.mapping.name, err.str())
        self.metrics.aborts.labels(self.mapping.name).inc()
        delay = 0.1
        while not self._stop.is_set():
            try:
                if err.txn_requires_abort():
                    producer.abort_transaction(OPERATION_TIMEOUT_S)
                else:  # fenced (a newer incarnation or a twin with our --instance) or fatal: start afresh
                    producer.flush(1)
                    producer = self._producer()
                assignment = consumer.assignment()
                if assignment:
                    for tp in consumer.committed(assignment, timeout=OPERATION_TIMEOUT_S):
                        # never committed: from the start, as auto.offset.reset says
                        consumer.seek(tp if tp.offset >= 0 else TopicPartition(tp.topic, tp.partition, -2))
                return producer
            except KafkaException as again:
                err = again.args[0]
                log.warning("ingress %s: recovering: %s; retrying in %.1fs", self.mapping.name, err.str(), delay)
                self._stop.wait(delay)
                delay = min(5.0, delay * 2)
        return producer


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

    def failed(self) -> BaseException | None:
        return next((r.failure for r in self.runners if r.failure is not None), None)

    def stop(self, timeout_s: float = 30.0) -> None:
        for runner in self.runners:
            runner._stop.set()
        for runner in self.runners:
            runner.stop(timeout_s)
