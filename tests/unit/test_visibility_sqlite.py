"""The embedded SQLite visibility store: versioning, tombstones, offsets, and the brute-force equivalence."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from ostinato.connectors.query import QueryError, datetime_ms, evaluate, parse
from ostinato.connectors.visibility_sqlite import (
    InvalidPageTokenError,
    SqliteVisibilityStore,
)
from ostinato.schemas.codec import encode
from ostinato.schemas.keys import run_key
from ostinato.schemas.wire import VISIBILITY as VISIBILITY_RECORD

NS = "default"
TYPES = {
    "CustomerId": "Keyword", "Notes": "Text", "Amount": "Int", "Score": "Double", "Vip": "Bool",
    "DueAt": "Datetime", "Tags": "KeywordList",
}
STATUSES = ["RUNNING", "COMPLETED", "FAILED", "CANCELED", "TERMINATED", "CONTINUED_AS_NEW", "TIMED_OUT"]
T0 = datetime_ms("2026-01-01T00:00:00Z")


def sa(value: Any, sa_type: str | None = None) -> dict[str, Any]:
    metadata = {"encoding": b"json/plain"}
    if sa_type is not None:
        metadata["type"] = sa_type.encode()
    return {"metadata": metadata, "data": json.dumps(value).encode()}


def record(workflow_id: str, version: int = 1, *, run_id: str = "run-1", namespace: str = NS,
           **fields: Any) -> dict[str, Any]:
    base = {
        "namespace": namespace, "workflow_id": workflow_id, "run_id": run_id, "workflow_type": "Order",
        "task_queue": "orders", "status": "RUNNING", "start_time_ms": T0, "execution_time_ms": T0,
        "close_time_ms": None, "history_length": version, "history_size_bytes": 10, "memo": {},
        "search_attributes": {}, "parent": None, "first_execution_run_id": run_id, "version": version,
    }
    return {**base, **fields}


def put(store: SqliteVisibilityStore, rec: dict[str, Any]) -> None:
    store.apply(run_key(rec["namespace"], rec["workflow_id"], rec["run_id"]), encode(VISIBILITY_RECORD, rec))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteVisibilityStore]:
    s = SqliteVisibilityStore(tmp_path / "visibility.db", TYPES)
    yield s
    s.close()


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [r["workflow_id"] for r in rows]


# ---------------------------------------------------------------------------------------------------- writes


def test_a_late_record_never_overwrites_a_newer_one(store: SqliteVisibilityStore) -> None:
    put(store, record("a", 5, status="COMPLETED", close_time_ms=T0 + 10))
    put(store, record("a", 3, status="RUNNING", search_attributes={"Amount": sa(1, "Int")}))
    put(store, record("a", 5, status="FAILED"))  # same version again: the first one stays
    got = store.get(NS, "a", "run-1")
    assert got is not None and got["status"] == "COMPLETED" and got["version"] == 5
    assert store.count(NS, "Amount IS NOT NULL") == 0
    put(store, record("a", 6, status="COMPLETED", search_attributes={"Amount": sa(2, "Int")}))
    assert store.count(NS, "Amount = 2") == 1 and store.count(NS, "Amount = 1") == 0


def test_tombstones_delete_the_run_and_its_search_attributes(store: SqliteVisibilityStore) -> None:
    put(store, record("a/b%", 2, search_attributes={"Tags": sa(["x", "y"], "KeywordList")}))
    put(store, record("c", 2))
    store.apply(run_key(NS, "a/b%", "run-1"), None)
    assert store.get(NS, "a/b%", "run-1") is None
    assert ids(store.list(NS)[0]) == ["c"] and store.count(NS, "Tags = 'x'") == 0
    store.apply(run_key(NS, "never-seen", "run-1"), None)  # deleting what is not there is fine
    store.apply(b"not-a-run-key", None)
    assert store.skipped == 1


def test_undecodable_records_are_skipped_not_fatal(store: SqliteVisibilityStore) -> None:
    store.apply_batch([(b"k", b"garbage"), (run_key(NS, "a", "run-1"), encode(VISIBILITY_RECORD, record("a")))],
                      {0: 7})
    assert store.skipped == 1 and store.count(NS) == 1 and store.last_offsets() == {0: 7}


def test_offsets_are_saved_with_the_batch(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    store = SqliteVisibilityStore(path)
    batch = [(run_key(NS, w, "run-1"), encode(VISIBILITY_RECORD, record(w))) for w in ("a", "b")]
    store.apply_batch(batch, {0: 10, 1: 4})
    store.apply_batch([], {1: 6})
    store.save_offsets({2: 1})
    store.close()
    reopened = SqliteVisibilityStore(path)
    assert reopened.last_offsets() == {0: 10, 1: 6, 2: 1} and reopened.count(NS) == 2
    broken = [*batch, (run_key(NS, "c", "run-1"), 42)]  # not bytes: fails inside the transaction
    with pytest.raises((TypeError, AttributeError, ValueError)):
        reopened.apply_batch(broken, {0: 99})  # type: ignore[list-item]
    assert reopened.last_offsets()[0] == 10 and reopened.count(NS) == 2  # nothing of the batch stayed
    reopened.close()


def test_rebuild_forgets_everything(store: SqliteVisibilityStore) -> None:
    store.apply_batch([(run_key(NS, "a", "run-1"), encode(VISIBILITY_RECORD, record("a", 9)))], {0: 3})
    store.rebuild()
    assert store.last_offsets() == {} and store.count(NS) == 0
    put(store, record("a", 1))  # a replay from offset 0 starts over with old versions
    assert store.count(NS) == 1


def test_rows_are_plain_dicts_with_decoded_search_attributes(store: SqliteVisibilityStore) -> None:
    memo = {"note": {"metadata": {"encoding": b"json/plain"}, "data": b'"hi"'}}
    put(store, record("a", search_attributes={
        "Amount": sa(5), "DueAt": sa("2026-02-01T00:00:00Z", "Datetime"), "Secret": {
            "metadata": {"encoding": b"binary/encrypted"}, "data": b"\x00"}}, memo=memo, close_time_ms=None))
    got = store.get(NS, "a", "run-1")
    assert got is not None
    assert got["search_attributes"] == {"Amount": 5, "DueAt": "2026-02-01T00:00:00Z"}
    assert got["memo"] == memo and got["close_time_ms"] is None and got["namespace"] == NS
    assert store.count(NS, "DueAt > '2026-01-15'") == 1 and store.count(NS, "Amount >= 5") == 1


def test_values_a_store_cannot_index_are_left_out_not_fatal(store: SqliteVisibilityStore) -> None:
    put(store, record("a", search_attributes={
        "Amount": sa(2**70, "Int"), "Score": {"metadata": {"encoding": b"json/plain", "type": b"Double"},
                                               "data": b"NaN"},
        "DueAt": sa("not a date", "Datetime"), "Vip": sa("yes", "Bool"), "Odd": sa({"a": 1}),
        "Weird": sa(1, "Decimal")}))
    got = store.get(NS, "a", "run-1")
    assert got is not None and store.count(NS, "Amount IS NULL AND Score IS NULL AND DueAt IS NULL") == 1
    assert set(got["search_attributes"]) == {"Amount", "Score", "DueAt", "Vip"}  # kept for display, not indexed


def test_namespaces_are_separate(store: SqliteVisibilityStore) -> None:
    put(store, record("a", namespace="one"))
    put(store, record("a", namespace="two"))
    assert store.count("one") == 1 and ids(store.list("two")[0]) == ["a"] and store.count("three") == 0


def test_values_are_parameters_never_sql(store: SqliteVisibilityStore) -> None:
    put(store, record("x'); DROP TABLE executions; --"))
    assert store.count(NS, "WorkflowId = 'x''); DROP TABLE executions; --'") == 1
    assert store.count(NS, "WorkflowId STARTS_WITH '%'") == 0  # no LIKE wildcards either


def test_bad_queries_and_tokens(store: SqliteVisibilityStore) -> None:
    with pytest.raises(QueryError):
        store.count(NS, "Nope = 1")
    for i in range(3):
        put(store, record(f"w{i}"))
    _, token = store.list(NS, "", page_size=2)
    assert token is not None
    with pytest.raises(InvalidPageTokenError):
        store.list(NS, "WorkflowType = 'Order'", page_size=2, next_page_token=token)
    with pytest.raises(InvalidPageTokenError):
        store.list(NS, "", page_size=2, next_page_token=b"%%%")
    with pytest.raises(ValueError, match="page_size"):
        store.list(NS, "", page_size=0)


def test_pages_neither_repeat_nor_skip_when_runs_change_between_pages(store: SqliteVisibilityStore) -> None:
    for i in range(6):
        put(store, record(f"w{i}", start_time_ms=T0 + i))
    page, token = store.list(NS, "ORDER BY StartTime", page_size=3)
    assert ids(page) == ["w0", "w1", "w2"]
    store.apply(run_key(NS, "w0", "run-1"), None)
    put(store, record("w9", start_time_ms=T0 - 1))  # sorts before the page already read
    page, token = store.list(NS, "ORDER BY StartTime", page_size=3, next_page_token=token)
    assert ids(page) == ["w3", "w4", "w5"] and token is None


# ---------------------------------------------------------------------------------------------------- brute force

WORDS = ["late", "parcel", "refund", "damaged", "gift", "express", "retry", "Ünïcode", "ok"]


def generate(n: int, seed: int) -> list[dict[str, Any]]:
    """Runs with every status, overlapping times, and each custom attribute type (sometimes missing)."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        status = rng.choice(STATUSES)
        start = T0 + rng.randrange(0, 30) * 3_600_000 + rng.choice([0, 0, rng.randrange(1000)])
        execution = start + rng.choice([0, 0, 5000])
        close = None if status == "RUNNING" else execution + rng.choice([1000, 60_000, 300_000, rng.randrange(10**7)])
        attrs: dict[str, Any] = {}
        if rng.random() < 0.7:
            attrs["CustomerId"] = sa(f"cust-{rng.randrange(40):02d}", "Keyword")
        if rng.random() < 0.5:
            attrs["Notes"] = sa(" ".join(rng.sample(WORDS, rng.randrange(0, 4))), "Text")
        if rng.random() < 0.7:
            attrs["Amount"] = sa(rng.randrange(-50, 500), "Int")
        if rng.random() < 0.6:
            attrs["Score"] = sa(rng.choice([rng.randrange(10), round(rng.uniform(-5, 10), 3)]), "Double")
        if rng.random() < 0.6:
            attrs["Vip"] = sa(rng.random() < 0.3, "Bool")
        if rng.random() < 0.6:
            due = datetime.fromtimestamp((T0 + rng.randrange(0, 60) * 86_400_000) / 1000, UTC)
            attrs["DueAt"] = sa(due.isoformat() if rng.random() < 0.5 else due.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                "Datetime")
        if rng.random() < 0.6:
            attrs["Tags"] = sa(rng.sample(["red", "green", "blue", "rush", "eu", "us"], rng.randrange(0, 4)),
                               "KeywordList")
        records.append(record(
            f"wf-{rng.randrange(n * 2):05d}" if rng.random() < 0.9 else f"order/{i}", rng.randrange(1, 100),
            run_id=f"run-{i}", workflow_type=rng.choice(["Order", "Refund", "Shipment", "OrderV2"]),
            task_queue=rng.choice(["orders", "payments", "eu-orders"]), status=status, start_time_ms=start,
            execution_time_ms=execution, close_time_ms=close, history_length=rng.randrange(2, 400),
            search_attributes=attrs))
    return records


