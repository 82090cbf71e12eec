"""OpenSearch documents for visibility records and the query language (query.py) as OpenSearch queries and sorts."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from ostinato.connectors.query import (
    DEFAULT_ORDER,
    And,
    Attribute,
    AttrType,
    Between,
    Comparison,
    Expr,
    In,
    IsNull,
    Not,
    Or,
    OrderKey,
    Query,
    SearchAttributeType,
    StartsWith,
    SystemType,
    index_values,
)
from ostinato.connectors.visibility_sqlite import decode_search_attributes
from ostinato.schemas.codec import decode
from ostinato.schemas.keys import run_key

Json = dict[str, Any]
_COLUMNS = ("workflow_id", "run_id", "workflow_type", "task_queue", "status", "start_time_ms", "execution_time_ms",
            "close_time_ms", "history_length", "version")

# Custom search attributes live in one object per type, so a run's `Amount` indexed as Int is simply absent for a
# query that types `Amount` as Keyword: the same rule as the SQLite store's `(name, type, value)` rows.
SA_OBJECTS: dict[SearchAttributeType, str] = {
    SearchAttributeType.KEYWORD: "sa_keyword",
    SearchAttributeType.TEXT: "sa_text",  # the word set (query.words), as keywords: exact \w+ case-folded semantics
    SearchAttributeType.INT: "sa_int",
    SearchAttributeType.DOUBLE: "sa_double",
    SearchAttributeType.BOOL: "sa_bool",
    SearchAttributeType.DATETIME: "sa_datetime",  # dates given as epoch milliseconds, like query.datetime_ms
    SearchAttributeType.KEYWORD_LIST: "sa_keyword_list",
}
_FIELD_TYPES: dict[AttrType, str] = {
    SearchAttributeType.KEYWORD: "keyword", SearchAttributeType.TEXT: "keyword", SearchAttributeType.INT: "long",
    SearchAttributeType.DOUBLE: "double", SearchAttributeType.BOOL: "boolean", SearchAttributeType.DATETIME: "date",
    SearchAttributeType.KEYWORD_LIST: "keyword", SystemType.STATUS: "keyword", SystemType.DURATION: "long",
}
# Lucene rejects a document with a term over 32766 bytes; a longer custom keyword is kept in the row, unindexed.
_KEYWORD_IGNORE_ABOVE = 8191
_SYSTEM_KEYWORDS = ("namespace", "workflow_id", "run_id", "workflow_type", "task_queue", "status")
_SYSTEM_LONGS = ("start_time_ms", "execution_time_ms", "close_time_ms", "execution_duration_ms", "history_length",
                 "version")


def mappings() -> Json:
    """The index mappings: typed system fields, one dynamic object per custom attribute type, the raw record."""
    properties: Json = {name: {"type": "keyword"} for name in _SYSTEM_KEYWORDS}
    properties.update({name: {"type": "long"} for name in _SYSTEM_LONGS})
    properties["record"] = {"type": "binary"}  # the Avro record, not indexed: rows are rebuilt from it
    templates = []
    for sa_type, obj in SA_OBJECTS.items():
        properties[obj] = {"type": "object", "dynamic": True}
        mapping: Json = {"type": _FIELD_TYPES[sa_type]}
        if mapping["type"] == "keyword":
            mapping["ignore_above"] = _KEYWORD_IGNORE_ABOVE
        elif mapping["type"] == "date":  # a real date to OpenSearch (and its dashboards), written and queried as
            mapping["format"] = "epoch_millis"  # the milliseconds both stores compare, so they stay in step
        templates.append({obj: {"path_match": f"{obj}.*", "mapping": mapping}})
    return {"dynamic": "strict", "dynamic_templates": templates, "properties": properties}


def field_name(name: str) -> str:
    """A search attribute name as one field-name segment: ASCII letters and digits stay, anything else (dots,
    which would nest objects, and `_` itself, so the mapping is injective) becomes `_<hex code point>_`."""
    return "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):x}_" for c in name)


def sa_field(sa_type: SearchAttributeType, name: str) -> str:
    return f"{SA_OBJECTS[sa_type]}.{field_name(name)}"


def field(attr: Attribute) -> str:
    """The indexed field of an attribute of the query."""
    if attr.system is not None:
        return attr.system.column
    assert isinstance(attr.type, SearchAttributeType)
    return sa_field(attr.type, attr.name)


def index_value(value: Any) -> Any:
    """A comparable value as indexed and as queried: -0.0 becomes 0.0, since Lucene's doubles tell them apart."""
    return value + 0.0 if isinstance(value, float) else value


# ---------------------------------------------------------------------------------------------------- filters


