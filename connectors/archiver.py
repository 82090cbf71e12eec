"""The archiver: closed runs from `<prefix>.visibility` to S3, then `ArchivalCompleted` to the run's owner.

Why the visibility topic and not a queue of its own: every closed run has a closing visibility record, and that
record stays in the compacted topic until the run is deleted, which the owner only does after the archive is
confirmed (DESIGN.md §7). So a consumer group on that topic sees every run that still needs archiving, however
long the archiver was down, and a rebuilt archiver (offsets reset) simply archives again, idempotently.

Order of effects per run: read the closed history (from the owner's read API, through `HistorySource`), write
the archive and its index entry, produce `ArchivalCompleted` and wait for Kafka's acknowledgement, and only
then commit the visibility offset. A crash anywhere repeats the whole step: the same object is written again
and the owner ignores a second confirmation. Nothing is deleted until the owner has the confirmation.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from ostinato.connectors.archive import ArchivedRun, ArchiveError, S3Archive
from ostinato.kafka.clients import base_config, group_session_config, group_session_timeout_ms
from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import workflow_key

log = logging.getLogger("ostinato.archiver")

HistorySource = Callable[[str, str, str], "list[bytes] | None"]
"""(namespace, workflow_id, run_id) -> the run's history events as stored (single-object Avro), or None when
the run no longer exists. May raise: the archiver retries with backoff."""


class NotReady(Exception):
    """The run cannot be archived yet (its owner has not stored the whole history); try again shortly."""


class Archiver:
    """Archives closed runs from a background thread; `start`, `stop`, and counters for metrics and tests.

    Args:
        shards: the cluster's shard count, to route `ArchivalCompleted` to the owner's partition.
        enabled: whether a namespace archives (a namespace that does not is skipped, its runs left alone).
    """

    def __init__(self, bootstrap: str, prefix: str, shards: int, archive: S3Archive, history: HistorySource, *,
                 group_id: str | None = None, enabled: Callable[[str], bool] = lambda _ns: True,
                 max_backoff_s: float = 10.0, poll_timeout_s: float = 0.5) -> None:
        self.topic = f"{prefix}.visibility"
        self.commands_topic = f"{prefix}.commands"
        self.shards = shards
        self.archive = archive
        self.history = history
        self.enabled = enabled
        self.max_backoff_s = max_backoff_s
        self.poll_timeout_s = poll_timeout_s
        self.group_id = group_id or f"{prefix}-archiver"
        self._consumer_config = {
            **base_config(bootstrap, "ostinato-archiver"), "group.id": self.group_id,
            "enable.auto.commit": False, "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky", "logger": log,
        }
        self._producer = Producer({**base_config(bootstrap, "ostinato-archiver"), "enable.idempotence": True,
                                   "linger.ms": 5, "logger": log})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.archived = 0
        self.skipped = 0
        self.retries = 0
        self.error: BaseException | None = None

    def start(self) -> Archiver:
        self._thread = threading.Thread(target=self._run, name="ostinato-archiver", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._producer.flush(5)

    def _run(self) -> None:
        # The processors' short session: with Kafka's 45 s, a server restarted after a crash archived nothing for
        # 45 s, waiting for its dead incarnation to leave the group.
        session = group_session_config(group_session_timeout_ms(self._consumer_config["bootstrap.servers"]))
        consumer = Consumer({**self._consumer_config, **session})
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                self._step(consumer)
        except BaseException as exc:
            self.error = exc
            log.exception("the archiver stopped")
        finally:
            consumer.close()

    def _step(self, consumer: Consumer) -> None:
        done: dict[int, int] = {}
        for msg in consumer.consume(100, self.poll_timeout_s):
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise KafkaException(err)
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("archiver: %s", err)
                continue
            if not self._archive_with_retries(msg):
                break  # stopping: leave this record (and the rest of the batch) uncommitted for the next owner
            done[int(msg.partition() or 0)] = int(msg.offset() or 0) + 1
        if done:
            consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in done.items()], asynchronous=False)

    def _archive_with_retries(self, msg: Message) -> bool:
        delay = 0.2
        while not self._stop.is_set():
            try:
                self.archive_record(msg.key(), msg.value())
                return True
            except (NotReady, ArchiveError, KafkaException, OSError, ValueError) as exc:
                self.retries += 1
                level = logging.DEBUG if isinstance(exc, NotReady) else logging.WARNING
                log.log(level, "archiver: %s; retrying in %.1fs", exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self.max_backoff_s)
        return False

    def archive_record(self, key: bytes | None, value: bytes | None) -> str | None:
        """Archive the run a visibility record describes if it is closed; the archive's URI, or None if skipped."""
        if value is None:
            return None  # a tombstone: the run was deleted (archived before, or archiving was off)
        try:
            type_name, rec = codec.decode(value)
        except ValueError as exc:
            type_name, rec = f"an undecodable record ({exc})", {}
        if type_name != wire.VISIBILITY:
            self.skipped += 1
            log.warning("archiver: skipped %s under key %r", type_name, key)
            return None
        ns, wid, rid = rec["namespace"], rec["workflow_id"], rec["run_id"]
        if rec["close_time_ms"] is None or not self.enabled(ns):
            return None
        raw = self.history(ns, wid, rid)
        if raw is None:
            log.info("archiver: %s/%s/%s no longer exists; nothing to archive", ns, wid, rid)
            return None
        if len(raw) < rec["history_length"]:
            raise NotReady(f"{ns}/{wid}/{rid}: its owner has {len(raw)} of {rec['history_length']} events so far")
        events = [codec.decode(b)[1] for b in raw]
        status = rec["status"] if isinstance(rec["status"], str) else str(rec["status"])
        uri = self.archive.write(ArchivedRun(ns, wid, rid, rec["workflow_type"], status, rec["close_time_ms"], events))
        self._confirm(ns, wid, rid, uri, len(events))
        self.archived += 1
        log.debug("archived %s/%s/%s (%d events) to %s", ns, wid, rid, len(events), uri)
        return uri

    def _confirm(self, ns: str, wid: str, rid: str, uri: str, event_count: int) -> None:
        command = wire.command(ns, wid, ("ArchivalCompleted", {"uri": uri, "event_count": event_count}), run_id=rid,
                               request_id=f"archive-{uuid.uuid4().hex}", identity="ostinato-archiver",
                               time_ms=int(time.time() * 1000))
        key = workflow_key(ns, wid)
        failure: list[Any] = []
        self._producer.produce(self.commands_topic, codec.encode(wire.COMMAND, command), key.encode(),
                               partition=partition_for(key, self.shards),
                               on_delivery=lambda err, _m: failure.append(err) if err is not None else None)
        if self._producer.flush(30) > 0:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "ArchivalCompleted not acknowledged in 30 s"))
        if failure:
            raise KafkaException(failure[0])


