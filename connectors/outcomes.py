"""The "workflow closed" stream: every closed run of a namespace as one JSON record on a topic of the user's
choosing, exactly once, for downstream consumers that want outcomes, not histories (`outcomes:` in the ingress
file; `ostinato server --ingress FILE` or `ostinato ingress run FILE` runs it).

Why the visibility topic: every run's close writes its closing visibility record in the closing transaction, and
that record stays in the compacted topic until retention deletes the run; so a consumer group on it sees every
close, however long the stream was stopped. The outcome itself (result, failure, termination reason) is read
from the owner (`GET .../result?follow=false`, through `OutcomeSource`) before the transaction begins; then the
outcome records and the visibility offsets commit in one transaction. A crash before the commit repeats the
batch, and a committed batch is never produced again: each close is on the topic once for a `read_committed`
consumer.

Record: key `<namespace>/<workflow_id>`, value JSON
`{"namespace", "workflow_id", "run_id", "workflow_type", "task_queue", "status", "start_time_ms", "close_time_ms",
  "result" | "failure" | "reason" | "new_run_id"}`, header `ostinato.status`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from prometheus_client import CollectorRegistry, Counter

from ostinato.kafka.clients import admin_client, base_config
from ostinato.schemas import codec
from ostinato.schemas.topics import MAX_RECORD_BYTES, Topic, topic_name

log = logging.getLogger("ostinato.outcomes")
OPERATION_TIMEOUT_S = 30.0
BATCH = 200
MAX_BACKOFF_S = 10.0

OutcomeSource = Callable[[str, str, str], "dict[str, Any] | None"]
"""(namespace, workflow_id, run_id) -> the API's outcome of that run (`status` and `result`, `failure`...), or None
when the run no longer exists. May raise: the stream retries with backoff."""


class OutcomesError(ValueError):
    """An `outcomes:` entry of the ingress file is wrong."""


@dataclass(frozen=True)
class OutcomeSpec:
    name: str
    topic: str
    namespace: str = "default"
    workflow_types: tuple[str, ...] = ()  # empty: every type

    @staticmethod
    def parse(entry: Any, where: str) -> OutcomeSpec:
        if not isinstance(entry, dict):
            raise OutcomesError(f"{where}: expected a mapping of settings")
        unknown = sorted(set(entry) - {"name", "topic", "namespace", "workflow_types"})
        if unknown:
            raise OutcomesError(f"{where}: unknown setting(s) {', '.join(unknown)}")
        for required in ("name", "topic"):
            if not isinstance(entry.get(required), str) or not entry[required]:
                raise OutcomesError(f"{where}: `{required}` is required (a string)")
        types = entry.get("workflow_types", [])
        if not isinstance(types, list) or not all(isinstance(t, str) and t for t in types):
            raise OutcomesError(f"{where}: workflow_types is a list of workflow type names")
        namespace = entry.get("namespace", "default")
        if not isinstance(namespace, str) or not namespace:
            raise OutcomesError(f"{where}: namespace must be a name")
        return OutcomeSpec(entry["name"], entry["topic"], namespace, tuple(types))

    def wants(self, record: dict[str, Any]) -> bool:
        """Whether a visibility record is a close this stream reports."""
        return (record["close_time_ms"] is not None and record["namespace"] == self.namespace
                and (not self.workflow_types or record["workflow_type"] in self.workflow_types))


def outcome_record(visibility: dict[str, Any], outcome: dict[str, Any]) -> tuple[bytes, bytes, str]:
    """(key, JSON value, status) of one close."""
    status = str(outcome.get("status") or visibility["status"])
    value = {"namespace": visibility["namespace"], "workflow_id": visibility["workflow_id"],
             "run_id": visibility["run_id"], "workflow_type": visibility["workflow_type"],
             "task_queue": visibility["task_queue"], "status": status,
             "start_time_ms": visibility["start_time_ms"], "close_time_ms": visibility["close_time_ms"],
             **{k: v for k, v in outcome.items() if k not in ("run_id", "status")}}
    key = f"{visibility['namespace']}/{visibility['workflow_id']}".encode()
    return key, json.dumps(value, separators=(",", ":"), default=str).encode(), status


def outcome_counter(registry: CollectorRegistry) -> Counter:
    return Counter("ostinato_outcomes_records", "Closed runs written to an outcomes topic, by stream.", ["stream"],
                   registry=registry)


def ensure_topic(bootstrap: str, topic: str, partitions: int, replication: int) -> None:
    """Create `topic` if it does not exist yet (a producer to a missing topic would fail every transaction)."""
    admin = admin_client(bootstrap)
    if topic in admin.list_topics(timeout=OPERATION_TIMEOUT_S).topics:
        return
    # Records up to Ostinato's limit (a dead letter carries a source record; an outcome a workflow's result).
    config = {"max.message.bytes": str(MAX_RECORD_BYTES + 64 * 1024)}
    for future in admin.create_topics([NewTopic(topic, partitions, replication, config=config)]).values():
        try:
            future.result(OPERATION_TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


class OutcomeStream:
    """One `outcomes:` entry, in its own thread."""

    def __init__(self, bootstrap: str, prefix: str, spec: OutcomeSpec, instance: str, source: OutcomeSource,
                 records: Counter | None = None, partitions: int = 1, replication: int = 1,
                 on_failure: Callable[[str, BaseException], None] | None = None) -> None:
        self.bootstrap, self.spec, self.source, self.on_failure = bootstrap, spec, source, on_failure
        self.partitions, self.replication = partitions, replication
        self.visibility_topic = topic_name(prefix, Topic.VISIBILITY)
        self.group = f"{prefix}-outcomes-{spec.name}"
        self.transactional_id = f"{prefix}-outcomes-{spec.name}-{instance}"
        self.records = records if records is not None else outcome_counter(CollectorRegistry())
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=f"ostinato-outcomes-{spec.name}", daemon=True)

    def start(self) -> OutcomeStream:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _guarded(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            log.exception("outcomes stream %s stopped with an error", self.spec.name)
            self.failure = exc
            if self.on_failure is not None:
                self.on_failure(self.spec.name, exc)

    def _producer(self) -> Producer:
        producer = Producer({**base_config(self.bootstrap, self.transactional_id),
                             "transactional.id": self.transactional_id, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 1, "message.max.bytes": MAX_RECORD_BYTES + 64 * 1024})
        producer.init_transactions(OPERATION_TIMEOUT_S)
        return producer

    def run(self) -> None:
        ensure_topic(self.bootstrap, self.spec.topic, self.partitions, self.replication)
        consumer = KafkaConsumer({
            **base_config(self.bootstrap, f"{self.transactional_id}-consumer"), "group.id": self.group,
            "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky"})
        producer = self._producer()
        consumer.subscribe([self.visibility_topic])
        log.info("outcomes %s: closed runs of namespace %s -> %s", self.spec.name, self.spec.namespace,
                 self.spec.topic)
        try:
            while not self._stop.is_set():
                messages = [m for m in consumer.consume(BATCH, timeout=0.2) if m.error() is None]
                if not messages:
                    continue
                outcomes = self._outcomes(messages)
                if outcomes is None:  # stopping while the owner did not answer: the batch is taken again later
                    break
                try:
                    self._transaction(producer, consumer, messages, outcomes)
                except KafkaException as exc:
                    producer = self._recover(producer, consumer, exc)
        finally:
            consumer.close()
            producer.flush(5)

    def _outcomes(self, messages: list[Message]) -> list[tuple[bytes, bytes, str]] | None:
        """The outcome of every close in the batch, asking the owners until they answer (None if stopped)."""
        out = []
        for msg in messages:
            if msg.value() is None:
                continue  # a deleted run
            _, record = codec.decode(msg.value())
            if not self.spec.wants(record):
                continue
            delay = 0.2
            while True:
                try:
                    outcome = self.source(record["namespace"], record["workflow_id"], record["run_id"])
                    break
                except Exception as exc:  # noqa: BLE001 - the owner is moving or down: retry, never skip a close
                    if self._stop.wait(delay):
                        return None
                    log.warning("outcomes %s: reading the outcome of %s/%s: %s; retrying", self.spec.name,
                                record["workflow_id"], record["run_id"], exc)
                    delay = min(MAX_BACKOFF_S, delay * 2)
            if outcome is not None:  # None: deleted meanwhile (retention); its close is history already
                out.append(outcome_record(record, outcome))
        return out

    def _transaction(self, producer: Producer, consumer: KafkaConsumer, messages: list[Message],
                     outcomes: list[tuple[bytes, bytes, str]]) -> None:
        producer.begin_transaction()
        for key, value, status in outcomes:
            producer.produce(self.spec.topic, value, key, headers=[("ostinato.status", status.encode())])
        positions: dict[tuple[str, int], int] = {}
        for msg in messages:
            positions[(msg.topic(), msg.partition())] = msg.offset() + 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(positions.items())]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), OPERATION_TIMEOUT_S)
        producer.commit_transaction(OPERATION_TIMEOUT_S)
        self.records.labels(self.spec.name).inc(len(outcomes))

    def _recover(self, producer: Producer, consumer: KafkaConsumer, exc: KafkaException) -> Producer:
        """Abort and take the batch again from the committed offsets; Kafka briefly away is waited out."""
        err: KafkaError = exc.args[0]
        log.warning("outcomes %s: transaction failed (%s); resuming from the committed offsets", self.spec.name,
                    err.str())
        delay = 0.2
        while not self._stop.is_set():
            try:
                if err.txn_requires_abort():
                    producer.abort_transaction(OPERATION_TIMEOUT_S)
                else:
                    producer.flush(1)
                    producer = self._producer()
                assignment = consumer.assignment()
                if assignment:
                    for tp in consumer.committed(assignment, timeout=OPERATION_TIMEOUT_S):
                        consumer.seek(tp if tp.offset >= 0 else TopicPartition(tp.topic, tp.partition, -2))
                return producer
            except KafkaException as again:
                err = again.args[0]
                log.warning("outcomes %s: recovering: %s; retrying in %.1fs", self.spec.name, err.str(), delay)
                self._stop.wait(delay)
                delay = min(5.0, delay * 2)
        return producer
