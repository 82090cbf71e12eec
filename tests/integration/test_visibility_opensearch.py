"""The OpenSearch visibility store on a real OpenSearch: the same rows, order and pages as the SQLite store."""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from ostinato.connectors.query import QueryError, evaluate, parse
from ostinato.connectors.visibility_opensearch import TOMBSTONE_VERSION, OpenSearchVisibilityStore
from ostinato.connectors.visibility_sqlite import InvalidPageTokenError, SqliteVisibilityStore
from ostinato.schemas.codec import encode
from ostinato.schemas.keys import run_key
from ostinato.schemas.wire import VISIBILITY as VISIBILITY_RECORD
from tests.unit.test_visibility_sqlite import (
    NS,
    QUERIES,
    T0,
    TYPES,
    build_id_records,
    check_build_id_queries,
    expressions,
    generate,
    record,
    sa,
)

# Shapes beyond the SQLite suite's: deep nesting, NOT over OR/IN, mixed families, multi-key orders with gaps.
EXTRA_QUERIES = [
    "NOT (Tags IN ('red', 'us') OR Notes = 'gift') AND (Vip = false OR Vip IS NULL) ORDER BY Score DESC, Amount",
    "NOT NOT (ExecutionStatus IN ('Failed', 'Canceled') AND NOT CustomerId STARTS_WITH 'cust-0')",
    "((HistoryLength < 50 OR HistoryLength > 350) AND (DueAt IS NULL OR DueAt < '2026-01-20')) "
    "ORDER BY DueAt DESC, CustomerId, HistoryLength DESC",
    "ExecutionDuration BETWEEN '1s' AND '5m' AND CloseTime > '2026-01-01T06:00:00+01:00' ORDER BY ExecutionDuration",
    "Score BETWEEN -1.5 AND 4 AND Score != 0 ORDER BY Score, Vip DESC",
    "Amount IN (1, 2, 3, 4, 5, 6, 7, 8, 9, 10) OR Amount <= -40 ORDER BY Amount DESC, WorkflowId DESC",
    "Tags STARTS_WITH '' AND NOT Tags NOT IN ('eu') ORDER BY ExecutionStatus, StartTime DESC",
    "`CustomerId` >= 'cust-10' AND `CustomerId` < 'cust-20' ORDER BY `CustomerId` DESC, RunId DESC",
    "WorkflowType STARTS_WITH 'Order' AND WorkflowType != 'OrderV2' ORDER BY TaskQueue, CloseTime DESC",
    "Notes IS NOT NULL AND NOT Notes = 'late' ORDER BY ExecutionDuration DESC, StartTime",
]


@pytest.fixture(scope="session")
def opensearch_url(request: pytest.FixtureRequest) -> str:
    """An OpenSearch of the environment's choosing, else the session's `opensearch` fixture."""
    url = os.environ.get("OSTINATO_TEST_OPENSEARCH_URL")
    return url if url else str(request.getfixturevalue("opensearch").url)


def new_store(url: str, **kwargs: Any) -> OpenSearchVisibilityStore:
    return OpenSearchVisibilityStore(url, f"vis-test-{uuid.uuid4().hex[:10]}", TYPES, **kwargs)


def drop(store: OpenSearchVisibilityStore) -> None:
    store._client.indices.delete(index=store.index, ignore_unavailable=True)
    store.close()


def put(store: OpenSearchVisibilityStore | SqliteVisibilityStore, rec: dict[str, Any]) -> None:
    store.apply(run_key(rec["namespace"], rec["workflow_id"], rec["run_id"]), encode(VISIBILITY_RECORD, rec))


@pytest.fixture
def store(opensearch_url: str) -> Iterator[OpenSearchVisibilityStore]:
    s = new_store(opensearch_url)
    yield s
    drop(s)


Loaded = tuple[OpenSearchVisibilityStore, SqliteVisibilityStore, list[dict[str, Any]]]


