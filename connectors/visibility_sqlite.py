"""The embedded visibility store (DESIGN.md §7): `<prefix>.visibility` in SQLite, answering list and count queries."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from ostinato.connectors.query import (
    DEFAULT_ORDER,
    And,
    Attribute,
    Between,
    Comparison,
    Expr,
    In,
    IsNull,
    Not,
    Or,
    Query,
    SearchAttributeType,
    StartsWith,
    index_values,
    parse,
)
from ostinato.kafka.clients import base_config, reader_group
from ostinato.schemas import wire
from ostinato.schemas.codec import decode
from ostinato.schemas.keys import split_key

log = logging.getLogger("ostinato.visibility")
# `list` is also a method of the store, which shadows the builtin in the class body
Rows = list[dict[str, Any]]
Params = list[Any]
MAX_PAGE_SIZE = 1000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (
    namespace TEXT NOT NULL, workflow_id TEXT NOT NULL, run_id TEXT NOT NULL,
    workflow_type TEXT NOT NULL, task_queue TEXT NOT NULL, status TEXT NOT NULL,
    start_time_ms INTEGER NOT NULL, execution_time_ms INTEGER NOT NULL, close_time_ms INTEGER,
    execution_duration_ms INTEGER, history_length INTEGER NOT NULL, version INTEGER NOT NULL,
    record BLOB NOT NULL,
    PRIMARY KEY (namespace, workflow_id, run_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS executions_start ON executions (namespace, start_time_ms);
CREATE INDEX IF NOT EXISTS executions_type ON executions (namespace, workflow_type, status);
CREATE TABLE IF NOT EXISTS search_attributes (
    namespace TEXT NOT NULL, workflow_id TEXT NOT NULL, run_id TEXT NOT NULL,
    name TEXT NOT NULL, type TEXT NOT NULL,
    value  -- no declared type, so no affinity: 3.0 stays REAL and the keyword '12' stays TEXT
);
CREATE INDEX IF NOT EXISTS search_attributes_value ON search_attributes (namespace, name, type, value);
CREATE INDEX IF NOT EXISTS search_attributes_run
    ON search_attributes (namespace, workflow_id, run_id, name, type, value);
CREATE TABLE IF NOT EXISTS offsets (partition INTEGER PRIMARY KEY, next_offset INTEGER NOT NULL);
"""
# Not correlated: SQLite evaluates it once per query into a temporary index, through search_attributes_value.
_SA_MATCH = ("((e.workflow_id, e.run_id) IN (SELECT s.workflow_id, s.run_id FROM search_attributes s "
             "WHERE s.namespace = ? AND s.name = ? AND s.type = ?{}))")
_SA_VALUE = ("(SELECT s.value FROM search_attributes s WHERE s.namespace = e.namespace AND "
             "s.workflow_id = e.workflow_id AND s.run_id = e.run_id AND s.name = ? AND s.type = ? LIMIT 1)")
_COLUMNS = ("workflow_id", "run_id", "workflow_type", "task_queue", "status", "start_time_ms", "execution_time_ms",
            "close_time_ms", "history_length", "version")


class InvalidPageTokenError(ValueError):
    """A next-page token that this store did not issue for this namespace and query."""