QUERIES = [
    "",
    "WorkflowType = 'Order' AND ExecutionStatus = 'Running' ORDER BY StartTime DESC",
    "ExecutionStatus != 'Running' ORDER BY CloseTime",
    "HistoryLength > 100 AND HistoryLength <= 300 ORDER BY HistoryLength DESC",
    "HistoryLength >= 390 OR HistoryLength < 5",
    "WorkflowType IN ('Refund', 'Shipment') ORDER BY WorkflowType, StartTime",
    "ExecutionStatus NOT IN ('Running', 'Completed') ORDER BY ExecutionStatus DESC",
    "StartTime BETWEEN '2026-01-01T05:00:00Z' AND '2026-01-01T10:00:00' ORDER BY StartTime",
    "WorkflowId STARTS_WITH 'wf-00' OR WorkflowId STARTS_WITH 'order/'",
    "NOT (WorkflowType = 'Order' OR TaskQueue = 'payments') AND CloseTime IS NOT NULL ORDER BY CloseTime DESC",
    "CloseTime IS NULL ORDER BY TaskQueue DESC, HistoryLength",
    "NOT CloseTime > '2026-01-01T12:00:00Z' ORDER BY CloseTime",
    "NOT ExecutionDuration < '1m' AND NOT ExecutionDuration BETWEEN 100000 AND 200000",
    "ExecutionDuration > '5m' ORDER BY ExecutionDuration DESC",
    "ExecutionDuration <= 60000 AND ExecutionStatus = 'Completed'",
    "CustomerId = 'cust-07' OR CustomerId IN ('cust-01', 'cust-02') ORDER BY CustomerId DESC",
    "CustomerId != 'cust-07' AND CustomerId STARTS_WITH 'cust-1' ORDER BY Amount",
    "CustomerId > 'cust-30' ORDER BY CustomerId",
    "Amount BETWEEN 10 AND 100 ORDER BY Amount DESC, Score",
    "NOT Amount > 0 ORDER BY Amount",
    "Amount IS NULL AND Score IS NOT NULL ORDER BY Score DESC",
    "Score > 2.5 OR Score = 3 ORDER BY Score",
    "Vip = true ORDER BY DueAt",
    "Vip != true ORDER BY Vip DESC, DueAt DESC",
    "DueAt >= '2026-02-01' AND DueAt < '2026-02-15T00:00:00+00:00' ORDER BY DueAt",
    "Tags = 'red' ORDER BY StartTime",
    "Tags IN ('blue', 'rush') AND NOT Tags = 'eu'",
    "Tags NOT IN ('red', 'green') ORDER BY HistoryLength DESC",
    "Tags != 'us' OR Tags STARTS_WITH 'gr'",
    "Tags IS NULL ORDER BY WorkflowId DESC",
    "Notes = 'late parcel' ORDER BY StartTime",
    "Notes != 'REFUND' AND NOT Notes = 'gift'",
    "Notes = 'ünïcode'",
    "(Amount > 100 OR Vip = true) AND (ExecutionStatus = 'Failed' OR ExecutionStatus = 'TimedOut') ORDER BY Amount",
    "ORDER BY CustomerId, Amount DESC, StartTime",
    "ORDER BY DueAt DESC, RunId",
]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[SqliteVisibilityStore, list[dict[str, Any]]]:
    records = generate(1000, seed=20261129)
    store = SqliteVisibilityStore(tmp_path_factory.mktemp("vis") / "v.db", TYPES)
    rng = random.Random(7)
    # Feed every record twice, shuffled, with a lower version: the newer one must win whatever the order.
    older = [{**r, "version": r["version"] - 1, "status": "RUNNING", "search_attributes": {}} for r in records]
    feed = [*records, *older]
    rng.shuffle(feed)
    for start in range(0, len(feed), 97):
        chunk = feed[start:start + 97]
        store.apply_batch([(run_key(NS, r["workflow_id"], r["run_id"]), encode(VISIBILITY_RECORD, r))
                           for r in chunk], {0: start + len(chunk)})
    put(store, record("elsewhere", namespace="other"))
    rows = [store.get(NS, r["workflow_id"], r["run_id"]) for r in records]
    assert [r["version"] for r in rows] == [r["version"] for r in records]  # the newer record won every time
    return store, rows  # type: ignore[return-value]


