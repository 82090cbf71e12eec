"""The visibility query language: tokens, grammar, precedence, typing, errors and the reference evaluator."""

from __future__ import annotations

from typing import Any

import pytest

from ostinato.connectors.query import (
    And,
    Between,
    Comparison,
    In,
    IsNull,
    Not,
    Or,
    QueryError,
    SearchAttributeType,
    StartsWith,
    datetime_ms,
    duration_ms,
    evaluate,
    matches,
    parse,
    tokenize,
)

TYPES = {
    "CustomerId": "Keyword", "Notes": "Text", "Amount": "Int", "Score": "Double", "Vip": "Bool",
    "DueAt": "Datetime", "Tags": "KeywordList",
}


def q(text: str) -> Any:
    return parse(text, TYPES)


def where(text: str) -> Any:
    return q(text).where


# ---------------------------------------------------------------------------------------------------- tokens


def test_strings_take_both_quotes_escapes_and_doubled_quotes() -> None:
    values = [t.value for t in tokenize(r"""'a\'b' "c\"d" 'e''f' 'tab\there' "\\" """) if t.kind == "string"]
    assert values == ["a'b", 'c"d', "e'f", "tab\there", "\\"]


def test_numbers_and_positions() -> None:
    tokens = tokenize("Amount >= -12 AND Score < 1.5e3")
    assert [(t.kind, t.value) for t in tokens if t.kind == "number"] == [("number", -12), ("number", 1500.0)]
    assert [t.position for t in tokens] == [0, 7, 10, 14, 18, 24, 26, 31]


# ---------------------------------------------------------------------------------------------------- grammar


@pytest.mark.parametrize("op", ["=", "!=", ">", ">=", "<", "<="])
def test_every_comparison_operator(op: str) -> None:
    node = where(f"Amount {op} 5")
    assert node == Comparison(node.attr, op, 5)
    assert node.attr.name == "Amount"


def test_angle_brackets_mean_not_equal() -> None:
    assert where("WorkflowType <> 'a'").op == "!="


def test_in_not_in_between_starts_with_is_null() -> None:
    node = where("WorkflowType IN ('a', \"b\")")
    assert isinstance(node, In) and node.values == ("a", "b") and not node.negated
    assert where("Amount NOT IN (1, 2)").negated
    node = where("StartTime BETWEEN '2026-01-01' AND '2026-01-02T00:00:00Z'")
    assert isinstance(node, Between) and node.high - node.low == 86_400_000
    assert where("WorkflowId STARTS_WITH 'order-'") == StartsWith(where("WorkflowId = 'x'").attr, "order-")
    assert isinstance(where("CloseTime IS NULL"), IsNull) and where("CloseTime IS NOT NULL").negated


def test_not_binds_tighter_than_and_which_binds_tighter_than_or() -> None:
    node = where("NOT Vip = true AND Amount = 1 OR Amount = 2")
    assert isinstance(node, Or) and len(node.items) == 2
    left = node.items[0]
    assert isinstance(left, And) and isinstance(left.items[0], Not)
    assert isinstance(left.items[0].item, Comparison) and left.items[0].item.attr.name == "Vip"


def test_parentheses_override_precedence() -> None:
    node = where("NOT (Vip = true AND (Amount = 1 OR Amount = 2))")
    assert isinstance(node, Not) and isinstance(node.item, And) and isinstance(node.item.items[1], Or)


def test_chains_flatten_and_keywords_ignore_case() -> None:
    node = where("Amount = 1 and Amount = 2 AnD Amount = 3 or not Vip = FALSE")
    assert isinstance(node, Or) and isinstance(node.items[0], And) and len(node.items[0].items) == 3


def test_order_by_several_keys_and_directions() -> None:
    query = q("ExecutionStatus = 'Running' ORDER BY StartTime DESC, Amount, `CustomerId` asc")
    assert [(k.attr.name, k.descending) for k in query.order_by] == [
        ("StartTime", True), ("Amount", False), ("CustomerId", False)]


def test_empty_query_and_order_only() -> None:
    assert q("").where is None and q("   ").order_by == ()
    assert q("ORDER BY HistoryLength DESC").where is None


def test_values_are_typed() -> None:
    assert where("ExecutionStatus = 'continuedAsNew'").value == "CONTINUED_AS_NEW"
    assert where("ExecutionStatus = 'TIMED_OUT'").value == "TIMED_OUT"
    assert where("Score = 3").value == 3.0 and isinstance(where("Score = 3").value, float)
    assert where("DueAt > '2026-03-01T10:00:00+02:00'").value == datetime_ms("2026-03-01T08:00:00Z")
    assert where("Notes = 'Late DELIVERY, late'").value == ("delivery", "late")
    assert where("ExecutionDuration > '1h30m'").value == 5_400_000
    assert where("ExecutionDuration > 250").value == 250