class SqliteVisibilityStore:
    """Visibility records of every namespace in one SQLite file (WAL), with the topic offsets they reflect.

    Thread-safe: one connection behind a lock, so a feeder thread writes while API handlers read.

    Args:
        path: the database file, or ":memory:".
        search_attributes: types of custom search attributes whose payloads carry no `type` metadata; without
            either, the type is inferred from the JSON value. Also the default registry for `list`/`count`.
    """

    def __init__(self, path: str | Path,
                 search_attributes: Mapping[str, SearchAttributeType | str] | None = None) -> None:
        self.search_attributes = {k: SearchAttributeType.parse(v) for k, v in (search_attributes or {}).items()}
        self._lock = threading.Lock()
        self.skipped = 0
        """Records that were not decodable VisibilityRecords, and were left out."""
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------------------------------------ writes

    def apply(self, key: str | bytes, value: bytes | None) -> None:
        """Apply one record of `<prefix>.visibility`: an upsert unless older than what is stored, or a tombstone."""
        self.apply_batch([(key, value)], {})

    def apply_batch(self, records: Iterable[tuple[str | bytes, bytes | None]], offsets: Mapping[int, int]) -> None:
        """Apply records and save `partition -> next offset to read` in one transaction, so a resume is exact."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for key, value in records:
                    self._apply_one(key, value)
                self._save_offsets(offsets)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _apply_one(self, key: str | bytes, value: bytes | None) -> None:
        if value is None:
            try:
                ns, workflow_id, run_id = split_key(key.decode() if isinstance(key, bytes) else key)
            except ValueError:  # not three components, a bad escape or not UTF-8
                self.skipped += 1
                log.warning("visibility: skipped a tombstone with a malformed key %r", key)
                return
            self._delete(ns, workflow_id, run_id)
            return
        try:
            type_name, rec = decode(value)
        except ValueError as exc:
            type_name, rec = f"an undecodable record ({exc})", {}
        if type_name != wire.VISIBILITY:
            # One bad record must not wedge the store (and its feeder) forever: count it, say so, go on.
            self.skipped += 1
            log.warning("visibility: skipped %s under key %r", type_name, key)
            return
        ident = (rec["namespace"], rec["workflow_id"], rec["run_id"])
        row = self._db.execute("SELECT version FROM executions WHERE namespace = ? AND workflow_id = ? AND "
                               "run_id = ?", ident).fetchone()
        if row is not None and row[0] >= rec["version"]:
            return  # a late (or repeated) record never overwrites a newer one
        self._delete(*ident)
        close = rec["close_time_ms"]
        self._db.execute(
            "INSERT INTO executions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*ident, rec["workflow_type"], rec["task_queue"], rec["status"], rec["start_time_ms"],
             rec["execution_time_ms"], close, None if close is None else close - rec["execution_time_ms"],
             rec["history_length"], rec["version"], value))
        self._db.executemany(
            "INSERT INTO search_attributes VALUES (?, ?, ?, ?, ?, ?)",
            [(*ident, name, sa_type.value, v) for name, (sa_type, value_) in
             self._search_attributes(rec["search_attributes"]).items()
             for v in index_values(sa_type, value_)])

    def _delete(self, namespace: str, workflow_id: str, run_id: str) -> None:
        ident = (namespace, workflow_id, run_id)
        for table in ("executions", "search_attributes"):
            self._db.execute(f"DELETE FROM {table} WHERE namespace = ? AND workflow_id = ? AND run_id = ?", ident)

    def _search_attributes(self, payloads: Mapping[str, Any]) -> dict[str, tuple[SearchAttributeType, Any]]:
        return decode_search_attributes(payloads, self.search_attributes)

    def _save_offsets(self, offsets: Mapping[int, int]) -> None:
        self._db.executemany("INSERT INTO offsets VALUES (?, ?) ON CONFLICT (partition) DO UPDATE "
                             "SET next_offset = excluded.next_offset", list(offsets.items()))

    def save_offsets(self, offsets: Mapping[int, int]) -> None:
        """Record `partition -> next offset to read` without applying records (e.g. past transaction markers)."""
        self.apply_batch([], offsets)

    def last_offsets(self) -> dict[int, int]:
        """`partition -> next offset to read` as of the last applied batch."""
        with self._lock:
            return dict(self._db.execute("SELECT partition, next_offset FROM offsets").fetchall())

    def rebuild(self) -> None:
        """Forget every record and offset, so a feeder replays the topic from offset 0."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            for table in ("executions", "search_attributes", "offsets"):
                self._db.execute(f"DELETE FROM {table}")
            self._db.execute("COMMIT")

    # ------------------------------------------------------------------------------------------------ reads

    def get(self, namespace: str, workflow_id: str, run_id: str) -> dict[str, Any] | None:
        """One run's row, or None."""
        with self._lock:
            found = self._db.execute("SELECT record FROM executions WHERE namespace = ? AND workflow_id = ? AND "
                                     "run_id = ?", (namespace, workflow_id, run_id)).fetchone()
        return None if found is None else self._row(found[0])

    def count(self, namespace: str, query: str | Query = "",
              search_attributes: Mapping[str, SearchAttributeType | str] | None = None) -> int:
        """How many runs of a namespace match a query (its ORDER BY is ignored).

        Raises:
            QueryError: the query is malformed; it points at the offending token.
        """
        q = self._parse(query, search_attributes)
        where, params = self._where(namespace, q)
        with self._lock:
            return int(self._db.execute(f"SELECT count(*) FROM executions e WHERE e.namespace = ? AND {where}",
                                        [namespace, *params]).fetchone()[0])

    def list(self, namespace: str, query: str | Query = "", page_size: int = 100,
             next_page_token: bytes | None = None,
             search_attributes: Mapping[str, SearchAttributeType | str] | None = None,
             ) -> tuple[Rows, bytes | None]:
        """A page of the runs of a namespace that match a query, in its order, and the token of the next page.

        Pages are keyed on the sort values of the last row (not offsets): runs added or removed between pages
        never make another run appear twice or be skipped (a run whose own sort values change may move). The
        token is None after the last page.

        Raises:
            QueryError: the query is malformed; it points at the offending token.
            InvalidPageTokenError: the token belongs to another namespace or query.
        """
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be in [1, {MAX_PAGE_SIZE}], not {page_size}")
        q = self._parse(query, search_attributes)
        where, params = self._where(namespace, q)
        keys = [(_sort_sql(k.attr), k.descending) for k in q.order_by or DEFAULT_ORDER]
        keys += [(("e.workflow_id", []), False), (("e.run_id", []), False)]
        fingerprint = hashlib.sha256(repr((namespace, q)).encode()).hexdigest()[:16]
        if next_page_token is not None:
            after, after_params = _after(keys, read_page_token(next_page_token, fingerprint, len(keys)))
            where, params = f"{where} AND {after}", [*params, *after_params]
        select_params = [p for (_, ps), _ in keys for p in ps]
        order = ", ".join(f"k{i} IS NULL, k{i} {'DESC' if desc else 'ASC'}" for i, (_, desc) in enumerate(keys))
        aliases = ", ".join(f"{sql} AS k{i}" for i, ((sql, _), _) in enumerate(keys))
        sql = (f"SELECT record, {aliases} FROM executions e WHERE e.namespace = ? AND {where} "
               f"ORDER BY {order} LIMIT ?")
        with self._lock:
            found = self._db.execute(sql, [*select_params, namespace, *params, page_size + 1]).fetchall()
        token = None
        if len(found) > page_size:
            found = found[:page_size]
            token = make_page_token(fingerprint, list(found[-1][1:]))
        return [self._row(r[0]) for r in found], token

    def _parse(self, query: str | Query, search_attributes: Mapping[str, Any] | None) -> Query:
        if isinstance(query, Query):
            return query
        return parse(query, self.search_attributes if search_attributes is None else search_attributes)

    def _where(self, namespace: str, q: Query) -> tuple[str, Params]:
        return ("1", []) if q.where is None else _expr_sql(q.where, namespace)

    def _row(self, value: bytes) -> dict[str, Any]:
        _, rec = decode(value)
        decoded = decode_search_attributes(rec["search_attributes"], self.search_attributes)
        row = {c: rec[c] for c in _COLUMNS}
        row.update(
            namespace=rec["namespace"], history_size_bytes=rec["history_size_bytes"], parent=rec["parent"],
            first_execution_run_id=rec["first_execution_run_id"], memo=rec["memo"],
            search_attributes={name: v for name, (_, v) in decoded.items()},
            search_attribute_types={name: t for name, (t, _) in decoded.items()},
        )
        return row