@pytest.mark.parametrize("text", QUERIES)
def test_store_returns_what_brute_force_returns(text: str, loaded: tuple[SqliteVisibilityStore, Any]) -> None:
    store, rows = loaded
    query = parse(text, TYPES)
    expected = [(r["workflow_id"], r["run_id"]) for r in evaluate(query, rows)]
    assert store.count(NS, text) == len(expected)
    page_size = 1000 if len(expected) < 40 else max(7, len(expected) // 9)
    got, token, pages = [], None, 0
    while True:
        page, token = store.list(NS, text, page_size=page_size, next_page_token=token)
        got += [(r["workflow_id"], r["run_id"]) for r in page]
        pages += 1
        assert pages < 200
        if token is None:
            break
    assert got == expected
    assert len(expected) > 0 or text.startswith("Notes = 'ü")


def test_the_generated_workload_is_not_trivial(loaded: tuple[SqliteVisibilityStore, Any]) -> None:
    _, rows = loaded
    sizes = [len(evaluate(parse(t, TYPES), rows)) for t in QUERIES]
    assert sum(1 for s in sizes if 0 < s < 1000) >= 25  # the queries select, they do not match all or nothing


# ---------------------------------------------------------------------------------------------------- random queries

_LITERALS: dict[str, st.SearchStrategy[str]] = {
    "WorkflowType": st.sampled_from(["'Order'", "'Refund'", "'OrderV2'", "'Nope'"]),
    "TaskQueue": st.sampled_from(["'orders'", "'payments'", "'eu-orders'"]),
    "HistoryLength": st.integers(0, 410).map(str),
    "StartTime": st.integers(0, 31).map(lambda h: f"'2026-01-01T{h % 24:02d}:00:00Z'"
                                        if h < 24 else f"'2026-01-02T{h - 24:02d}:00:00'"),
    "CloseTime": st.integers(0, 40).map(lambda h: f"'2026-01-0{1 + h // 24}T{h % 24:02d}:30:00Z'"),
    "ExecutionDuration": st.sampled_from(["0", "1000", "60000", "'5m'", "'1h'", "'2h30m'"]),
    "CustomerId": st.integers(0, 45).map(lambda i: f"'cust-{i:02d}'"),
    "Amount": st.integers(-60, 510).map(str),
    "Score": st.one_of(st.integers(-6, 11).map(str), st.sampled_from(["2.5", "-1.25", "7.0"])),
    "DueAt": st.integers(0, 60).map(lambda d: f"'{datetime.fromtimestamp(T0 / 1000 + d * 86400, UTC).date()}'"),
}
_KEYWORDS = ("WorkflowType", "TaskQueue", "CustomerId")


@st.composite
def predicates(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["cmp", "in", "between", "starts", "null", "status", "vip", "tags", "notes"]))
    if kind == "status":
        values = draw(st.lists(st.sampled_from(["'Running'", "'Completed'", "'Failed'", "'TimedOut'"]),
                               min_size=1, max_size=3))
        return (f"ExecutionStatus {draw(st.sampled_from(['=', '!=']))} {values[0]}" if len(values) == 1 else
                f"ExecutionStatus {draw(st.sampled_from(['IN', 'NOT IN']))} ({', '.join(values)})")
    if kind == "vip":
        return f"Vip {draw(st.sampled_from(['=', '!=']))} {draw(st.sampled_from(['true', 'false']))}"
    if kind == "tags":
        tag = draw(st.sampled_from(["'red'", "'green'", "'rush'", "'eu'", "'nope'"]))
        op = draw(st.sampled_from(["=", "!=", "IN", "NOT IN", "STARTS_WITH"]))
        return f"Tags {op} ({tag}, 'us')" if "IN" in op else f"Tags {op} {tag}"
    if kind == "notes":
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=2)))
        return f"Notes {draw(st.sampled_from(['=', '!=']))} '{text}'"
    if kind == "null":
        attr = draw(st.sampled_from(["CloseTime", "ExecutionDuration", "Amount", "Tags", "Notes", "DueAt"]))
        return f"{attr} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == "starts":
        attr = draw(st.sampled_from([*_KEYWORDS, "WorkflowId"]))
        prefix = draw(st.sampled_from(["", "O", "Ord", "cust-0", "cust-1", "wf-0", "order/", "eu"]))
        return f"{attr} STARTS_WITH '{prefix}'"
    attr = draw(st.sampled_from(sorted(_LITERALS)))
    lit = _LITERALS[attr]
    if kind == "in":
        values = ", ".join(draw(st.lists(lit, min_size=1, max_size=3)))
        return f"{attr} {draw(st.sampled_from(['IN', 'NOT IN']))} ({values})"
    if kind == "between":
        return f"{attr} BETWEEN {draw(lit)} AND {draw(lit)}"
    return f"{attr} {draw(st.sampled_from(['=', '!=', '<>', '>', '>=', '<', '<=']))} {draw(lit)}"