def where(expr: Expr | None) -> Json:
    """A query that matches exactly the runs `query.matches` accepts (bool queries are two-valued, like it)."""
    if expr is None:
        return {"match_all": {}}
    if isinstance(expr, And):
        return {"bool": {"filter": [where(e) for e in expr.items]}}
    if isinstance(expr, Or):
        return {"bool": {"should": [where(e) for e in expr.items], "minimum_should_match": 1}}
    if isinstance(expr, Not):
        return {"bool": {"must_not": [where(expr.item)]}}
    return _predicate(expr)


def _predicate(expr: Comparison | In | Between | StartsWith | IsNull) -> Json:
    name = field(expr.attr)
    exists = {"exists": {"field": name}}
    if isinstance(expr, IsNull):
        return exists if expr.negated else {"bool": {"must_not": [exists]}}
    if expr.attr.type is SearchAttributeType.TEXT:
        assert isinstance(expr, Comparison)
        all_words = {"bool": {"filter": [{"term": {name: w}} for w in expr.value]}}
        return all_words if expr.op == "=" else _present_and_not(exists, all_words)
    if isinstance(expr, Comparison):
        value = index_value(expr.value)
        if expr.op == "=":
            return {"term": {name: value}}
        if expr.op == "!=":  # present, and no value (of a KeywordList: no element) equals it
            return _present_and_not(exists, {"term": {name: value}})
        return {"range": {name: {_RANGE_OPS[expr.op]: value}}}
    if isinstance(expr, In):
        terms = {"terms": {name: [index_value(v) for v in expr.values]}}
        return _present_and_not(exists, terms) if expr.negated else terms
    if isinstance(expr, Between):
        return {"range": {name: {"gte": index_value(expr.low), "lte": index_value(expr.high)}}}
    # A keyword prefix query is case-sensitive and has no wildcards: code point prefix, like str.startswith.
    return exists if expr.prefix == "" else {"prefix": {name: {"value": expr.prefix}}}


_RANGE_OPS = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}


def _present_and_not(exists: Json, query: Json) -> Json:
    return {"bool": {"filter": [exists], "must_not": [query]}}


# ---------------------------------------------------------------------------------------------------- order


def sort(query: Query) -> list[Json]:
    """The sort of `query.sort_key`: its ORDER BY (absent values last both ways), then WorkflowId, RunId.

    Caveat: OpenSearch stands in Long.MAX_VALUE (ASC) or Long.MIN_VALUE (DESC) for a missing long, so an Int
    attribute holding exactly that value ties with the runs that lack it (then breaks on WorkflowId, RunId).
    """
    keys: list[OrderKey] = list(query.order_by or DEFAULT_ORDER)
    spec: list[Json] = [{field(k.attr): {"order": "desc" if k.descending else "asc", "missing": "_last",
                                         "unmapped_type": _FIELD_TYPES.get(k.attr.type, "keyword")}} for k in keys]
    return [*spec, {"workflow_id": {"order": "asc"}}, {"run_id": {"order": "asc"}}]


# ---------------------------------------------------------------------------------------------------- documents


def document_id(namespace: str, workflow_id: str, run_id: str) -> str:
    """The run key, or its hash when longer than the 512 bytes `_id` allows (a hash has no `/`, a key has two)."""
    key = run_key(namespace, workflow_id, run_id)
    return key if len(key.encode()) <= 512 else "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def document(rec: Mapping[str, Any], value: bytes, registry: Mapping[str, SearchAttributeType]) -> dict[str, Any]:
    """The indexed document of a record: system fields, each search attribute as `index_values` gives it."""
    close = rec["close_time_ms"]
    doc: dict[str, Any] = {c: rec[c] for c in _COLUMNS}
    doc.update(namespace=rec["namespace"], record=base64.b64encode(value).decode(),
               execution_duration_ms=None if close is None else close - rec["execution_time_ms"])
    for name, (sa_type, raw) in decode_search_attributes(rec["search_attributes"], registry).items():
        values = [index_value(v) for v in index_values(sa_type, raw)]
        if values:  # no value (an empty list, a wordless text, a misfit) means absent, as in SQLite
            obj, leaf = sa_field(sa_type, name).split(".", 1)
            doc.setdefault(obj, {})[leaf] = values if len(values) > 1 else values[0]
    return doc


def row_from_record(value: bytes, registry: Mapping[str, SearchAttributeType]) -> dict[str, Any]:
    """The row of `SqliteVisibilityStore`, rebuilt from the raw record exactly as it does."""
    _, rec = decode(value)
    decoded = decode_search_attributes(rec["search_attributes"], registry)
    row = {c: rec[c] for c in _COLUMNS}
    row.update(
        namespace=rec["namespace"], history_size_bytes=rec["history_size_bytes"], parent=rec["parent"],
        first_execution_run_id=rec["first_execution_run_id"], memo=rec["memo"],
        search_attributes={name: v for name, (_, v) in decoded.items()},
        search_attribute_types={name: t for name, (t, _) in decoded.items()},
    )
    return row
