"""Custom search attributes against the namespace's registry: what a start, child start, continue-as-new or upsert
may set, and the `type` metadata their payloads carry once accepted.

A registry maps attribute names to their types (`Keyword`, `Text`, `Int`, `Double`, `Bool`, `Datetime`,
`KeywordList`). A cluster passes every namespace's registry (possibly empty) in `Config.search_attributes`, so an
unregistered name or a value of the wrong type is refused with a message that says which and why; None (the core
on its own, the default time-skipping environment) checks nothing, and values keep whatever type they carry.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

Record = dict[str, Any]

TYPES = ("Keyword", "Text", "Int", "Double", "Bool", "Datetime", "KeywordList")
# The attributes every run has (the query language's system attributes, and Temporal's predefined ones): never
# registered nor set by a workflow.
BUILT_IN = frozenset({"WorkflowId", "RunId", "WorkflowType", "ExecutionStatus", "StartTime", "CloseTime",
                      "ExecutionTime", "ExecutionDuration", "TaskQueue", "HistoryLength", "HistorySizeBytes",
                      "StateTransitionCount", "ParentWorkflowId", "ParentRunId", "RootWorkflowId", "RootRunId",
                      "TemporalChangeVersion", "BinaryChecksums", "BuildIds", "BatcherNamespace", "BatcherUser",
                      "TemporalScheduledStartTime", "TemporalScheduledById", "TemporalSchedulePaused",
                      "TemporalNamespaceDivision", "NamespaceId"})
_JSON = b"json/plain"
_NULL = b"binary/null"
MAX_NAME = 64


def type_name(text: str) -> str | None:
    """`keyword`, `KEYWORD_LIST`, `KeywordList`, `INDEXED_VALUE_TYPE_INT`... to the registry's name, or None."""
    wanted = text.upper().removeprefix("INDEXED_VALUE_TYPE_").replace("_", "")
    return next((t for t in TYPES if t.upper() == wanted), None)


def name_problem(name: str) -> str | None:
    """Why `name` cannot be registered as a custom attribute, or None."""
    if not name or len(name) > MAX_NAME or not (name[0].isascii() and (name[0].isalpha() or name[0] == "_")) or \
            not all(ch.isascii() and (ch.isalnum() or ch == "_") for ch in name):
        return (f"{name!r} is not a search attribute name: 1-{MAX_NAME} of [A-Za-z0-9_], not starting with a digit "
                "(the query language must be able to name it)")
    if name in BUILT_IN:
        return f"{name} is a built-in search attribute; it needs no registration"
    return None


def value_problem(sa_type: str, value: Any) -> str | None:
    """Why a decoded JSON value does not fit `sa_type`, or None."""
    ok: bool
    if sa_type in ("Keyword", "Text"):
        ok = isinstance(value, str)
    elif sa_type == "Int":
        ok = type(value) is int and -(2**63) <= value < 2**63
    elif sa_type == "Double":
        # an int past a double's range would raise OverflowError in isfinite: refused, not raised
        ok = (type(value) is float and math.isfinite(value)) or (type(value) is int and abs(value) <= 2**53)
    elif sa_type == "Bool":
        ok = type(value) is bool
    elif sa_type == "Datetime":
        ok = isinstance(value, str) and _is_datetime(value)
    else:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if ok:
        return None
    expected = {"Keyword": "a string", "Text": "a string", "Int": "a 64-bit integer", "Double": "a finite number",
                "Bool": "true or false", "Datetime": "an ISO-8601 date-time string",
                "KeywordList": "a list of strings"}[sa_type]
    return f"expected {expected}, not {json.dumps(value)}"


# ISO-8601 as the stores read it (`datetime.fromisoformat`), checked without a clock module: the core has none.
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,]\d{1,9})?)?"
                       r"(?:Z|[+-]\d{2}(?::?\d{2}(?::?\d{2})?)?)?)?")


def _is_datetime(text: str) -> bool:
    m = _DATETIME.fullmatch(text)
    if m is None:
        return False
    month, day, hour, minute, second = (int(g or 0) for g in m.groups()[1:])
    return 1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59 and second <= 59


def checked(payloads: Mapping[str, Record], registry: Mapping[str, str] | None,
            namespace: str) -> tuple[str | None, dict[str, Record]]:
    """`(problem, payloads)`: why the map cannot be set (and the input), or None and the payloads with their
    registered `type` metadata (a payload that had none gains it; `binary/null` unsets and stays as it is)."""
    if registry is None:
        return None, dict(payloads)
    out: dict[str, Record] = {}
    for name, payload in payloads.items():
        if name in BUILT_IN:
            return f"search attribute {name} is built in: the engine sets it, a workflow or client cannot", {}
        sa_type = registry.get(name)
        if sa_type is None:
            known = ", ".join(sorted(registry)) or "none"
            return (f"search attribute {name!r} is not registered in namespace {namespace!r} (registered: {known}); "
                    "register it first: `ostinato operator search-attribute create --name "
                    f"{name} --type Keyword` (or POST /api/v1/namespaces/{namespace}/search-attributes)"), {}
        meta = payload["metadata"]
        declared = meta.get("type")
        if declared is not None and type_name(bytes(declared).decode(errors="replace")) != sa_type:
            return (f"search attribute {name!r} is registered as {sa_type}, but the value is typed "
                    f"{bytes(declared).decode(errors='replace')}"), {}
        encoding = meta.get("encoding")
        if encoding == _NULL:
            out[name] = payload
            continue
        if encoding != _JSON:
            return (f"search attribute {name!r} must be a plain JSON payload (a codec does not apply to search "
                    f"attributes), not {bytes(encoding or b'').decode(errors='replace') or 'no encoding'}"), {}
        try:
            value = json.loads(payload["data"])
        except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than the interpreter's stack
            return f"search attribute {name!r}: the payload is not valid JSON", {}
        data = payload["data"]
        if declared is None and isinstance(value, list) and (not value or sa_type != "KeywordList"):
            # temporalio's dictionary form gives a list of values: none unsets, one is the value.
            if not value:
                out[name] = {"metadata": {"encoding": _NULL, "type": sa_type.encode()}, "data": b""}
                continue
            if len(value) == 1:
                value = value[0]
                data = json.dumps(value, separators=(",", ":")).encode()
        if (problem := value_problem(sa_type, value)) is not None:
            return f"search attribute {name!r} is {sa_type}: {problem}", {}
        out[name] = {"metadata": {**meta, "type": sa_type.encode()}, "data": data}
    return None, out