def expressions() -> st.SearchStrategy[str]:
    return st.recursive(predicates(), lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda e: f"NOT {e}"),
    ), max_leaves=5)


_ORDERABLE = ["WorkflowId", "RunId", "WorkflowType", "ExecutionStatus", "StartTime", "CloseTime",
              "ExecutionDuration", "TaskQueue", "HistoryLength", "CustomerId", "Amount", "Score", "Vip", "DueAt"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.one_of(st.just(""), expressions()),
       order=st.lists(st.tuples(st.sampled_from(_ORDERABLE), st.sampled_from(["", " ASC", " DESC"])), max_size=3),
       page_size=st.sampled_from([1000, 97, 251]))
def test_random_queries_match_brute_force(loaded: tuple[SqliteVisibilityStore, Any], where: str,
                                          order: list[tuple[str, str]], page_size: int) -> None:
    store, rows = loaded
    text = where + (" ORDER BY " + ", ".join(a + d for a, d in order) if order else "")
    note(text)
    expected = [(r["workflow_id"], r["run_id"]) for r in evaluate(parse(text, TYPES), rows)]
    assert store.count(NS, text) == len(expected)
    got, token = [], None
    while True:
        page, token = store.list(NS, text, page_size=page_size, next_page_token=token)
        got += [(r["workflow_id"], r["run_id"]) for r in page]
        if token is None:
            break
    assert got == expected


