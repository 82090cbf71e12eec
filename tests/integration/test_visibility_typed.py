"""Typed search attributes from workflow code to both visibility stores: runs set them through the SDK (typed start
and upsert) on the engine's core with a namespace registry; the same visibility records go into SQLite and a real
OpenSearch, and typed queries answer the same runs in the same order in both."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from ostinato import workflow
from ostinato.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from ostinato.connectors.visibility_opensearch import OpenSearchVisibilityStore
from ostinato.connectors.visibility_sqlite import SqliteVisibilityStore
from ostinato.schemas.codec import encode
from ostinato.schemas.keys import run_key
from ostinato.schemas.wire import VISIBILITY
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker
from tests.integration.test_visibility_opensearch import opensearch_url  # noqa: F401  # a fixture

Q = "typed-visibility"
KEYWORD = SearchAttributeKey.for_keyword("CustomKeywordField")
INT = SearchAttributeKey.for_int("CustomIntField")
DATETIME = SearchAttributeKey.for_datetime("CustomDatetimeField")
KEYWORD_LIST = SearchAttributeKey.for_keyword_list("CustomKeywordListField")
TEXT = SearchAttributeKey.for_text("CustomTextField")
DOUBLE = SearchAttributeKey.for_float("CustomDoubleField")
BOOL = SearchAttributeKey.for_bool("CustomBoolField")
KEYS = [KEYWORD, INT, DATETIME, KEYWORD_LIST, TEXT, DOUBLE, BOOL]
REGISTRY = {k.name: k.indexed_value_type.metadata_type for k in KEYS}
START = datetime(2025, 12, 30, tzinfo=UTC)
RUNS = 12


def due(i: int) -> datetime:
    """Runs 0..11 fall due a day apart from 2025-12-29 12:00 UTC on, given in UTC-5 for odd ones."""
    moment = datetime(2025, 12, 29, 12, tzinfo=UTC) + timedelta(days=i)
    return moment.astimezone(timezone(timedelta(hours=-5))) if i % 2 else moment


@workflow.defn
class Typed:
    @workflow.run
    async def run(self, i: int) -> None:
        updates: list[Any] = [INT.value_set(i), DATETIME.value_set(due(i))]
        if i % 3 == 0:
            updates.append(KEYWORD_LIST.value_set(["x", f"tag-{i}"]))
        elif i % 3 == 1:
            updates.append(KEYWORD_LIST.value_set(["y"]))
        if i % 4 == 0:
            updates.append(KEYWORD.value_unset())  # set at start, taken back
        await workflow.sleep(timedelta(minutes=i + 1))  # start times differ; the upsert lands in a later task
        workflow.upsert_search_attributes(updates)


async def _runs() -> list[dict[str, Any]]:
    """Visibility records of RUNS runs (every value typed by the SDK, checked and kept by the core)."""
    async with await WorkflowEnvironment.start_time_skipping(search_attributes=KEYS, start_time=START) as env, \
            Worker(env.client, task_queue=Q, workflows=[Typed]):
        for i in range(RUNS):
            await env.client.start_workflow(Typed.run, i, id=f"typed-{i:02}", task_queue=Q,
                                            search_attributes=TypedSearchAttributes([
                                                SearchAttributePair(KEYWORD, f"k-{i % 3}"),
                                                SearchAttributePair(TEXT, f"order number {i} rush" if i % 2 else
                                                                    f"order number {i}"),
                                                SearchAttributePair(DOUBLE, i / 4),
                                                SearchAttributePair(BOOL, i % 2 == 0)]))
            await env.sleep(timedelta(seconds=30))
        for i in range(RUNS):
            await env.client.get_workflow_handle(f"typed-{i:02}").result()
        await asyncio.sleep(0)
        return [r for (ns, _, _), r in env.engine.visibility.items() if ns == "default"]


@pytest.fixture(scope="module")
def stores(opensearch_url: str) -> Iterator[tuple[SqliteVisibilityStore, OpenSearchVisibilityStore]]:  # noqa: F811
    records = asyncio.run(_runs())
    assert len(records) == RUNS
    sqlite = SqliteVisibilityStore(":memory:")  # no registry of their own: the records carry their types
    search = OpenSearchVisibilityStore(opensearch_url, f"vis-typed-{uuid.uuid4().hex[:10]}")
    for store in (sqlite, search):
        for rec in records:
            store.apply(run_key(rec["namespace"], rec["workflow_id"], rec["run_id"]), encode(VISIBILITY, rec))
    yield sqlite, search
    search._client.indices.delete(index=search.index, ignore_unavailable=True)
    search.close()
    sqlite.close()


def _ids(store: SqliteVisibilityStore | OpenSearchVisibilityStore, query: str) -> list[str]:
    rows, token = store.list("default", query, 100, search_attributes=REGISTRY)
    assert token is None
    assert store.count("default", query, search_attributes=REGISTRY) == len(rows)
    return [r["workflow_id"] for r in rows]


def _wf(*numbers: int) -> list[str]:
    return [f"typed-{i:02}" for i in numbers]


QUERIES = [
    # The brief's four shapes, then the other types and mixes.
    ('StartTime > "2025-12-30T00:02:45Z" ORDER BY WorkflowId', _wf(*range(6, RUNS))),  # run i starts at i * 30 s
    ('CustomDatetimeField > "2026-01-01T00:00:00Z" ORDER BY WorkflowId', _wf(*range(3, RUNS))),
    ("CustomIntField >= 5 ORDER BY CustomIntField DESC", _wf(*reversed(range(5, RUNS)))),
    ('CustomKeywordListField = "x" ORDER BY WorkflowId', _wf(0, 3, 6, 9)),
    ("CustomKeywordListField IN ('y', 'tag-3') ORDER BY WorkflowId", _wf(1, 3, 4, 7, 10)),
    ("CustomDatetimeField BETWEEN '2026-01-02' AND '2026-01-04T12:00:00+00:00' ORDER BY CustomDatetimeField DESC",
     _wf(6, 5, 4)),
    ("CustomKeywordField = 'k-1' ORDER BY WorkflowId", _wf(1, 7, 10)),  # 4 had it unset
    ("CustomKeywordField IS NULL ORDER BY WorkflowId", _wf(0, 4, 8)),
    ("CustomTextField = 'RUSH order' AND CustomIntField < 6 ORDER BY WorkflowId", _wf(1, 3, 5)),
    ("CustomDoubleField >= 2.5 AND CustomBoolField = true ORDER BY CustomDoubleField", _wf(10)),
    ("CustomIntField >= 5 AND CustomIntField <= 7 OR CustomKeywordListField = 'y' ORDER BY StartTime DESC",
     _wf(10, 7, 6, 5, 4, 1)),
]


@pytest.mark.parametrize(("query", "expected"), QUERIES)
def test_typed_queries_answer_the_same_runs_in_both_stores(
        stores: tuple[SqliteVisibilityStore, OpenSearchVisibilityStore], query: str, expected: list[str]) -> None:
    sqlite, search = stores
    assert _ids(sqlite, query) == expected
    assert _ids(search, query) == expected


def test_values_are_indexed_by_their_registered_type_not_guessed(
        stores: tuple[SqliteVisibilityStore, OpenSearchVisibilityStore]) -> None:
    # A datetime (a string on the wire) is a Datetime to both stores: typed as a Keyword, it is not there at all.
    as_keyword = {**REGISTRY, "CustomDatetimeField": "Keyword"}
    for store in stores:
        assert store.count("default", "CustomDatetimeField IS NOT NULL", search_attributes=as_keyword) == 0
        assert store.count("default", "CustomDatetimeField IS NOT NULL", search_attributes=REGISTRY) == RUNS
        row = store.get("default", "typed-03", store.list("default", "WorkflowId = 'typed-03'", 1,
                                                                search_attributes=REGISTRY)[0][0]["run_id"])
        assert row is not None
        assert row["search_attribute_types"] == {
            "CustomKeywordField": "Keyword", "CustomTextField": "Text", "CustomDoubleField": "Double",
            "CustomBoolField": "Bool", "CustomIntField": "Int", "CustomDatetimeField": "Datetime",
            "CustomKeywordListField": "KeywordList"}