def decode_search_attributes(payloads: Mapping[str, Any], registry: Mapping[str, SearchAttributeType],
                             ) -> dict[str, tuple[SearchAttributeType, Any]]:
    """`name -> (type, JSON value)` for every search attribute payload that is plain JSON.

    The type is the payload's `type` metadata, else the registry's, else inferred from the value. Payloads a codec
    transformed (encrypted, compressed) or with an unknown type are left out: they cannot be searched.
    """
    out: dict[str, tuple[SearchAttributeType, Any]] = {}
    for name, payload in payloads.items():
        meta = payload["metadata"]
        if meta.get("encoding") != b"json/plain":
            continue
        try:
            value = json.loads(payload["data"])
            declared = meta.get("type")
            sa_type = (SearchAttributeType.parse(declared.decode()) if declared is not None
                       else registry.get(name) or _infer(value))
        except (ValueError, UnicodeDecodeError):
            continue
        if sa_type is not None:
            out[name] = (sa_type, value)
    return out


def _infer(value: Any) -> SearchAttributeType | None:
    if isinstance(value, bool):
        return SearchAttributeType.BOOL
    if isinstance(value, int):
        return SearchAttributeType.INT
    if isinstance(value, float):
        return SearchAttributeType.DOUBLE
    if isinstance(value, str):
        return SearchAttributeType.KEYWORD
    if isinstance(value, list):
        return SearchAttributeType.KEYWORD_LIST
    return None


# ---------------------------------------------------------------------------------------------------- SQL


def _sort_sql(attr: Attribute) -> tuple[str, list[Any]]:
    if attr.system is not None:
        return f"e.{attr.system.column}", []
    return _SA_VALUE, [attr.name, attr.type.value]


