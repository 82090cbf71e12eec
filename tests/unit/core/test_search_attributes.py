"""The core checks custom search attributes against the namespace's registry (Config.search_attributes): a start
is refused, a workflow task answer fails its task (BAD_COMMAND), and accepted payloads carry their registered type."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ostinato.streams import search_attributes as sa
from ostinato.streams.config import Config
from ostinato.streams.search_attributes import checked, name_problem, type_name
from tests.unit.core.support import wf_command
from tests.unit.core.task_support import (
    NULL,
    Flow,
    attrs,
    child_cmd,
    payload,
    rejected,
    started_flow,
    task_failed_reply,
)

REGISTRY = {"CustomerId": "Keyword", "Count": "Int", "Total": "Double", "Vip": "Bool", "Due": "Datetime",
            "Tags": "KeywordList", "Notes": "Text"}
CHECKED = Config(search_attributes=REGISTRY)


def js(value: Any, sa_type: str | None = None) -> dict[str, Any]:
    p = payload(json.dumps(value).encode())
    if sa_type is not None:
        p["metadata"]["type"] = sa_type.encode()
    return p


def upsert(**values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return wf_command("UpsertWorkflowSearchAttributesCommand", {"search_attributes": values})


@pytest.mark.parametrize(("values", "message"), [
    ({"Nope": js("x")}, "'Nope' is not registered in namespace 'default'"),
    ({"Count": js("5")}, "'Count' is Int: expected a 64-bit integer, not \"5\""),
    ({"Count": js(1.5)}, "'Count' is Int"),
    ({"Vip": js(1)}, "'Vip' is Bool: expected true or false"),
    ({"Due": js("tomorrow")}, "'Due' is Datetime: expected an ISO-8601 date-time string"),
    ({"Tags": js("a")}, "'Tags' is KeywordList: expected a list of strings"),
    ({"Total": js(2, "Int")}, "'Total' is registered as Double, but the value is typed Int"),
    ({"WorkflowType": js("x")}, "WorkflowType is built in"),
    ({"CustomerId": payload(b"xx", b"binary/encrypted")}, "must be a plain JSON payload"),
    ({"CustomerId": payload(b"{not json")}, "'CustomerId': the payload is not valid JSON"),
    ({"Total": js("1.5")}, "'Total' is Double: expected a finite number"),
])
def test_what_the_registry_refuses(values: dict[str, Any], message: str) -> None:
    problem, _ = checked(values, REGISTRY, "default")
    assert problem is not None and message in problem


def test_accepted_payloads_gain_their_registered_type_and_nothing_is_checked_without_a_registry() -> None:
    values = {"Count": js(5), "Due": js("2026-01-01T00:00:00Z", "Datetime"), "Tags": js(["a"]), "Vip": NULL}
    problem, typed = checked(values, REGISTRY, "default")
    assert problem is None
    assert {n: p["metadata"].get("type") for n, p in typed.items()} == {
        "Count": b"Int", "Due": b"Datetime", "Tags": b"KeywordList", "Vip": None}  # an unset stays binary/null
    assert typed["Count"]["data"] == b"5"
    assert checked({"Anything": js("x")}, None, "default") == (None, {"Anything": js("x")})


def test_temporalio_dictionary_lists_of_values_are_taken_as_temporal_takes_them() -> None:
    problem, typed = checked({"Count": js([5]), "Tags": js(["a"]), "Vip": js([]), "Due": js(["2026-01-01"])},
                             REGISTRY, "default")
    assert problem is None
    assert [typed[n]["data"] for n in ("Count", "Tags", "Due")] == [b"5", b'["a"]', b'"2026-01-01"']
    assert typed["Vip"]["metadata"] == {"encoding": b"binary/null", "type": b"Bool"}  # no value: unset
    assert "expected a 64-bit integer" in (checked({"Count": js([5, 6])}, REGISTRY, "default")[0] or "")
    assert "expected a 64-bit integer" in (checked({"Count": js([5], "Int")}, REGISTRY, "default")[0] or "")


def test_names_and_types() -> None:
    assert type_name("keyword_list") == type_name("INDEXED_VALUE_TYPE_KEYWORD_LIST") == "KeywordList"
    assert type_name("Float") is None
    assert name_problem("CustomerId") is None
    assert "built-in" in (name_problem("StartTime") or "")
    for bad in ("", "1abc", "a-b", "a b", "x" * 65):
        assert "not a search attribute name" in (name_problem(bad) or ""), bad


def test_a_start_with_a_wrong_type_or_an_unregistered_attribute_is_refused() -> None:
    flow = Flow(config=CHECKED)
    step = flow.start(search_attributes={"Count": js("five")})
    assert rejected(step) == "INVALID_ARGUMENT"
    assert step.rejection is not None and "'Count' is Int" in step.rejection["message"]
    step = flow.start(search_attributes={"Region": js("eu")})
    assert rejected(step) == "INVALID_ARGUMENT" and "not registered" in step.rejection["message"]  # type: ignore[index]
    step = flow.start(search_attributes={"Count": js(5)})
    assert step.rejection is None
    assert attrs(step, "WORKFLOW_EXECUTION_STARTED")["search_attributes"]["Count"]["metadata"]["type"] == b"Int"


@pytest.mark.parametrize("command", [
    pytest.param(upsert(Nope=js("x")), id="upsert unregistered"),
    pytest.param(upsert(Count=js("x")), id="upsert wrong type"),
    pytest.param(child_cmd(search_attributes={"Count": js(True)}), id="child with a wrong type"),
    pytest.param(wf_command("ContinueAsNewWorkflowExecutionCommand", {"search_attributes": {"Nope": js(1)}}),
                 id="continue-as-new unregistered"),
])
def test_a_bad_search_attribute_in_a_task_answer_fails_the_task(command: tuple[str, dict[str, Any]]) -> None:
    flow = started_flow(CHECKED)
    step = flow.complete_task(command)
    assert task_failed_reply(step) == "BAD_COMMAND"
    failed = attrs(step, "WORKFLOW_TASK_FAILED")
    assert failed["cause"] == "BAD_COMMAND" and "search attribute" in failed["failure"]["message"]
    assert flow.run.status == "RUNNING" and flow.run.search_attributes == {}


def test_an_upsert_records_the_registered_type() -> None:
    flow = started_flow(CHECKED)
    step = flow.complete_task(upsert(Count=js(3), CustomerId=js("c-1", "Keyword")))
    written = attrs(step, "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES")["search_attributes"]
    assert {n: p["metadata"]["type"] for n, p in written.items()} == {"Count": b"Int", "CustomerId": b"Keyword"}
    assert flow.run.search_attributes["Count"]["metadata"]["type"] == b"Int"


def test_a_child_in_another_namespace_is_left_to_its_own_start() -> None:
    flow = started_flow(CHECKED)
    step = flow.complete_task(child_cmd(namespace="other", search_attributes={"Nope": js(1)}))
    assert attrs(step, "START_CHILD_WORKFLOW_EXECUTION_INITIATED")["namespace"] == "other"


@pytest.mark.parametrize(("value", "why"), [(10**400, "huge int"), (2**53 + 1, "int past a double's precision")])
def test_a_double_refuses_an_int_it_cannot_hold_without_raising(value: int, why: str) -> None:
    assert sa.value_problem("Double", value) is not None, why
