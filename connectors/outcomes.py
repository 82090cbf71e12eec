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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import NewTopic
from prometheus_client import CollectorRegistry, Counter

from ostinato.connectors.transactional import OPERATION_TIMEOUT_S, TransactionalLoop
from ostinato.kafka.clients import admin_client
from ostinato.schemas import codec
from ostinato.schemas.topics import MAX_RECORD_BYTES, Topic, topic_name

log = logging.getLogger("ostinato.outcomes")
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


class OutcomeStream(TransactionalLoop):
    """One `outcomes:` entry, in its own thread."""

    kind = "outcomes"

    def __init__(self, bootstrap: str, prefix: str, spec: OutcomeSpec, instance: str, source: OutcomeSource,
                 records: Counter | None = None, partitions: int = 1, replication: int = 1,
                 on_failure: Callable[[str, BaseException], None] | None = None) -> None:
        super().__init__(bootstrap, spec.name, f"{prefix}-outcomes-{spec.name}",
                         f"{prefix}-outcomes-{spec.name}-{instance}", on_failure)
        self.spec, self.source = spec, source
        self.partitions, self.replication = partitions, replication
        self.visibility_topic = topic_name(prefix, Topic.VISIBILITY)
        self.records = records if records is not None else outcome_counter(CollectorRegistry())

    def run(self) -> None:
        ensure_topic(self.bootstrap, self.spec.topic, self.partitions, self.replication)
        consumer = self.consumer()
        producer = self.producer()
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
                    producer = self.recover(producer, consumer, exc)
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

    def _transaction(self, producer: Producer, consumer: Consumer, messages: list[Message],
                     outcomes: list[tuple[bytes, bytes, str]]) -> None:
        producer.begin_transaction()
        for key, value, status in outcomes:
            producer.produce(self.spec.topic, value, key, headers=[("ostinato.status", status.encode())])
        self.commit(producer, consumer, messages)
        self.records.labels(self.spec.name).inc(len(outcomes))
