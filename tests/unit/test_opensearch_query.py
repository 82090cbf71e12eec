"""The query language as OpenSearch queries: shapes that carry the semantics, without a server."""

from __future__ import annotations

from typing import Any

from ostinato.connectors import opensearch_query as osq
from ostinato.connectors.query import SearchAttributeType, parse

TYPES = {"Amount": "Int", "Notes": "Text", "Tags": "KeywordList", "Score": "Double", "odd.name_1": "Int"}


def where(text: str) -> Any:
    return osq.where(parse(text, TYPES).where)


def test_field_names_are_injective_and_never_nest() -> None:
    names = ["a.b", "a_2e_b", "a_b", "ab", "Ünï", "_"]
    encoded = [osq.field_name(n) for n in names]
    assert len(set(encoded)) == len(names) and all("." not in e for e in encoded)
    assert osq.sa_field(SearchAttributeType.INT, "Amount") == "sa_int.Amount"


def test_not_equal_and_not_in_require_presence() -> None:
    assert where("Amount != 3") == {"bool": {"filter": [{"exists": {"field": "sa_int.Amount"}}],
                                             "must_not": [{"term": {"sa_int.Amount": 3}}]}}
    assert where("Tags NOT IN ('a', 'b')")["bool"]["must_not"] == [{"terms": {"sa_keyword_list.Tags": ["a", "b"]}}]


def test_not_is_plain_negation() -> None:
    assert where("NOT Amount > 5") == {"bool": {"must_not": [{"range": {"sa_int.Amount": {"gt": 5}}}]}}


def test_text_matches_every_case_folded_word() -> None:
    assert where("Notes = 'Late, PARCEL'") == {"bool": {"filter": [{"term": {"sa_text.Notes": "late"}},
                                                                  {"term": {"sa_text.Notes": "parcel"}}]}}


def test_system_values_are_normalised() -> None:
    assert where("ExecutionStatus = 'timed_out'") == {"term": {"status": "TIMED_OUT"}}
    assert where("ExecutionDuration >= '1m'") == {"range": {"execution_duration_ms": {"gte": 60_000}}}
    assert where("StartTime < '1970-01-01T00:00:01'") == {"range": {"start_time_ms": {"lt": 1000}}}
    assert where("Score = -0.0") == {"term": {"sa_double.Score": 0.0}}


def test_starts_with_and_is_null() -> None:
    assert where("WorkflowId STARTS_WITH 'a%'") == {"prefix": {"workflow_id": {"value": "a%"}}}
    assert where("WorkflowId STARTS_WITH ''") == {"exists": {"field": "workflow_id"}}
    assert where("CloseTime IS NULL") == {"bool": {"must_not": [{"exists": {"field": "close_time_ms"}}]}}
    assert where("`odd.name_1` IS NOT NULL") == {"exists": {"field": "sa_int.odd_2e_name_5f_1"}}


def test_sort_puts_missing_last_and_breaks_ties_on_ids() -> None:
    sort = osq.sort(parse("ORDER BY Amount DESC", TYPES))
    assert sort == [{"sa_int.Amount": {"order": "desc", "missing": "_last", "unmapped_type": "long"}},
                    {"workflow_id": {"order": "asc"}}, {"run_id": {"order": "asc"}}]
    assert next(iter(osq.sort(parse("", TYPES))[0])) == "start_time_ms"