def _expr_sql(expr: Expr, ns: str) -> tuple[str, list[Any]]:
    """A boolean SQL expression (never NULL, so NOT stays two-valued) and its parameters."""
    if isinstance(expr, And | Or):
        parts = [_expr_sql(e, ns) for e in expr.items]
        joiner = " AND " if isinstance(expr, And) else " OR "
        return "(" + joiner.join(s for s, _ in parts) + ")", [p for _, ps in parts for p in ps]
    if isinstance(expr, Not):
        sql, params = _expr_sql(expr.item, ns)
        return f"(NOT {sql})", params
    attr = expr.attr
    if isinstance(expr, IsNull):
        present, params = _present(attr, ns)
        return (present if expr.negated else f"(NOT {present})"), params
    if attr.type is SearchAttributeType.TEXT:
        assert isinstance(expr, Comparison)
        words = [_has(attr, ns, "s.value = ?", [w]) for w in expr.value]
        all_words = "(" + " AND ".join(s for s, _ in words) + ")"
        params = [p for _, ps in words for p in ps]
        if expr.op == "=":
            return all_words, params
        present, present_params = _present(attr, ns)
        return f"({present} AND NOT {all_words})", [*present_params, *params]
    if (isinstance(expr, Comparison) and expr.op == "!=") or (isinstance(expr, In) and expr.negated):
        values = [expr.value] if isinstance(expr, Comparison) else list(expr.values)
        present, present_params = _present(attr, ns)
        hit, hit_params = _value_test(attr, ns, f"IN ({', '.join('?' * len(values))})", values)
        return f"({present} AND NOT {hit})", [*present_params, *hit_params]
    if isinstance(expr, Comparison):
        return _value_test(attr, ns, f"{expr.op} ?", [expr.value])
    if isinstance(expr, In):
        return _value_test(attr, ns, f"IN ({', '.join('?' * len(expr.values))})", list(expr.values))
    if isinstance(expr, Between):
        return _value_test(attr, ns, "BETWEEN ? AND ?", [expr.low, expr.high])
    assert isinstance(expr, StartsWith)
    return _value_test(attr, ns, "", [], starts_with=expr.prefix)


def _value_test(attr: Attribute, ns: str, test: str, params: list[Any], starts_with: str | None = None,
                ) -> tuple[str, list[Any]]:
    """`<value> <test>` for a system column (guarded against NULL) or for any indexed value of a custom one."""
    column = f"e.{attr.system.column}" if attr.system is not None else "s.value"
    if starts_with is not None:
        # substr, not LIKE: LIKE has wildcards and folds ASCII case.
        test_sql, params = f"substr({column}, 1, ?) = ?", [len(starts_with), starts_with]
    else:
        test_sql = f"{column} {test}"
    if attr.system is None:
        return _has(attr, ns, test_sql, params)
    if attr.system.nullable:
        return f"({column} IS NOT NULL AND {test_sql})", params
    return f"({test_sql})", params


def _has(attr: Attribute, ns: str, test: str, params: list[Any]) -> tuple[str, list[Any]]:
    return _SA_MATCH.format(f" AND {test}"), [ns, attr.name, attr.type.value, *params]


def _present(attr: Attribute, ns: str) -> tuple[str, list[Any]]:
    if attr.system is not None:
        return f"(e.{attr.system.column} IS NOT NULL)", []
    return _SA_MATCH.format(""), [ns, attr.name, attr.type.value]


def _after(keys: list[tuple[tuple[str, list[Any]], bool]], last: list[Any]) -> tuple[str, list[Any]]:
    """Rows strictly after `last` in the order `keys` (absent values last in both directions)."""
    ors, params = [], []
    equal_sql: list[str] = []
    equal_params: list[Any] = []
    for ((sql, sql_params), descending), value in zip(keys, last, strict=True):
        if value is not None:
            ors.append("(" + " AND ".join([*equal_sql, f"({sql} IS NULL OR {sql} {'<' if descending else '>'} ?)"])
                       + ")")
            params += [*equal_params, *sql_params, *sql_params, value]
            equal_sql.append(f"{sql} = ?")
            equal_params += [*sql_params, value]
        else:
            equal_sql.append(f"{sql} IS NULL")
            equal_params += sql_params
    return "(" + (" OR ".join(ors) or "0") + ")", params


def make_page_token(fingerprint: str, values: list[Any]) -> bytes:
    """An opaque next-page token: the sort values of the last row, bound to the namespace and query; shared by
    every visibility store so their tokens behave alike."""
    return base64.urlsafe_b64encode(json.dumps({"q": fingerprint, "after": values}).encode())


