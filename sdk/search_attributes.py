"""Typed search attributes, with temporalio's names (`temporalio.common.SearchAttributeKey` and friends).

A value travels as a JSON payload whose `type` metadata names its indexed type (`Keyword`, `Int`...), as Temporal
writes it: the engine checks it against the attribute registered in the namespace, and the visibility stores index
it by that type. Datetimes travel as ISO-8601 strings with an offset.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar, cast, overload

__all__ = [
    "SearchAttributeIndexedValueType",
    "SearchAttributeKey",
    "SearchAttributePair",
    "SearchAttributeUpdate",
    "SearchAttributeValues",
    "SearchAttributes",
    "TypedSearchAttributes",
]

SearchAttributeValueType = TypeVar("SearchAttributeValueType", str, int, float, bool, datetime, Sequence[str])
_Default = TypeVar("_Default")

SearchAttributeValues = list[str] | list[int] | list[float] | list[bool] | list[datetime]
"""The values of one attribute in the deprecated dictionary form."""
SearchAttributes = Mapping[str, SearchAttributeValues]
"""The deprecated dictionary form: name to a list of values."""

JSON_ENCODING = b"json/plain"
NULL_ENCODING = b"binary/null"


class SearchAttributeIndexedValueType(IntEnum):
    """How an attribute is indexed; members and values are Temporal's (`IndexedValueType`)."""

    TEXT = 1
    KEYWORD = 2
    INT = 3
    DOUBLE = 4
    BOOL = 5
    DATETIME = 6
    KEYWORD_LIST = 7

    @property
    def metadata_type(self) -> str:
        """The name the payload's `type` metadata carries, and the registry and query language use."""
        return _METADATA_NAMES[self]

    @classmethod
    def from_metadata_type(cls, name: str) -> SearchAttributeIndexedValueType | None:
        """`KeywordList`, `INDEXED_VALUE_TYPE_KEYWORD_LIST`, `keyword_list`... to the member, or None."""
        wanted = name.upper().removeprefix("INDEXED_VALUE_TYPE_").replace("_", "")
        return next((m for m in cls if m.name.replace("_", "") == wanted), None)


