"""Every shipped Avro type round-trips, and decodes records written by an older version of itself."""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ostinato.schemas import codec
from ostinato.schemas.codec import MAGIC, SchemaRegistry
from ostinato.schemas.release import released

REGISTRY = codec.registry()
TYPES = sorted(info.name for info in REGISTRY.schemas)
EXAMPLES = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "bytes": st.binary(max_size=16),
    "string": st.text(max_size=16),
}


def _definitions(schema: Any, found: dict[str, Any]) -> dict[str, Any]:
    """Every named type defined anywhere in a canonical schema (defined once, referenced by name after)."""
    if isinstance(schema, list):
        for branch in schema:
            _definitions(branch, found)
    elif isinstance(schema, dict):
        if "name" in schema:
            found.setdefault(schema["name"], schema)
        for key in ("fields", "items", "values"):
            if key in schema:
                for part in schema[key] if key == "fields" else [schema[key]]:
                    _definitions(part["type"] if key == "fields" else part, found)
    return found


def values_for(schema: Any, defined: dict[str, Any] | None = None, depth: int = 0) -> st.SearchStrategy[Any]:
    """Random values of an Avro schema in canonical form, shaped as the codec expects them."""
    defined = _definitions(schema, {}) if defined is None else defined
    if isinstance(schema, str):
        return _PRIMITIVES[schema] if schema in _PRIMITIVES else values_for(defined[schema], defined, depth + 1)
    if isinstance(schema, list):
        records = [b for b in schema if _is_record(b, defined)]
        branches = []
        for branch in schema:
            if branch == "null":
                branches.append(st.none())
            elif depth > 3 and "null" in schema:  # recursive types (Failure.cause) end in null
                continue
            elif len(records) > 1:
                name = _name(branch)
                branches.append(values_for(branch, defined, depth + 1).map(lambda r, n=name: (n, r)))
            else:
                branches.append(values_for(branch, defined, depth + 1))
        return st.one_of(branches)
    kind = schema["type"]
    if kind == "array":
        return st.lists(values_for(schema["items"], defined, depth + 1), max_size=0 if depth > 3 else 2)
    if kind == "map":
        return st.dictionaries(st.text(max_size=6), values_for(schema["values"], defined, depth + 1),
                               max_size=0 if depth > 3 else 2)
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "record":
        return st.fixed_dictionaries({f["name"]: values_for(f["type"], defined, depth + 1) for f in schema["fields"]})
    return _PRIMITIVES[kind]


def _is_record(schema: Any, defined: dict[str, Any]) -> bool:
    target = defined.get(schema, {}) if isinstance(schema, str) else schema
    return isinstance(target, dict) and target.get("type") == "record"


def _name(schema: Any) -> str:
    return schema if isinstance(schema, str) else schema["name"]


def _canonical_json(type_name: str) -> dict[str, Any]:
    return json.loads(REGISTRY.schema(type_name).canonical)


def test_the_catalogue_is_complete() -> None:
    expected = {
        "ostinato.command.Command", "ostinato.history.HistoryEvent", "ostinato.task.WorkflowTask",
        "ostinato.task.ActivityTask", "ostinato.task.QueryTask", "ostinato.visibility.VisibilityRecord",
        "ostinato.reply.Reply", "ostinato.state.MutableState", "ostinato.state.CurrentRun",
        "ostinato.cluster.ClusterSettings", "ostinato.cluster.ShardOwner",
    }
    assert expected <= set(TYPES)
    body = next(f for f in _canonical_json("ostinato.command.Command")["fields"] if f["name"] == "body")["type"]
    # the wire-contract issue's commands; + redrive (16); + update, update-with-start (18); + reset, 4 schedules (21)
    assert len(body) == 28
    event_types = json.loads(REGISTRY.schema("ostinato.history.HistoryEvent").canonical)["fields"][2]["type"]
    attributes = json.loads(REGISTRY.schema("ostinato.history.HistoryEvent").canonical)["fields"][4]["type"]
    # + RECORD_PUBLISHED (issue 22); + UPDATE_ACCEPTED, UPDATE_COMPLETED (18); + SCHEDULE_CREATED, _UPDATED,
    # _PROGRESSED (21)
    assert len(event_types["symbols"]) - 1 == len(attributes) == 47


