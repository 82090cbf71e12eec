"""The OpenSearch visibility store (DESIGN.md §7): `<prefix>.visibility` bulk-indexed, answering list and count."""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError
from opensearchpy.exceptions import NotFoundError, TransportError

from ostinato.connectors import opensearch_query as osq
from ostinato.connectors.query import Query, SearchAttributeType, parse
from ostinato.connectors.visibility_sqlite import MAX_PAGE_SIZE, make_page_token, read_page_token
from ostinato.kafka.clients import base_config, group_session_config, group_session_timeout_ms
from ostinato.schemas import wire
from ostinato.schemas.codec import decode
from ostinato.schemas.keys import split_key

log = logging.getLogger("ostinato.visibility")
Rows = list[dict[str, Any]]
# A tombstone deletes with this external version, above any record's, so a late upsert of the deleted run arriving
# within `index.gc_deletes` is refused (409) instead of resurrecting it. Run ids are never reused.
TOMBSTONE_VERSION = 2**62


class OpenSearchUnavailableError(RuntimeError):
    """OpenSearch did not take (all of) a batch: unreachable, overloaded or failing; the batch may be retried."""


class OpenSearchVisibilityStore:
    """Visibility records of every namespace in one OpenSearch index, with the API of `SqliteVisibilityStore`.

    Writes are versioned with the record's `version` (`version_type=external`), so replays and late records are
    harmless and a bulk may be retried whole. The topic offsets are not kept here: the feeder's consumer group
    commits them to Kafka once a bulk is acknowledged.

    Args:
        url: e.g. `http://127.0.0.1:9200`.
        index: the index name (created with its mappings when missing).
        search_attributes: as for `SqliteVisibilityStore`: types of untyped payloads, default query registry.
        refresh: the bulk `refresh` parameter. `True` (the default) makes a batch searchable when `apply_batch`
            returns, as in SQLite, for one refresh per batch; `"wait_for"` costs up to the refresh interval per
            batch instead; `False` leaves it to the refresh interval.
        replicas: replicas of the index (0 suits one node).
        timeout: seconds per request.
    """

    def __init__(self, url: str, index: str,
                 search_attributes: Mapping[str, SearchAttributeType | str] | None = None, *,
                 refresh: bool | str = True, replicas: int = 0, timeout: float = 30.0) -> None:
        self.search_attributes = {k: SearchAttributeType.parse(v) for k, v in (search_attributes or {}).items()}
        self.index = index
        self.skipped = 0
        """Records that were not decodable VisibilityRecords, or that OpenSearch refused for good."""
        self._refresh = "true" if refresh is True else "false" if refresh is False else refresh
        self._replicas = replicas
        self._client = OpenSearch(hosts=[url], timeout=timeout, max_retries=0, retry_on_timeout=False)
        self._ready = False
        try:
            self._ensure_index()
        except OpenSearchUnavailableError as exc:  # a server must start while OpenSearch is down; writes wait
            log.warning("OpenSearch is not reachable yet (%s); visibility waits for it", exc)

    def close(self) -> None:
        self._client.close()

    def _ensure_index(self) -> None:
        """The index template, then the index. The template comes first so that an index auto-created by a
        concurrent bulk (another server's feeder writing while this one rebuilds) still gets these mappings."""
        if self._ready:
            return
        template = {"settings": {"number_of_shards": 1, "number_of_replicas": self._replicas,
                                 "index.gc_deletes": "1h", "index.mapping.total_fields.limit": 10000},
                    "mappings": osq.mappings()}
        try:
            self._client.indices.put_index_template(name=f"{self.index}-template", body={
                "index_patterns": [self.index], "priority": 100, "template": template,
                "_meta": {"owner": "ostinato", "about": "visibility records of one Ostinato cluster"}})
            self._client.indices.create(index=self.index)
        except TransportError as exc:
            if exc.error != "resource_already_exists_exception":
                raise OpenSearchUnavailableError(f"cannot create index {self.index}: {exc}") from exc
        except OpenSearchConnectionError as exc:
            raise OpenSearchUnavailableError(f"OpenSearch unreachable: {exc}") from exc
        self._ready = True

    def rebuild(self) -> None:
        """Drop and recreate the index, so a feeder replaying the topic from offset 0 starts from nothing."""
        self._client.indices.delete(index=self.index, ignore_unavailable=True)
        self._ready = False
        self._ensure_index()

    # ------------------------------------------------------------------------------------------------ writes

    def apply(self, key: str | bytes, value: bytes | None) -> None:
        """Apply one record of `<prefix>.visibility`: an upsert unless older than what is stored, or a tombstone."""
        self.apply_batch([(key, value)])

    def apply_batch(self, records: Iterable[tuple[str | bytes, bytes | None]],
                    offsets: Mapping[int, int] | None = None) -> None:
        """Bulk-apply records; `offsets` is accepted for the SQLite signature and ignored (Kafka keeps them).

        Every item is acknowledged (version conflicts and deletes of absent runs count as done; documents refused
        for good are counted in `skipped`) or this raises, and the whole batch may be applied again.

        Raises:
            OpenSearchUnavailableError: OpenSearch is unreachable or failed some items transiently.
        """
        self._ensure_index()
        actions: list[dict[str, Any]] = []
        for key, value in records:
            actions += self._action(key, value)
        if not actions:
            return
        try:
            response = self._client.bulk(body=actions, index=self.index, refresh=self._refresh)
        except (OpenSearchConnectionError, TransportError) as exc:  # the former covers timeouts
            raise OpenSearchUnavailableError(f"bulk of {len(actions)} lines failed: {exc}") from exc
        if response.get("errors"):
            self._check_items(response["items"])

    def _action(self, key: str | bytes, value: bytes | None) -> list[dict[str, Any]]:
        if value is None:
            try:
                ident = split_key(key.decode() if isinstance(key, bytes) else key)
                ns, workflow_id, run_id = ident
            except ValueError:  # not three components, a bad escape or not UTF-8
                self.skipped += 1
                log.warning("visibility: skipped a tombstone with a malformed key %r", key)
                return []
            return [{"delete": {"_id": osq.document_id(ns, workflow_id, run_id), "version": TOMBSTONE_VERSION,
                                "version_type": "external"}}]
        try:
            type_name, rec = decode(value)
        except ValueError as exc:
            type_name, rec = f"an undecodable record ({exc})", {}
        if type_name != wire.VISIBILITY:
            # One bad record must not wedge the store (and its feeder) forever: count it, say so, go on.
            self.skipped += 1
            log.warning("visibility: skipped %s under key %r", type_name, key)
            return []
        if not 0 <= rec["version"] < TOMBSTONE_VERSION:  # OpenSearch would refuse the whole bulk
            self.skipped += 1
            log.warning("visibility: skipped a record with version %s under key %r", rec["version"], key)
            return []
        meta = {"_id": osq.document_id(rec["namespace"], rec["workflow_id"], rec["run_id"]),
                "version": rec["version"], "version_type": "external"}
        return [{"index": meta}, osq.document(rec, value, self.search_attributes)]

    def _check_items(self, items: list[dict[str, Any]]) -> None:
        transient = []
        for item in items:
            op, result = next(iter(item.items()))
            status = int(result.get("status", 500))
            if status < 300 or status == 409 or (op == "delete" and status == 404):
                continue  # done, older than what is stored, or nothing to delete
            if status == 429 or status >= 500:
                transient.append(result.get("error"))
            else:
                self.skipped += 1
                log.warning("visibility: OpenSearch refused run %s for good: %s", result.get("_id"),
                            result.get("error"))
        if transient:
            raise OpenSearchUnavailableError(f"{len(transient)} bulk items failed, e.g. {transient[0]}")

    # ------------------------------------------------------------------------------------------------ reads

    def get(self, namespace: str, workflow_id: str, run_id: str) -> dict[str, Any] | None:
        """One run's row, or None."""
        self._ensure_index()
        try:
            found = self._client.get(index=self.index, id=osq.document_id(namespace, workflow_id, run_id),
                                     _source_includes="record")
        except NotFoundError:
            return None
        except (OpenSearchConnectionError, TransportError) as exc:
            raise OpenSearchUnavailableError(f"OpenSearch get failed: {exc}") from exc
        return self._row(found["_source"]["record"])

    def count(self, namespace: str, query: str | Query = "",
              search_attributes: Mapping[str, SearchAttributeType | str] | None = None) -> int:
        """How many runs of a namespace match a query (its ORDER BY is ignored).

        Raises:
            QueryError: the query is malformed; it points at the offending token.
        """
        q = self._parse(query, search_attributes)
        self._ensure_index()
        try:
            found = self._client.count(index=self.index, body={"query": _in_namespace(namespace, q)})
        except (OpenSearchConnectionError, TransportError) as exc:
            raise OpenSearchUnavailableError(f"OpenSearch count failed: {exc}") from exc
        return int(found["count"])

    def list(self, namespace: str, query: str | Query = "", page_size: int = 100,
             next_page_token: bytes | None = None,
             search_attributes: Mapping[str, SearchAttributeType | str] | None = None,
             ) -> tuple[Rows, bytes | None]:
        """A page of the runs of a namespace that match a query, in its order, and the token of the next page.

        Pages are keyed on the sort values of the last row (`search_after`), as in `SqliteVisibilityStore.list`.
        The token is None after the last page.

        Raises:
            QueryError: the query is malformed; it points at the offending token.
            InvalidPageTokenError: the token belongs to another namespace or query.
        """
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be in [1, {MAX_PAGE_SIZE}], not {page_size}")
        q = self._parse(query, search_attributes)
        sort = osq.sort(q)
        fingerprint = hashlib.sha256(repr((namespace, q)).encode()).hexdigest()[:16]
        body: dict[str, Any] = {"query": _in_namespace(namespace, q), "sort": sort, "size": page_size + 1,
                                "track_total_hits": False, "_source": ["record"]}
        if next_page_token is not None:
            body["search_after"] = read_page_token(next_page_token, fingerprint, len(sort))
        self._ensure_index()
        try:
            hits = self._client.search(index=self.index, body=body)["hits"]["hits"]
        except (OpenSearchConnectionError, TransportError) as exc:
            raise OpenSearchUnavailableError(f"OpenSearch search failed: {exc}") from exc
        token = None
        if len(hits) > page_size:
            hits = hits[:page_size]
            token = make_page_token(fingerprint, hits[-1]["sort"])
        return [self._row(h["_source"]["record"]) for h in hits], token

    def _parse(self, query: str | Query, search_attributes: Mapping[str, Any] | None) -> Query:
        if isinstance(query, Query):
            return query
        return parse(query, self.search_attributes if search_attributes is None else search_attributes)

    def _row(self, record: str) -> dict[str, Any]:
        return osq.row_from_record(base64.b64decode(record), self.search_attributes)