def read_page_token(token: bytes, fingerprint: str, n: int) -> list[Any]:
    try:
        body = json.loads(base64.urlsafe_b64decode(token))
        values: list[Any] = body["after"]
        ok = body["q"] == fingerprint and isinstance(values, list) and len(values) == n
    except (ValueError, TypeError, KeyError):
        ok = False
    if not ok:
        raise InvalidPageTokenError("next_page_token does not belong to this namespace and query")
    return values


# ---------------------------------------------------------------------------------------------------- feeder


class SqliteVisibilityFeeder:
    """Keeps a `SqliteVisibilityStore` up to date with `<prefix>.visibility`, from a daemon thread.

    Every partition is assigned by hand from the store's saved offsets (the beginning when there are none) and
    read with `read_committed`, so aborted transactions never show; each batch is applied with its offsets in
    one SQLite transaction, so a restart resumes exactly where the store stands.
    """

    kind = "sqlite"  # the store it feeds (the cluster page names it)

    def __init__(self, bootstrap: str, prefix: str, store: SqliteVisibilityStore, *,
                 client_id: str = "", batch_size: int = 500, poll_timeout: float = 0.2) -> None:
        self.topic = f"{prefix}.visibility"
        self.store = store
        client_id = client_id or f"{prefix}-visibility-sqlite"
        self._config = {
            **base_config(bootstrap, client_id), "group.id": reader_group(client_id),
            "enable.auto.commit": False, "isolation.level": "read_committed", "enable.partition.eof": True,
            "logger": log,
        }
        self._batch_size = batch_size
        self._poll_timeout = poll_timeout
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._positions: dict[int, int] = {}
        self._partitions: list[int] = []
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        """What stopped the thread, if anything did."""

    def start(self, timeout: float = 30.0) -> None:
        """Assign every partition of the topic from the stored offsets and start reading."""
        consumer = Consumer(self._config)
        metadata = consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            consumer.close()
            raise RuntimeError(f"topic {self.topic} does not exist; run `ostinato cluster init` first")
        self._partitions = sorted(metadata.partitions)
        stored = self.store.last_offsets()
        self._positions = {p: stored.get(p, 0) for p in self._partitions}
        consumer.assign([TopicPartition(self.topic, p, stored.get(p, OFFSET_BEGINNING)) for p in self._partitions])
        self._thread = threading.Thread(target=self._run, args=(consumer,), name="visibility-sqlite", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

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
        records: list[tuple[bytes | None, bytes | None]] = []
        offsets: dict[int, int] = {}
        for msg in consumer.consume(self._batch_size, self._poll_timeout):
            err = msg.error()
            partition = int(msg.partition() or 0)
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    if err.fatal():
                        raise KafkaException(err)
                    log.warning("visibility feeder: %s", err)
                    continue
                # At the end of a partition: every offset before it, transaction markers included, is done.
                offsets[partition] = max(offsets.get(partition, 0), int(msg.offset() or 0))
                continue
            records.append((msg.key(), msg.value()))
            offsets[partition] = max(offsets.get(partition, 0), int(msg.offset() or 0) + 1)
        offsets = {p: o for p, o in offsets.items() if o > self._positions.get(p, 0)}
        if not offsets:
            return
        self.store.apply_batch([(k or b"", v) for k, v in records], offsets)
        with self._progress:
            self._positions.update(offsets)
            self._progress.notify_all()

    def positions(self, timeout: float = 5.0) -> dict[int, int]:
        """The next offset the store will apply, per partition of the topic (read from memory: `timeout` is unused,
        there for the OpenSearch feeder's signature). Empty before `start`."""
        with self._progress:
            return {p: self._positions.get(p, 0) for p in self._partitions}

    def wait_caught_up(self, timeout: float = 30.0) -> bool:
        """Wait until the store reflects every record committed to the topic before the call; False on timeout.

        Raises:
            RuntimeError: the feeder was not started, or its thread stopped on an error.
        """
        if self._thread is None:
            raise RuntimeError("the visibility feeder was not started")
        probe = Consumer(self._config)
        try:
            ends = {p: probe.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout, cached=False)[1]
                    for p in self._partitions}
        finally:
            probe.close()

        def done() -> bool:
            return self.error is not None or all(self._positions.get(p, 0) >= end for p, end in ends.items())

        with self._progress:
            caught_up = self._progress.wait_for(done, timeout)
        if self.error is not None:
            raise RuntimeError(f"the visibility feeder stopped: {self.error}") from self.error
        return caught_up