def test_task_records_name_the_task_explicitly() -> None:
    """A worker in any language answers from these fields alone, without the SDK."""
    for name in ("ostinato.task.WorkflowTask", "ostinato.task.ActivityTask"):
        fields = {f["name"] for f in _canonical_json(name)["fields"]}
        assert {"namespace", "workflow_id", "run_id", "scheduled_event_id", "attempt"} <= fields, name


@pytest.mark.parametrize("type_name", TYPES)
def test_round_trip(type_name: str) -> None:
    @EXAMPLES
    @given(values_for(_canonical_json(type_name)))
    def check(record: dict[str, Any]) -> None:
        assert codec.decode(codec.encode(type_name, record)) == (type_name, record)

    check()


def _older_version(type_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """This type as it was before every top-level field that has a default was added."""
    source = REGISTRY.schema(type_name).source
    defaults = {f["name"]: f["default"] for f in source["fields"] if "default" in f}
    old = copy.deepcopy(_canonical_json(type_name))
    old["fields"] = [f for f in old["fields"] if f["name"] not in defaults]
    return old, defaults


@pytest.mark.parametrize("type_name", [t for t in TYPES if _older_version(t)[1]])
def test_records_written_before_fields_were_added_still_decode(type_name: str) -> None:
    old, defaults = _older_version(type_name)
    registry = SchemaRegistry()
    info = registry.add_writer_schema(old)
    parsed_old = parse_schema(old, named_schemas={}, _force=True)

    @EXAMPLES
    @given(values_for(old))
    def check(record: dict[str, Any]) -> None:
        body = io.BytesIO()
        schemaless_writer(body, parsed_old, record)
        name, decoded = registry.decode(MAGIC + info.fingerprint + body.getvalue())
        assert name == type_name
        assert decoded == {**record, **defaults}

    check()


def test_every_shipped_schema_is_released() -> None:
    missing = sorted(info.name for info in REGISTRY.schemas if info.fingerprint.hex() not in released())
    assert not missing, (
        f"changed schemas not recorded in schemas/avro/released.json: {missing}. Check the change is "
        "Avro-compatible (new fields with defaults, branches and symbols appended), then run "
        "`python -m ostinato.schemas.release`."
    )


@pytest.mark.parametrize("fingerprint", sorted(released()))
def test_every_released_version_still_decodes(fingerprint: str) -> None:
    """Records written by any version ever shipped resolve to today's schema of the same name."""
    entry = released()[fingerprint]
    writer = json.loads(entry["canonical"])
    assert codec.fingerprint(entry["canonical"]).hex() == fingerprint
    parsed = parse_schema(writer, named_schemas={}, _force=True)

    @settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(values_for(writer))
    def check(record: dict[str, Any]) -> None:
        body = io.BytesIO()
        schemaless_writer(body, parsed, record)
        name, _ = REGISTRY.decode(MAGIC + bytes.fromhex(fingerprint) + body.getvalue())
        assert name == entry["name"]

    check()


def test_our_canonical_form_is_what_fastavro_makes_of_it() -> None:
    """An independent check of the canonical form (and so of the fingerprints other languages compute)."""
    from fastavro.schema import to_parsing_canonical_form

    for info in REGISTRY.schemas:
        assert to_parsing_canonical_form(parse_schema(json.loads(info.canonical), named_schemas={})) == info.canonical


def test_event_types_and_attribute_branches_line_up() -> None:
    """event_type symbol i+1 names attributes branch i, so a reader can trust either."""
    fields = {f["name"]: f["type"] for f in _canonical_json("ostinato.history.HistoryEvent")["fields"]}
    symbols = fields["event_type"]["symbols"][1:]
    branches = [b["name"].rpartition(".")[2].removesuffix("EventAttributes") for b in fields["attributes"]]
    assert [s.replace("_", "") for s in symbols] == [b.upper() for b in branches]