def test_durations() -> None:
    assert [duration_ms(d) for d in ("250ms", "90s", "5m", "2d", "1.5s")] == [250, 90_000, 300_000, 172_800_000, 1500]
    for bad in ("", "5", "5x", "m5", "1h 30m"):
        with pytest.raises(ValueError):
            duration_ms(bad)


def test_search_attribute_type_names() -> None:
    assert SearchAttributeType.parse("keyword_list") is SearchAttributeType.KEYWORD_LIST
    with pytest.raises(ValueError, match="unknown search attribute type"):
        SearchAttributeType.parse("Float")
    with pytest.raises(ValueError, match="system attribute"):
        parse("", {"WorkflowId": "Keyword"})


# ---------------------------------------------------------------------------------------------------- errors

ERRORS = [
    # (query, message fragment, position, token)
    ("WorkflowType = ", "expected a value for WorkflowType", 15, ""),
    ("WorkflowType = 'a' AND", "expected an attribute name", 22, ""),
    ("(WorkflowType = 'a'", "expected ')'", 19, ""),
    ("WorkflowType = 'a')", "expected AND, OR, ORDER BY", 18, ")"),
    ("WorkflowType == 'a'", "expected a value", 14, "="),
    ("WorkflowType 'a'", "expected an operator after WorkflowType", 13, "'a'"),
    ("WorkflowType = 'a", "unterminated string", 15, "'a"),
    ("Amount = 1 ORDER StartTime", "expected BY", 17, "StartTime"),
    ("Amount IN 1, 2", "expected '(' after IN", 10, "1"),
    ("Amount IN (1 2)", "expected ')' or ','", 13, "2"),
    ("Amount BETWEEN 1 OR 2", "expected AND", 17, "OR"),
    ("Amount = 1 # 2", "unexpected character '#'", 11, "#"),
    ("WorkflowType = 'a' AND AND", "expected an attribute name", 23, "AND"),
    ("Amount = 12abc", "malformed number", 9, "12a"),
    ("CloseTime IS 'x'", "expected NULL", 13, "'x'"),
    ("WorkflowType = 'a\\q'", "unknown escape", 17, "\\q"),
    ("ORDER BY", "expected an attribute name", 8, ""),
]


@pytest.mark.parametrize(("text", "message", "position", "token"), ERRORS)
def test_malformed_queries_point_at_the_offending_token(text: str, message: str, position: int, token: str) -> None:
    with pytest.raises(QueryError) as info:
        q(text)
    assert message in info.value.message
    assert (info.value.position, info.value.token) == (position, token)
    assert f"position {position}" in str(info.value)


@pytest.mark.parametrize(("text", "position", "token"), [
    ("Customer = 'x'", 0, "Customer"),
    ("Amount = 1 AND `No Such` = 2", 15, "`No Such`"),
    ("WorkflowType = 'a' ORDER BY Nope", 28, "Nope"),
    ("workflowid = 'a'", 0, "workflowid"),  # attribute names are case-sensitive
])
def test_unknown_attributes(text: str, position: int, token: str) -> None:
    with pytest.raises(QueryError, match="unknown search attribute") as info:
        q(text)
    assert (info.value.position, info.value.token) == (position, token)