_METADATA_NAMES = {
    SearchAttributeIndexedValueType.TEXT: "Text", SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int", SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool", SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


@dataclass(frozen=True)
class SearchAttributeKey(Generic[SearchAttributeValueType]):
    """The name and indexed type of a search attribute; two keys are equal when both match.

    Build one with the `for_*` constructors, e.g. `SearchAttributeKey.for_keyword("CustomerId")`.
    """

    name: str
    indexed_value_type: SearchAttributeIndexedValueType
    value_type: type[Any]

    def value_set(self, value: SearchAttributeValueType) -> SearchAttributeUpdate[SearchAttributeValueType]:
        """An update that sets this attribute (for `workflow.upsert_search_attributes`)."""
        return SearchAttributeUpdate(self, value)

    def value_unset(self) -> SearchAttributeUpdate[SearchAttributeValueType]:
        """An update that removes this attribute from the run."""
        return SearchAttributeUpdate(self, None)

    @staticmethod
    def for_text(name: str) -> SearchAttributeKey[str]:
        """A `Text` attribute: full-text, matched by words, neither ordered nor range-compared."""
        return SearchAttributeKey(name, SearchAttributeIndexedValueType.TEXT, str)

    @staticmethod
    def for_keyword(name: str) -> SearchAttributeKey[str]:
        """A `Keyword` attribute: an exact string."""
        return SearchAttributeKey(name, SearchAttributeIndexedValueType.KEYWORD, str)

    @staticmethod
    def for_int(name: str) -> SearchAttributeKey[int]:
        """An `Int` attribute (64-bit)."""
        return SearchAttributeKey(name, SearchAttributeIndexedValueType.INT, int)

    @staticmethod
    def for_float(name: str) -> SearchAttributeKey[float]:
        """A `Double` attribute."""
        return SearchAttributeKey(name, SearchAttributeIndexedValueType.DOUBLE, float)

    @staticmethod
    def for_bool(name: str) -> SearchAttributeKey[bool]:
        """A `Bool` attribute."""
        return SearchAttributeKey(name, SearchAttributeIndexedValueType.BOOL, bool)

    @staticmethod
    def for_datetime(name: str) -> SearchAttributeKey[datetime]:
        """A `Datetime` attribute; a naive datetime is taken as UTC."""
        return SearchAttributeKey(name, SearchAttributeIndexedValueType.DATETIME, datetime)

    @staticmethod
    def for_keyword_list(name: str) -> SearchAttributeKey[Sequence[str]]:
        """A `KeywordList` attribute: a list of exact strings, matched if any element matches."""
        return SearchAttributeKey(name, SearchAttributeIndexedValueType.KEYWORD_LIST, list)

    @staticmethod
    def from_metadata_type(name: str, metadata_type: str) -> SearchAttributeKey[Any] | None:
        """The key of a payload's `type` metadata (`Keyword`, `KeywordList`...), or None for an unknown type."""
        indexed = SearchAttributeIndexedValueType.from_metadata_type(metadata_type)
        return None if indexed is None else SearchAttributeKey(name, indexed, _VALUE_TYPES[indexed])


_VALUE_TYPES: dict[SearchAttributeIndexedValueType, type[Any]] = {
    SearchAttributeIndexedValueType.TEXT: str, SearchAttributeIndexedValueType.KEYWORD: str,
    SearchAttributeIndexedValueType.INT: int, SearchAttributeIndexedValueType.DOUBLE: float,
    SearchAttributeIndexedValueType.BOOL: bool, SearchAttributeIndexedValueType.DATETIME: datetime,
    SearchAttributeIndexedValueType.KEYWORD_LIST: list,
}


class SearchAttributePair(NamedTuple, Generic[SearchAttributeValueType]):
    """One attribute and its value, an element of `TypedSearchAttributes`."""

    key: SearchAttributeKey[SearchAttributeValueType]
    value: SearchAttributeValueType


@dataclass(frozen=True)
class SearchAttributeUpdate(Generic[SearchAttributeValueType]):
    """A value to set (or None: unset) for a key; made by `key.value_set(v)` and `key.value_unset()`."""

    key: SearchAttributeKey[SearchAttributeValueType]
    value: SearchAttributeValueType | None


@dataclass(frozen=True)
class TypedSearchAttributes(Collection[SearchAttributePair[Any]]):
    """An immutable collection of typed attributes, sorted by name, at most one per name."""

    search_attributes: Sequence[SearchAttributePair[Any]]
    empty: ClassVar[TypedSearchAttributes]

    def __post_init__(self) -> None:
        pairs = sorted(self.search_attributes, key=lambda p: p.key.name)
        for before, after in itertools.pairwise(pairs):
            if before.key.name == after.key.name:
                raise ValueError(f"search attribute {after.key.name!r} appears twice")
        object.__setattr__(self, "search_attributes", pairs)

    def __len__(self) -> int:
        return len(self.search_attributes)

    def __iter__(self) -> Iterator[SearchAttributePair[Any]]:
        return iter(self.search_attributes)

    def __contains__(self, key: object) -> bool:
        """Whether the collection holds `key` (same name and type)."""
        return any(k == key for k, _ in self)

    def __getitem__(self, key: SearchAttributeKey[SearchAttributeValueType]) -> SearchAttributeValueType:
        """The value of `key` (same name and type), else KeyError."""
        for k, v in self:
            if k == key:
                return cast(SearchAttributeValueType, v)
        raise KeyError(key.name)

    @overload
    def get(self, key: SearchAttributeKey[SearchAttributeValueType]) -> SearchAttributeValueType | None: ...

    @overload
    def get(self, key: SearchAttributeKey[SearchAttributeValueType],
            default: _Default) -> SearchAttributeValueType | _Default: ...

    def get(self, key: SearchAttributeKey[Any], default: Any = None) -> Any:
        """The value of `key`, or `default` when it is absent (as `dict.get`)."""
        try:
            return self[key]
        except KeyError:
            return default

    def updated(self, *search_attributes: SearchAttributePair[Any]) -> TypedSearchAttributes:
        """A copy where each pair replaces the attribute of the same name, or is added."""
        by_name = {p.key.name: p for p in self.search_attributes}
        by_name.update((p.key.name, p) for p in search_attributes)
        return TypedSearchAttributes(list(by_name.values()))


TypedSearchAttributes.empty = TypedSearchAttributes([])


# -------------------------------------------------------------------------------------------------- the wire


def check_value(key: SearchAttributeKey[Any], value: Any) -> Any:
    """The value as JSON for `key`'s type; TypeError saying what was expected if it does not fit."""
    kind = key.indexed_value_type
    if kind in (SearchAttributeIndexedValueType.TEXT, SearchAttributeIndexedValueType.KEYWORD):
        if isinstance(value, str):
            return value
    elif kind is SearchAttributeIndexedValueType.INT:
        if type(value) is int and -(2**63) <= value < 2**63:
            return value
    elif kind is SearchAttributeIndexedValueType.DOUBLE:
        if (type(value) is float and math.isfinite(value)) or (type(value) is int and abs(value) <= 2**53):
            return float(value)  # (an int past a double's range would raise OverflowError: refused instead)
    elif kind is SearchAttributeIndexedValueType.BOOL:
        if type(value) is bool:
            return value
    elif kind is SearchAttributeIndexedValueType.DATETIME:
        if isinstance(value, datetime):
            moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
            return moment.isoformat()
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes) and all(
            isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"search attribute {key.name!r} is {kind.metadata_type}: {value!r} "
                    f"({type(value).__name__}) does not fit")


