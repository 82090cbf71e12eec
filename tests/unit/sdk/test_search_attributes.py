"""The typed search attribute API (temporalio's names) and its wire form: JSON payloads with `type` metadata."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ostinato.common import (
    SearchAttributeIndexedValueType,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
)
from ostinato.sdk.search_attributes import decode, encode, encode_updates, from_json_values, to_payloads

CUSTOMER = SearchAttributeKey.for_keyword("CustomerId")
NOTES = SearchAttributeKey.for_text("Notes")
COUNT = SearchAttributeKey.for_int("Count")
TOTAL = SearchAttributeKey.for_float("Total")
VIP = SearchAttributeKey.for_bool("Vip")
DUE = SearchAttributeKey.for_datetime("Due")
TAGS = SearchAttributeKey.for_keyword_list("Tags")


def test_keys_carry_temporal_types_and_compare_by_name_and_type() -> None:
    assert [k.indexed_value_type for k in (NOTES, CUSTOMER, COUNT, TOTAL, VIP, DUE, TAGS)] == [
        SearchAttributeIndexedValueType(v) for v in range(1, 8)]
    assert SearchAttributeKey.for_keyword("CustomerId") == CUSTOMER
    assert SearchAttributeKey.for_text("CustomerId") != CUSTOMER
    assert SearchAttributeKey.from_metadata_type("Due", "Datetime") == DUE
    assert SearchAttributeKey.from_metadata_type("Tags", "INDEXED_VALUE_TYPE_KEYWORD_LIST") == TAGS
    assert SearchAttributeKey.from_metadata_type("X", "Nope") is None


def test_typed_search_attributes_get_contains_updated() -> None:
    attrs = TypedSearchAttributes([SearchAttributePair(COUNT, 3), SearchAttributePair(CUSTOMER, "c-1")])
    assert [p.key.name for p in attrs] == ["Count", "CustomerId"]  # sorted by name
    assert len(attrs) == 2 and CUSTOMER in attrs and VIP not in attrs
    assert SearchAttributeKey.for_text("CustomerId") not in attrs  # same name, another type
    assert attrs[COUNT] == 3 and attrs.get(VIP) is None and attrs.get(VIP, False) is False
    with pytest.raises(KeyError):
        attrs[VIP]
    changed = attrs.updated(SearchAttributePair(COUNT, 4), SearchAttributePair(VIP, True))
    assert changed[COUNT] == 4 and changed[VIP] is True and attrs[COUNT] == 3  # a copy
    assert TypedSearchAttributes.empty.get(COUNT) is None and len(TypedSearchAttributes.empty) == 0
    with pytest.raises(ValueError, match="twice"):
        TypedSearchAttributes([SearchAttributePair(COUNT, 1), SearchAttributePair(COUNT, 2)])


def test_payloads_carry_their_type_and_round_trip() -> None:
    due = datetime(2026, 3, 1, 12, 30, tzinfo=timezone(timedelta(hours=2)))
    attrs = TypedSearchAttributes([
        SearchAttributePair(CUSTOMER, "c-1"), SearchAttributePair(NOTES, "rush order"), SearchAttributePair(COUNT, 5),
        SearchAttributePair(TOTAL, 2), SearchAttributePair(VIP, True), SearchAttributePair(DUE, due),
        SearchAttributePair(TAGS, ["a", "b"])])
    payloads = encode(attrs)
    assert {n: p["metadata"]["type"] for n, p in payloads.items()} == {
        "CustomerId": b"Keyword", "Notes": b"Text", "Count": b"Int", "Total": b"Double", "Vip": b"Bool",
        "Due": b"Datetime", "Tags": b"KeywordList"}
    assert json.loads(payloads["Due"]["data"]) == "2026-03-01T12:30:00+02:00"
    assert json.loads(payloads["Total"]["data"]) == 2.0
    back = decode(payloads)
    assert back == attrs and isinstance(back[TOTAL], float) and back[DUE] == due
    rows = from_json_values({n: json.loads(p["data"]) for n, p in payloads.items()},
                            {n: p["metadata"]["type"].decode() for n, p in payloads.items()})
    assert rows == attrs


def test_a_naive_datetime_is_utc() -> None:
    payload = encode(TypedSearchAttributes([SearchAttributePair(DUE, datetime(2026, 1, 1))]))["Due"]
    assert json.loads(payload["data"]) == "2026-01-01T00:00:00+00:00"
    assert decode({"Due": payload})[DUE] == datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("key", "value"), [
    (COUNT, "5"), (COUNT, 1.5), (COUNT, True), (COUNT, 2**63), (TOTAL, float("nan")), (VIP, 1),
    (DUE, "2026-01-01"), (TAGS, "a"), (TAGS, ["a", 1]), (CUSTOMER, 5)])
def test_a_value_of_the_wrong_type_is_refused_with_the_key_and_type(key: SearchAttributeKey, value: object) -> None:
    with pytest.raises(TypeError, match=f"{key.name}.*{key.indexed_value_type.metadata_type}"):
        encode_updates([key.value_set(value)])


def test_updates_set_and_unset() -> None:
    payloads = encode_updates([COUNT.value_set(7), VIP.value_unset()])
    assert json.loads(payloads["Count"]["data"]) == 7
    assert payloads["Vip"]["metadata"] == {"encoding": b"binary/null", "type": b"Bool"}
    assert COUNT.value_set(7).value == 7 and VIP.value_unset().value is None and VIP.value_unset().key == VIP


def test_the_dictionary_form_still_works_and_is_deprecated() -> None:
    with pytest.warns(DeprecationWarning, match="deprecated"):
        payloads = to_payloads({"CustomerId": "c-1"}, lambda v: {"metadata": {}, "data": json.dumps(v).encode()})
    assert payloads == {"CustomerId": {"metadata": {}, "data": b'"c-1"'}}
    assert to_payloads(None, None) == {}


def test_list_rows_and_descriptions_give_typed_attributes() -> None:
    from ostinato.client import WorkflowExecution, WorkflowExecutionDescription

    row = {"workflow_id": "w", "run_id": "r", "workflow_type": "T", "task_queue": "q", "status": "RUNNING",
           "start_time_ms": 0, "close_time_ms": None, "history_length": 2,
           "search_attributes": {"Due": "2026-01-01T00:00:00Z", "Count": 3, "Odd": "x"},
           "search_attribute_types": {"Due": "Datetime", "Count": "Int"}}
    assert WorkflowExecution.from_row(row).typed_search_attributes == TypedSearchAttributes([
        SearchAttributePair(DUE, datetime(2026, 1, 1, tzinfo=UTC)), SearchAttributePair(COUNT, 3)])
    described = WorkflowExecutionDescription("w", "r", "T", "q", None, 2, {
        "search_attributes": encode(TypedSearchAttributes([SearchAttributePair(TAGS, ["a"])]))})
    assert described.typed_search_attributes[TAGS] == ["a"]