@pytest.mark.parametrize(("text", "message", "position", "token"), [
    ("Amount = 'five'", "expected an integer", 9, "'five'"),
    ("Amount = 1.5", "expected an integer", 9, "1.5"),
    ("Score = 'x'", "expected a finite number", 8, "'x'"),
    ("Score > 1e400", "expected a finite number", 8, "1e400"),
    ("Amount < 99999999999999999999", "does not fit in a 64-bit integer", 9, "99999999999999999999"),
    ("Vip = 1", "expected true or false", 6, "1"),
    ("Vip > true", "operator > does not apply", 4, ">"),
    ("CustomerId = 7", "expected a string", 13, "7"),
    ("StartTime > 'yesterday'", "not an ISO-8601 date-time", 12, "'yesterday'"),
    ("StartTime > 1700000000000", "expected an ISO-8601", 12, "1700000000000"),
    ("ExecutionStatus = 'Sleeping'", "expected one of Running", 18, "'Sleeping'"),
    ("ExecutionStatus > 'Running'", "does not apply", 16, ">"),
    ("Tags > 'a'", "does not apply to Tags (KeywordList)", 5, ">"),
    ("Notes IN ('a')", "IN does not apply", 6, "IN"),
    ("Notes = '...'", "at least one word", 8, "'...'"),
    ("Notes STARTS_WITH 'a'", "STARTS_WITH does not apply", 6, "STARTS_WITH"),
    ("Amount STARTS_WITH 'a'", "STARTS_WITH does not apply", 7, "STARTS_WITH"),
    ("WorkflowId STARTS_WITH 1", "STARTS_WITH needs a string", 23, "1"),
    ("Vip BETWEEN true AND false", "BETWEEN does not apply", 4, "BETWEEN"),
    ("ExecutionDuration < '5 minutes'", "not a duration", 20, "'5 minutes'"),
    ("WorkflowType = 'a' ORDER BY Tags", "cannot ORDER BY Tags", 28, "Tags"),
    ("ORDER BY Notes DESC", "cannot ORDER BY Notes", 9, "Notes"),
])
def test_type_mismatches(text: str, message: str, position: int, token: str) -> None:
    with pytest.raises(QueryError) as info:
        q(text)
    assert message in info.value.message
    assert (info.value.position, info.value.token) == (position, token)


# ---------------------------------------------------------------------------------------------------- evaluator


def row(wid: str, **fields: Any) -> dict[str, Any]:
    base = {"workflow_id": wid, "run_id": "r", "workflow_type": "T", "task_queue": "q", "status": "RUNNING",
            "start_time_ms": 0, "execution_time_ms": 0, "close_time_ms": None, "history_length": 1,
            "search_attributes": {}}
    return {**base, **fields}


def test_absent_attributes_fail_predicates_but_not_their_negation() -> None:
    r = row("a")
    assert not matches(q("Amount > 5"), r) and not matches(q("Amount <= 5"), r) and not matches(q("Amount != 5"), r)
    assert matches(q("NOT Amount > 5"), r) and matches(q("Amount IS NULL"), r)
    assert not matches(q("CloseTime < '2030-01-01'"), r) and matches(q("NOT CloseTime < '2030-01-01'"), r)


def test_keyword_lists_match_any_element() -> None:
    r = row("a", search_attributes={"Tags": ["red", "blue"]})
    assert matches(q("Tags = 'red'"), r) and not matches(q("Tags != 'red'"), r) and matches(q("Tags != 'x'"), r)
    assert matches(q("Tags IN ('x', 'blue')"), r) and not matches(q("Tags NOT IN ('blue')"), r)
    assert matches(q("Tags STARTS_WITH 'bl'"), r)
    assert matches(q("Tags IS NULL"), row("b", search_attributes={"Tags": []}))


def test_text_matches_all_words() -> None:
    r = row("a", search_attributes={"Notes": "Customer called: parcel LATE again"})
    assert matches(q("Notes = 'late parcel'"), r) and not matches(q("Notes = 'late refund'"), r)
    assert matches(q("Notes != 'refund'"), r)


def test_execution_duration_from_execution_time_to_close() -> None:
    r = row("a", start_time_ms=0, execution_time_ms=1000, close_time_ms=301_000, status="COMPLETED")
    assert matches(q("ExecutionDuration = '5m'"), r) and matches(q("ExecutionDuration BETWEEN 1 AND 300000"), r)
    assert not matches(q("ExecutionDuration > 0"), row("b"))


def test_values_of_another_indexed_type_count_as_absent() -> None:
    r = row("a", search_attributes={"Amount": 5}, search_attribute_types={"Amount": SearchAttributeType.KEYWORD})
    assert not matches(q("Amount = 5"), r) and matches(q("Amount IS NULL"), r)


def test_evaluate_orders_absent_values_last_then_by_id() -> None:
    rows = [row("d"), row("c", search_attributes={"Amount": 1}), row("b", search_attributes={"Amount": 2}),
            row("a")]
    assert [r["workflow_id"] for r in evaluate(q("ORDER BY Amount DESC"), rows)] == ["b", "c", "a", "d"]
    assert [r["workflow_id"] for r in evaluate(q("ORDER BY Amount"), rows)] == ["c", "b", "a", "d"]
    rows = [row("x", start_time_ms=1), row("y", start_time_ms=2)]
    assert [r["workflow_id"] for r in evaluate(q(""), rows)] == ["y", "x"]  # default: newest first