@pytest.fixture(scope="module")
def loaded(opensearch_url: str) -> Iterator[Loaded]:
    """1,000 runs in both stores, each fed twice in a shuffled order with an older version, in batches of 97."""
    records = generate(1000, seed=20261129)
    # Search attribute names that are not plain identifiers must survive the field-name encoding.
    for i, rec in enumerate(records[::50]):
        rec["search_attributes"]["Odd.name_x"] = sa(i, "Int")
    older = [{**r, "version": r["version"] - 1, "status": "RUNNING", "search_attributes": {}} for r in records]
    feed = [*records, *older, record("elsewhere", namespace="other")]
    random.Random(7).shuffle(feed)
    sqlite = SqliteVisibilityStore(":memory:", TYPES)
    opensearch = new_store(opensearch_url)
    started = time.monotonic()
    for start in range(0, len(feed), 97):
        batch = [(run_key(r["namespace"], r["workflow_id"], r["run_id"]), encode(VISIBILITY_RECORD, r))
                 for r in feed[start:start + 97]]
        opensearch.apply_batch(batch, {0: start + len(batch)})
        sqlite.apply_batch(batch, {0: start + len(batch)})
    print(f"indexed {len(feed)} records in {time.monotonic() - started:.2f}s")
    rows = [sqlite.get(NS, r["workflow_id"], r["run_id"]) for r in records]
    yield opensearch, sqlite, rows  # type: ignore[misc]
    drop(opensearch)
    sqlite.close()


def read_all(store: OpenSearchVisibilityStore | SqliteVisibilityStore, text: str, page_size: int,
             ) -> list[tuple[str, str]]:
    got, token, pages = [], None, 0
    while True:
        page, token = store.list(NS, text, page_size=page_size, next_page_token=token)
        got += [(r["workflow_id"], r["run_id"]) for r in page]
        pages += 1
        assert pages < 300
        if token is None:
            return got


