"""What the ingress mappings and the outcomes streams share: a consume-transform-produce loop in its own thread, in
which each batch's output records and its consumed offsets commit in one Kafka transaction (`send_offsets_
to_transaction` with the consumer's group metadata, KIP-447, so a member that lost its partitions is fenced).

A failed transaction is aborted (or, for a fenced or fatal producer, replaced) and the batch taken again from the
committed offsets; Kafka briefly away is waited out with backoff. Anything else that ends the loop is reported
through `on_failure`, so whoever runs it (a server) can stop rather than run on without it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from ostinato.kafka.clients import base_config, group_session_config, group_session_timeout_ms
from ostinato.schemas.topics import MAX_RECORD_BYTES

log = logging.getLogger("ostinato.connectors")
OPERATION_TIMEOUT_S = 30.0


class TransactionalLoop:
    """Subclasses implement `run()` with `consumer()`, `producer()`, `commit()` and `recover()`."""

    kind = "loop"  # for log lines and the thread's name: "ingress", "outcomes"

    def __init__(self, bootstrap: str, name: str, group: str, transactional_id: str,
                 on_failure: Callable[[str, BaseException], None] | None = None,
                 transaction_timeout_ms: int | None = None) -> None:
        self.bootstrap, self.name, self.group, self.transactional_id = bootstrap, name, group, transactional_id
        self.on_failure = on_failure
        self.transaction_timeout_ms = transaction_timeout_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=f"ostinato-{self.kind}-{name}", daemon=True)

    def start(self) -> TransactionalLoop:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def run(self) -> None:
        raise NotImplementedError

    def _guarded(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            log.exception("%s %s stopped with an error", self.kind, self.name)
            if self.on_failure is not None:
                self.on_failure(self.name, exc)

    def consumer(self, **overrides: Any) -> Consumer:
        """The loop's group member, with the processors' short session (`group_session_timeout_ms`): with Kafka's
        45 s, a server restarted after a crash took nothing from its source topics for 45 s, waiting for its dead
        incarnation to leave the group."""
        return Consumer({
            **base_config(self.bootstrap, f"{self.transactional_id}-consumer"), "group.id": self.group,
            "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            **group_session_config(group_session_timeout_ms(self.bootstrap)), **overrides})

    def producer(self) -> Producer:
        """A transactional producer; `init_transactions` fences (and aborts) this id's crashed incarnation."""
        timeout = {} if self.transaction_timeout_ms is None else {"transaction.timeout.ms": self.transaction_timeout_ms}
        producer = Producer({**base_config(self.bootstrap, self.transactional_id),
                             "transactional.id": self.transactional_id, **timeout, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 1, "message.max.bytes": MAX_RECORD_BYTES + 64 * 1024})
        producer.init_transactions(OPERATION_TIMEOUT_S)
        return producer

    @staticmethod
    def commit(producer: Producer, consumer: Consumer, messages: Sequence[Message]) -> None:
        """Send the batch's offsets (each partition's last + 1) into the open transaction and commit it."""
        positions: dict[tuple[str, int], int] = {}
        for msg in messages:
            positions[(msg.topic(), msg.partition())] = msg.offset() + 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(positions.items())]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), OPERATION_TIMEOUT_S)
        producer.commit_transaction(OPERATION_TIMEOUT_S)

    def recover(self, producer: Producer, consumer: Consumer, exc: KafkaException) -> Producer:
        """Abort and take the batch again from the committed offsets (a new producer when this one is fenced, by
        a newer incarnation or a twin with the same id, or failed); Kafka briefly away is waited out."""
        err = exc.args[0]
        log.warning("%s %s: transaction failed (%s); resuming from the committed offsets", self.kind, self.name,
                    err.str())
        delay = 0.1
        while not self._stop.is_set():
            try:
                if err.txn_requires_abort():
                    producer.abort_transaction(OPERATION_TIMEOUT_S)
                else:
                    producer.flush(1)
                    producer = self.producer()
                assignment = consumer.assignment()
                if assignment:
                    for tp in consumer.committed(assignment, timeout=OPERATION_TIMEOUT_S):
                        # never committed: from the start, as auto.offset.reset says
                        consumer.seek(tp if tp.offset >= 0 else TopicPartition(tp.topic, tp.partition, -2))
                return producer
            except KafkaException as again:
                err = again.args[0]
                log.warning("%s %s: recovering: %s; retrying in %.1fs", self.kind, self.name, err.str(), delay)
                self._stop.wait(delay)
                delay = min(5.0, delay * 2)
        return producer