def _in_namespace(namespace: str, q: Query) -> dict[str, Any]:
    return {"bool": {"filter": [{"term": {"namespace": namespace}}, osq.where(q.where)]}}




# ---------------------------------------------------------------------------------------------------- feeder


@dataclass
class _Batch:
    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    offsets: dict[int, int] = field(default_factory=dict)  # partition -> next offset to read


class OpenSearchVisibilityFeeder:
    """Keeps an `OpenSearchVisibilityStore` up to date with `<prefix>.visibility`, from a daemon thread.

    A consumer group member (`read_committed`, no auto-commit): each batch is bulk-indexed, and its offsets are
    committed to Kafka only once OpenSearch acknowledged every item. While OpenSearch fails, the feeder pauses its
    partitions (polling on, so it keeps its group membership), backs off exponentially up to `max_backoff` and
    retries the same batch; nothing is committed meanwhile, so a crash then re-reads rather than loses.
    """

    kind = "opensearch"  # the store it feeds (the cluster page names it)

    def __init__(self, bootstrap: str, prefix: str, store: OpenSearchVisibilityStore, *,
                 group_id: str | None = None, batch_size: int = 500, poll_timeout: float = 0.2,
                 max_backoff: float = 5.0) -> None:
        self.topic = f"{prefix}.visibility"
        self.store = store
        self.group_id = group_id or f"{prefix}-visibility-opensearch"
        self._common = {**base_config(bootstrap, "ostinato-visibility-opensearch"), "group.id": self.group_id,
                        "enable.auto.commit": False, "isolation.level": "read_committed", "logger": log}
        self._batch_size = batch_size
        self._poll_timeout = poll_timeout
        self._max_backoff = max_backoff
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._thread: threading.Thread | None = None
        self._probe: Consumer | None = None
        self._probe_lock = threading.Lock()
        self._partitions: list[int] = []
        self._applied: dict[int, int] = {}  # partition -> next offset, indexed in OpenSearch
        self._uncommitted: dict[int, int] = {}  # applied, not yet committed to Kafka
        self._batch: _Batch | None = None
        self._paused = False
        self._discarded = False
        self._backoff = 0.0
        self.unavailable = False
        """Whether OpenSearch is failing right now (the feeder is backing off)."""
        self.failures = 0
        """Bulk attempts that failed, since the start."""
        self.error: BaseException | None = None
        """What stopped the thread, if anything did."""

    # ------------------------------------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> None:
        """Join the group on the topic and start indexing from its committed offsets (the beginning if none)."""
        # The processors' short session: with Kafka's 45 s, a server restarted after a crash indexed nothing for
        # 45 s, waiting for its dead incarnation to leave the group.
        session = group_session_config(group_session_timeout_ms(self._common["bootstrap.servers"]))
        consumer = Consumer({**self._common, "client.id": "ostinato-visibility-opensearch",
                             "enable.partition.eof": True, "auto.offset.reset": "earliest", **session})
        metadata = consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            consumer.close()
            raise RuntimeError(f"topic {self.topic} does not exist; run `ostinato cluster init` first")
        self._partitions = sorted(metadata.partitions)
        self._stop = threading.Event()
        self.error = None
        consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._thread = threading.Thread(target=self._run, args=(consumer,), name="visibility-opensearch",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread and leave the group (records indexed but not yet committed are simply read again)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        with self._probe_lock:
            if self._probe is not None:
                self._probe.close()
                self._probe = None

    def rebuild(self, timeout: float = 30.0) -> None:
        """Recreate the index and replay the topic: the store is rebuilt, then the group's offsets go back to the
        start of each partition. Stops and restarts the feeder if it runs; other members of the group must be
        stopped (Kafka only resets the offsets of an empty group)."""
        running = self._thread is not None
        if running:
            self.stop(timeout)
        self.store.rebuild()
        lows = {p: self._probe_call(lambda c, p=p: c.get_watermark_offsets(  # type: ignore[misc]
            TopicPartition(self.topic, p), timeout=timeout, cached=False)[0]) for p in self._known_partitions(timeout)}
        admin = AdminClient(base_config(self._common["bootstrap.servers"], "ostinato-visibility-opensearch-admin"))
        request = ConsumerGroupTopicPartitions(self.group_id,
                                               [TopicPartition(self.topic, p, o) for p, o in lows.items()])
        for future in admin.alter_consumer_group_offsets([request], request_timeout=timeout).values():
            future.result()
        if running:
            self.start(timeout)

    def _known_partitions(self, timeout: float) -> list[int]:
        if not self._partitions:
            metadata = self._probe_call(lambda c: c.list_topics(self.topic, timeout=timeout)).topics[self.topic]
            self._partitions = sorted(metadata.partitions)
        return self._partitions

    # ------------------------------------------------------------------------------------------------ progress

    def wait_caught_up(self, timeout: float = 30.0) -> bool:
        """Wait until the group's committed offsets reach the end of every partition as of the call (the last
        stable offset: transaction markers included, open transactions not); False on timeout.

        Raises:
            RuntimeError: the feeder was not started, or its thread stopped on an error.
        """
        if self._thread is None:
            raise RuntimeError("the visibility feeder was not started")
        deadline = time.monotonic() + timeout
        ends = self._ends(timeout)
        while True:
            if self.error is not None:
                raise RuntimeError(f"the visibility feeder stopped: {self.error}") from self.error
            committed = self._committed(max(1.0, deadline - time.monotonic()))
            if all(committed.get(p, 0) >= end for p, end in ends.items()):
                return True
            if time.monotonic() >= deadline:
                return False
            with self._progress:
                self._progress.wait(0.1)

    def lag(self, timeout: float = 5.0) -> int:
        """Records between the group's committed offsets and the end of the topic (for a gauge).

        Raises:
            KafkaException: the broker did not answer within `timeout`.
        """
        committed = self._committed(timeout)
        total = 0
        for p in self._known_partitions(timeout):
            low, high = self._probe_call(lambda c, p=p: c.get_watermark_offsets(  # type: ignore[misc]
                TopicPartition(self.topic, p), timeout=timeout, cached=False))
            total += max(0, high - max(low, committed.get(p, low)))
        return total

    def positions(self, timeout: float = 5.0) -> dict[int, int]:
        """The next offset the store will index, per partition of the topic (-1 where the group never committed).

        Raises:
            KafkaException: the broker did not answer within `timeout`.
        """
        committed = self._committed(timeout)
        return {p: committed.get(p, -1) for p in self._known_partitions(timeout)}

    def _ends(self, timeout: float) -> dict[int, int]:
        return {p: self._probe_call(lambda c, p=p: c.get_watermark_offsets(  # type: ignore[misc]
            TopicPartition(self.topic, p), timeout=timeout, cached=False)[1]) for p in self._known_partitions(timeout)}

    def _committed(self, timeout: float) -> dict[int, int]:
        """The group's committed offsets, from the broker (so other members' partitions count too)."""
        parts = [TopicPartition(self.topic, p) for p in self._known_partitions(timeout)]
        found = self._probe_call(lambda c: c.committed(parts, timeout=timeout))
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}

    def _probe_call(self, call: Any) -> Any:
        # A consumer that never subscribes does not join the group, but can read its offsets and the watermarks.
        with self._probe_lock:
            if self._probe is None:
                self._probe = Consumer({**self._common, "client.id": "ostinato-visibility-opensearch-probe"})
            return call(self._probe)

    # ------------------------------------------------------------------------------------------------ the thread

    def _run(self, consumer: Consumer) -> None:
        try:
            while not self._stop.is_set():
                self._step(consumer)
        except BaseException as exc:  # the thread dies; wait_caught_up reports it to the caller
            self.error = exc
            log.exception("visibility feeder stopped")
        finally:
            consumer.close()
            with self._progress:
                self._progress.notify_all()

    def _step(self, consumer: Consumer) -> None:
        if self._batch is None:
            self._batch = self._fetch(consumer)
        if self._batch is None:
            self._commit(consumer)  # a commit that failed earlier
            return
        try:
            self.store.apply_batch(self._batch.records)
        except OpenSearchUnavailableError as exc:
            self._back_off(consumer, exc)
            return
        self._uncommitted.update(self._batch.offsets)
        self._applied.update(self._batch.offsets)
        self._batch = None
        self._commit(consumer)
        if self._paused or self.unavailable:
            self._recover(consumer)

    def _fetch(self, consumer: Consumer) -> _Batch | None:
        batch = _Batch()
        for msg in consumer.consume(self._batch_size, self._poll_timeout):
            self._take(msg, batch)
        batch.offsets = {p: o for p, o in batch.offsets.items() if o > self._applied.get(p, -1)}
        return batch if batch.offsets else None

    def _take(self, msg: Message, batch: _Batch) -> None:
        err = msg.error()
        partition = int(msg.partition() or 0)
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                if err.fatal():
                    raise KafkaException(err)
                log.warning("visibility feeder: %s", err)
                return
            # At the end of a partition: every offset before it, transaction markers included, is done.
            batch.offsets[partition] = max(batch.offsets.get(partition, 0), int(msg.offset() or 0))
            return
        batch.records.append((msg.key() or b"", msg.value()))
        batch.offsets[partition] = max(batch.offsets.get(partition, 0), int(msg.offset() or 0) + 1)

    def _commit(self, consumer: Consumer) -> None:
        if not self._uncommitted:
            return
        try:
            consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in self._uncommitted.items()],
                            asynchronous=False)
        except KafkaException as exc:  # indexed already (idempotently): the next step commits again
            log.warning("visibility feeder: commit failed, will retry: %s", exc)
            return
        self._uncommitted.clear()
        with self._progress:
            self._progress.notify_all()

    def _back_off(self, consumer: Consumer, exc: Exception) -> None:
        """Keep the batch, pause fetching, wait (polling, to stay in the group), and let the next step retry."""
        self.failures += 1
        if not self.unavailable:
            log.warning("visibility feeder: OpenSearch is failing, retrying with back-off: %s", exc)
            self.unavailable = True
        if not self._paused:
            consumer.pause(consumer.assignment())
            self._paused = True
        self._backoff = min(self._max_backoff, max(0.1, self._backoff * 2))
        deadline = time.monotonic() + self._backoff
        while not self._stop.is_set() and self._batch is not None and time.monotonic() < deadline:
            # Paused partitions deliver nothing; should a message slip through, it is dropped and re-read later.
            if consumer.consume(self._batch_size, min(0.2, max(0.0, deadline - time.monotonic()))):
                self._discarded = True

    def _recover(self, consumer: Consumer) -> None:
        if self._paused:  # not if a rebalance came in between: a new assignment starts unpaused
            assignment = consumer.assignment()
            consumer.resume(assignment)
            if self._discarded:  # read again what was dropped while paused
                for tp in assignment:
                    if tp.partition in self._applied:
                        consumer.seek(TopicPartition(self.topic, tp.partition, self._applied[tp.partition]))
                self._discarded = False
            self._paused = False
        self._backoff = 0.0
        if self.unavailable:
            log.info("visibility feeder: OpenSearch is back")
            self.unavailable = False

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        committed = consumer.committed(partitions, timeout=30)
        self._applied = {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
        self._paused = False
        self._discarded = False

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The batch read from these partitions is dropped uncommitted: their next owner reads it again.
        self._batch = None
        self._commit(consumer)
        self._uncommitted.clear()
        self._applied = {}


def reindex(bootstrap: str, prefix: str, store: OpenSearchVisibilityStore, *, batch_size: int = 1000,
            progress: Callable[[int, int], None] | None = None, timeout: float = 30.0) -> int:
    """Recreate the index and replay `<prefix>.visibility` from offset 0 to its end as of now; returns the records
    read. Running feeders may go on meanwhile: every write is versioned, so whichever of a replayed record and a
    live one lands last, the newer version stays. `progress(done, total)` is called after each batch."""
    topic = f"{prefix}.visibility"
    consumer = Consumer({**base_config(bootstrap, "ostinato-visibility-reindex"),
                         "group.id": f"{prefix}-visibility-reindex", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "logger": log})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise RuntimeError(f"topic {topic} does not exist; run `ostinato cluster init` first")
        marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
                 for p in sorted(metadata.partitions)}
        ends = {p: high for p, (low, high) in marks.items() if high > low}
        total = sum(high - low for low, high in marks.values())
        store.rebuild()
        consumer.assign([TopicPartition(topic, p, marks[p][0]) for p in ends])
        positions = {p: marks[p][0] for p in ends}
        done = 0
        while any(positions[p] < end for p, end in ends.items()):
            records: list[tuple[str | bytes, bytes | None]] = []
            for msg in consumer.consume(batch_size, 1.0):
                if msg.error() is not None:
                    if msg.error().fatal():
                        raise KafkaException(msg.error())
                    continue
                p = int(msg.partition() or 0)
                positions[p] = max(positions[p], int(msg.offset() or 0) + 1)
                if positions[p] <= ends[p]:
                    records.append((msg.key() or b"", msg.value()))
            # Transaction markers take offsets too: past the last record, the position is what the consumer says.
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= 0:
                    positions[tp.partition] = max(positions[tp.partition], tp.offset)
            store.apply_batch(records)
            done += len(records)
            if progress is not None:
                progress(done, total)
        return done
    finally:
        consumer.close()