@pytest.mark.parametrize("text", QUERIES + EXTRA_QUERIES)
def test_opensearch_returns_what_sqlite_returns(text: str, loaded: Loaded) -> None:
    opensearch, sqlite, rows = loaded
    expected = read_all(sqlite, text, 1000)
    assert expected == [(r["workflow_id"], r["run_id"]) for r in evaluate(parse(text, TYPES), rows)]
    assert opensearch.count(NS, text) == sqlite.count(NS, text) == len(expected)
    page_size = 1000 if len(expected) < 40 else max(7, len(expected) // 9)
    assert read_all(opensearch, text, page_size) == expected


def test_rows_are_the_sqlite_rows(loaded: Loaded) -> None:
    opensearch, sqlite, rows = loaded
    for row in rows[::37]:
        assert opensearch.get(NS, row["workflow_id"], row["run_id"]) == row
    assert opensearch.list(NS, "ORDER BY WorkflowId", 50)[0] == sqlite.list(NS, "ORDER BY WorkflowId", 50)[0]
    assert opensearch.get(NS, "nope", "run-1") is None
    assert opensearch.count("other") == 1
    assert opensearch.count(NS, "`Odd.name_x` >= 0", {**TYPES, "Odd.name_x": "Int"}) == 20


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(where=st.one_of(st.just(""), expressions()),
       order=st.lists(st.tuples(st.sampled_from(["WorkflowId", "ExecutionStatus", "CloseTime", "ExecutionDuration",
                                                 "TaskQueue", "CustomerId", "Amount", "Score", "Vip", "DueAt"]),
                                st.sampled_from(["", " ASC", " DESC"])), max_size=3),
       page_size=st.sampled_from([1000, 251]))
def test_random_queries_match_sqlite(loaded: Loaded, where: str, order: list[tuple[str, str]],
                                     page_size: int) -> None:
    opensearch, sqlite, _ = loaded
    text = where + (" ORDER BY " + ", ".join(a + d for a, d in order) if order else "")
    note(text)
    expected = read_all(sqlite, text, 1000)
    assert opensearch.count(NS, text) == len(expected)
    assert read_all(opensearch, text, page_size) == expected


# ---------------------------------------------------------------------------------------------------- writes


def test_a_late_record_never_overwrites_a_newer_one(store: OpenSearchVisibilityStore) -> None:
    put(store, record("a", 5, status="COMPLETED", close_time_ms=T0 + 10))
    put(store, record("a", 3, status="RUNNING", search_attributes={"Amount": sa(1, "Int")}))
    put(store, record("a", 5, status="FAILED"))  # same version again: the first one stays
    got = store.get(NS, "a", "run-1")
    assert got is not None and got["status"] == "COMPLETED" and got["version"] == 5
    assert store.count(NS, "Amount IS NOT NULL") == 0
    put(store, record("a", 6, status="COMPLETED", search_attributes={"Amount": sa(2, "Int")}))
    assert store.count(NS, "Amount = 2") == 1 and store.count(NS, "Amount = 1") == 0
    # Within one bulk, in any order: the highest version wins.
    store.apply_batch([(run_key(NS, "b", "run-1"), encode(VISIBILITY_RECORD, record("b", v))) for v in (4, 9, 2)])
    got = store.get(NS, "b", "run-1")
    assert got is not None and got["version"] == 9


def test_tombstones_delete_and_beat_a_late_upsert(store: OpenSearchVisibilityStore) -> None:
    put(store, record("a/b%", 2, search_attributes={"Tags": sa(["x", "y"], "KeywordList")}))
    put(store, record("c", 2))
    store.apply(run_key(NS, "a/b%", "run-1"), None)
    assert store.get(NS, "a/b%", "run-1") is None
    assert [r["workflow_id"] for r in store.list(NS)[0]] == ["c"] and store.count(NS, "Tags = 'x'") == 0
    # A late upsert of the deleted run (any version below the tombstone's) does not bring it back ...
    put(store, record("a/b%", 7))
    assert store.get(NS, "a/b%", "run-1") is None and store.count(NS) == 1
    # ... and a tombstone applied twice, or for a run never seen, is fine.
    store.apply(run_key(NS, "a/b%", "run-1"), None)
    store.apply(run_key(NS, "never-seen", "run-1"), None)
    put(store, record("never-seen", TOMBSTONE_VERSION - 1))
    assert store.get(NS, "never-seen", "run-1") is None
    store.apply(b"not-a-run-key", None)
    assert store.skipped == 1


def test_undecodable_records_are_skipped_not_fatal(store: OpenSearchVisibilityStore) -> None:
    store.apply_batch([(b"k", b"garbage"), (run_key(NS, "a", "run-1"), encode(VISIBILITY_RECORD, record("a")))],
                      {0: 7})
    assert store.skipped == 1 and store.count(NS) == 1


def test_documents_opensearch_refuses_are_skipped_not_fatal(store: OpenSearchVisibilityStore) -> None:
    store.apply_batch([(run_key(NS, "neg", "run-1"), encode(VISIBILITY_RECORD, record("neg", -1))),
                       (run_key(NS, "ok", "run-1"), encode(VISIBILITY_RECORD, record("ok", 1)))])
    assert store.count(NS) == 1 and store.skipped == 1


def test_long_ids_and_odd_values(store: OpenSearchVisibilityStore) -> None:
    long_id = "w" * 600  # over the 512 bytes of an `_id`
    put(store, record(long_id, search_attributes={"Amount": sa(2**70, "Int"), "Vip": sa("yes", "Bool"),
                                                  "CustomerId": sa("k" * 10_000, "Keyword")}))
    got = store.get(NS, long_id, "run-1")
    assert got is not None and got["workflow_id"] == long_id
    assert store.count(NS, "Amount IS NULL AND Vip IS NULL") == 1
    store.apply(run_key(NS, long_id, "run-1"), None)
    assert store.count(NS) == 0


def test_rebuild_forgets_everything(store: OpenSearchVisibilityStore) -> None:
    put(store, record("a", 9))
    store.rebuild()
    assert store.count(NS) == 0
    put(store, record("a", 1))  # a replay from offset 0 starts over with old versions
    assert store.count(NS) == 1


def test_bad_queries_and_tokens(store: OpenSearchVisibilityStore) -> None:
    with pytest.raises(QueryError):
        store.count(NS, "Nope = 1")
    for i in range(3):
        put(store, record(f"w{i}"))
    _, token = store.list(NS, "", page_size=2)
    assert token is not None
    with pytest.raises(InvalidPageTokenError):
        store.list(NS, "WorkflowType = 'Order'", page_size=2, next_page_token=token)
    with pytest.raises(InvalidPageTokenError):
        store.list("other", "", page_size=2, next_page_token=token)
    with pytest.raises(InvalidPageTokenError):
        store.list(NS, "", page_size=2, next_page_token=b"%%%")
    with pytest.raises(ValueError, match="page_size"):
        store.list(NS, "", page_size=0)


def test_pages_neither_repeat_nor_skip_when_runs_change_between_pages(store: OpenSearchVisibilityStore) -> None:
    for i in range(6):
        put(store, record(f"w{i}", start_time_ms=T0 + i))
    page, token = store.list(NS, "ORDER BY StartTime", page_size=3)
    assert [r["workflow_id"] for r in page] == ["w0", "w1", "w2"]
    store.apply(run_key(NS, "w0", "run-1"), None)
    put(store, record("w9", start_time_ms=T0 - 1))
    page, token = store.list(NS, "ORDER BY StartTime", page_size=3, next_page_token=token)
    assert [r["workflow_id"] for r in page] == ["w3", "w4", "w5"] and token is None


def test_build_ids_answer_the_drain_query(store: OpenSearchVisibilityStore) -> None:
    """Worker versioning's drain query, as on SQLite (`BuildIds` is a KeywordList the engine sets)."""
    for rec in build_id_records():
        put(store, rec)
    check_build_id_queries(store)