# ---------------------------------------------------------------------------------------------------- drain


def build_id_records() -> list[dict[str, Any]]:
    """Visibility records as the engine builds them for runs answered by versioned workers (`BuildIds`)."""
    from ostinato.streams.model import RunState
    from ostinato.streams.records import visibility_record

    def run(workflow_id: str, status: str, behavior: str, pinned: str, last: str) -> dict[str, Any]:
        state = RunState(namespace=NS, workflow_id=workflow_id, run_id="run-1", workflow_type="Order",
                         task_queue="orders", status=status, start_time_ms=T0, execution_time_ms=T0,
                         task_timeout_ms=10_000, first_execution_run_id="run-1", next_event_id=5,
                         versioning_behavior=behavior, pinned_build=pinned, build_id=last)
        return visibility_record(state, 10)

    return [run("p1", "RUNNING", "PINNED", "A", "A"), run("p2", "COMPLETED", "PINNED", "A", "A"),
            run("p3", "RUNNING", "PINNED", "B", "B"), run("u1", "RUNNING", "AUTO_UPGRADE", "", "B"),
            run("plain", "RUNNING", "", "", "")]


def check_build_id_queries(store: Any) -> None:
    """What an operator asks before stopping build A's workers, on either store."""
    assert store.count(NS, "BuildIds = 'pinned:A' AND ExecutionStatus = 'Running'") == 1
    assert store.count(NS, "BuildIds = 'pinned:A'") == 2
    assert sorted(ids(store.list(NS, "BuildIds = 'versioned:B'")[0])) == ["p3", "u1"]
    assert store.count(NS, "BuildIds IN ('pinned:A', 'pinned:B') AND ExecutionStatus = 'Running'") == 2
    assert store.count(NS, "BuildIds IS NULL") == 1  # never answered by a versioned worker


def test_build_ids_answer_the_drain_query(store: SqliteVisibilityStore) -> None:
    for rec in build_id_records():
        put(store, rec)
    check_build_id_queries(store)