def encode_value(key: SearchAttributeKey[Any], value: Any) -> dict[str, Any]:
    """The payload of one value, with its `type` metadata (Temporal's encoding)."""
    return {"metadata": {"encoding": JSON_ENCODING, "type": key.indexed_value_type.metadata_type.encode()},
            "data": json.dumps(check_value(key, value), separators=(",", ":")).encode()}


def encode_unset(key: SearchAttributeKey[Any]) -> dict[str, Any]:
    """The payload that removes an attribute: `binary/null`, still typed (Temporal's encoding)."""
    return {"metadata": {"encoding": NULL_ENCODING, "type": key.indexed_value_type.metadata_type.encode()},
            "data": b""}


def encode(attributes: TypedSearchAttributes) -> dict[str, dict[str, Any]]:
    """The payload map a start, child start or continue-as-new carries."""
    return {k.name: encode_value(k, v) for k, v in attributes}


def encode_updates(updates: Sequence[SearchAttributeUpdate[Any]]) -> dict[str, dict[str, Any]]:
    """The payload map an upsert command carries."""
    return {u.key.name: encode_unset(u.key) if u.value is None else encode_value(u.key, u.value) for u in updates}


def decode(payloads: Mapping[str, Mapping[str, Any]]) -> TypedSearchAttributes:
    """The typed view of a payload map; payloads without a known `type`, or not JSON, are left out."""
    values: dict[str, Any] = {}
    types: dict[str, str] = {}
    for name, payload in payloads.items():
        meta = payload.get("metadata") or {}
        declared = meta.get("type")
        if meta.get("encoding") != JSON_ENCODING or declared is None:
            continue
        try:
            values[name] = json.loads(payload["data"])
        except (ValueError, RecursionError):
            continue
        types[name] = declared.decode() if isinstance(declared, bytes) else str(declared)
    return from_json_values(values, types)


def from_json_values(values: Mapping[str, Any], types: Mapping[str, str]) -> TypedSearchAttributes:
    """The typed view of JSON values and their type names (a visibility row's `search_attributes` and
    `search_attribute_types`); values of unknown type, or that do not fit it, are left out."""
    pairs: list[SearchAttributePair[Any]] = []
    for name, value in values.items():
        key = SearchAttributeKey.from_metadata_type(name, str(types.get(name, "")))
        if key is None or value is None:
            continue
        if key.indexed_value_type is SearchAttributeIndexedValueType.DATETIME:
            try:
                moment = datetime.fromisoformat(value)
            except (TypeError, ValueError):
                continue
            value = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        elif key.indexed_value_type is SearchAttributeIndexedValueType.DOUBLE and type(value) is int:
            if abs(value) > 2**53:
                continue
            value = float(value)
        try:
            check_value(key, value)
        except TypeError:
            continue
        pairs.append(SearchAttributePair(key, value))
    return TypedSearchAttributes(pairs)


def to_payloads(attributes: TypedSearchAttributes | Mapping[str, Any] | None, encode_untyped: Any,
                stacklevel: int = 3) -> dict[str, dict[str, Any]]:
    """The payload map of a start's attributes: typed ones with their `type` metadata; the deprecated dictionary
    form (`{name: value}`) through `encode_untyped(value) -> payload`, typed by the engine from the registry."""
    if attributes is None:
        return {}
    if isinstance(attributes, TypedSearchAttributes):
        return encode(attributes)
    warnings.warn("dictionary search attributes are deprecated: use TypedSearchAttributes", DeprecationWarning,
                  stacklevel=stacklevel)  # the caller's caller: user code
    return {name: encode_untyped(value) for name, value in attributes.items()}
