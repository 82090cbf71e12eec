"""Payload converters: Python values to payloads and back (None, raw bytes, and JSON for everything else)."""

from __future__ import annotations

import base64
import collections.abc as abc
import dataclasses
import enum
import functools
import json
import types
import typing
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, ClassVar

from ostinato.schemas.payloads import ENCODING, ENCODING_BINARY, ENCODING_JSON, ENCODING_NULL, Payload

_NONE_TYPE = type(None)
_LIST_ORIGINS = (list, abc.Sequence, abc.MutableSequence, abc.Collection, abc.Iterable)
_SET_ORIGINS = (set, frozenset, abc.Set, abc.MutableSet)
_DICT_ORIGINS = (dict, abc.Mapping, abc.MutableMapping)
_FAILURES = (ValueError, TypeError, KeyError)


class PayloadConversionError(ValueError):
    """A value cannot become a payload, or a payload cannot become the requested type."""


class PayloadConverter(ABC):
    """Turns values into payloads and back. Subclass it to change how an application's values travel.

    Type hints are classes or typing forms (`Order`, `list[Order]`, `Order | None`); `None` means "whatever the
    payload holds", e.g. a dict for JSON objects.
    """

    @abstractmethod
    def to_payload(self, value: Any) -> Payload: ...

    @abstractmethod
    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any: ...

    def to_payloads(self, values: Sequence[Any]) -> list[Payload]:
        """One payload per argument, so each can be decoded (and offloaded) on its own."""
        return [self.to_payload(v) for v in values]

    def from_payloads(self, payloads: Sequence[Payload], type_hints: Sequence[Any] | None = None) -> list[Any]:
        hints = [None] * len(payloads) if type_hints is None else list(type_hints)
        if len(hints) != len(payloads):
            raise PayloadConversionError(f"got {len(payloads)} payloads but {len(hints)} type hints")
        return [self.from_payload(p, h) for p, h in zip(payloads, hints, strict=True)]


class DefaultPayloadConverter(PayloadConverter):
    """None as `binary/null`, bytes as `binary/plain`, anything else as compact UTF-8 JSON (`json/plain`).

    JSON understands dataclasses, pydantic v2 models (anything with `model_dump`/`model_validate`), datetime,
    date, time (ISO 8601), timedelta (seconds), UUID and Decimal (strings, so no precision is lost), Enum (its
    value), sets (sorted lists, so every worker writes the same bytes) and bytes nested in a structure (base64).
    NaN and infinities are refused: other languages' JSON parsers reject them.
    """

    # Set by `ostinato.sdk.converter_composite`: the three encodings above as Temporal's EncodingPayloadConverters.
    default_encoding_payload_converters: ClassVar[tuple[Any, ...]] = ()

    def to_payload(self, value: Any) -> Payload:
        if value is None:
            return Payload({ENCODING: ENCODING_NULL}, b"")
        if isinstance(value, bytes | bytearray | memoryview):
            return Payload({ENCODING: ENCODING_BINARY}, bytes(value))
        try:
            text = json.dumps(value, default=_to_json, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            data = text.encode()
        except (*_FAILURES, RecursionError) as exc:
            raise PayloadConversionError(
                f"cannot convert a {_type_name(type(value))} to JSON: {exc}. Pass a JSON value, a dataclass, "
                "a pydantic model or bytes, or give the client a PayloadConverter that knows this type"
            ) from exc
        return Payload({ENCODING: ENCODING_JSON}, data)

    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any:
        encoding = payload.encoding
        if encoding == ENCODING_NULL:
            return None
        if encoding == ENCODING_BINARY:
            return payload.data
        if encoding != ENCODING_JSON:
            raise PayloadConversionError(
                f"cannot convert a payload with encoding {encoding!r}; if a codec or the blob store wrote it, "
                "decode it with the same codecs and resolve blob references first"
            )
        try:
            value = json.loads(payload.data)
        except ValueError as exc:
            raise PayloadConversionError(f"payload marked {ENCODING_JSON!r} is not valid JSON: {exc}") from exc
        try:
            return _from_json(value, type_hint)
        except _FAILURES as exc:
            raise PayloadConversionError(f"cannot read payload as {_type_name(type_hint)}: {exc}") from exc


def _to_json(obj: Any) -> Any:
    """`json.dumps` calls this for what it does not know; what it returns is encoded in turn (so it may nest)."""
    model_dump = getattr(obj, "model_dump", None)
    if callable(model_dump) and not isinstance(obj, type):
        return model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Shallow, unlike asdict(): nested values come back here, and nothing is deep-copied on the way.
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, datetime | date | time):
        return obj.isoformat()
    if isinstance(obj, timedelta):
        return obj.total_seconds()
    if isinstance(obj, uuid.UUID | Decimal):
        return str(obj)
    if isinstance(obj, set | frozenset):
        try:
            return sorted(obj)
        except TypeError:  # mixed element types: any order, still a list
            return list(obj)
    if isinstance(obj, bytes | bytearray | memoryview):
        return base64.b64encode(obj).decode("ascii")
    raise TypeError(f"a {_type_name(type(obj))} has no JSON form")


def _from_json(value: Any, hint: Any) -> Any:
    """Rebuild `hint` from a decoded JSON value; raises ValueError/TypeError/KeyError when it does not fit."""
    if hint is None or hint is Any or hint is object:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _from_json_union(value, args)
    if origin is typing.Annotated:
        return _from_json(value, args[0])
    if origin is typing.Literal:
        return value
    if origin is not None:
        return _from_json_generic(value, origin, args)
    if not isinstance(hint, type):  # TypeVar, NewType, unresolved forward reference: nothing to rebuild
        return value
    model_validate = getattr(hint, "model_validate", None)
    if callable(model_validate):
        return model_validate(value)
    if dataclasses.is_dataclass(hint):
        return _from_json_dataclass(value, hint)
    return _from_json_scalar(value, hint)


def _from_json_union(value: Any, args: tuple[Any, ...]) -> Any:
    if value is None and _NONE_TYPE in args:
        return None
    errors = []
    for arg in args:
        if arg is _NONE_TYPE:
            continue
        try:
            return _from_json(value, arg)
        except _FAILURES as exc:
            errors.append(f"{_type_name(arg)}: {exc}")
    raise PayloadConversionError(f"value fits none of the union's types ({'; '.join(errors)})")


def _from_json_generic(value: Any, origin: Any, args: tuple[Any, ...]) -> Any:
    arg = args[0] if args else None
    if origin is tuple:
        items = _expect(value, list)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_json(v, args[0]) for v in items)
        if not args:
            return tuple(items)
        return tuple(_from_json(v, a) for v, a in zip(items, args, strict=True))
    if origin in _LIST_ORIGINS:
        return [_from_json(v, arg) for v in _expect(value, list)]
    if origin in _SET_ORIGINS:
        members = (_from_json(v, arg) for v in _expect(value, list))
        return frozenset(members) if origin is frozenset else set(members)
    if origin in _DICT_ORIGINS:
        key_hint, value_hint = args or (None, None)
        return {_from_json_key(k, key_hint): _from_json(v, value_hint) for k, v in _expect(value, dict).items()}
    return _from_json(value, origin)  # a user generic such as Box[int]: rebuild the class itself


def _from_json_key(key: str, hint: Any) -> Any:
    # JSON object keys are always strings; dict[int, ...] was written with its int keys turned into strings.
    if hint is int or hint is float:
        return hint(key)
    return _from_json(key, hint)


@functools.lru_cache(maxsize=512)
def _field_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError):  # annotations naming something not importable here
        return {f.name: f.type for f in dataclasses.fields(cls) if not isinstance(f.type, str)}


def _from_json_dataclass(value: Any, cls: type) -> Any:
    fields = _expect(value, dict)
    hints = _field_hints(cls)
    # Unknown keys are ignored so a worker with an older dataclass still reads what a newer one wrote.
    kwargs = {
        f.name: _from_json(fields[f.name], hints.get(f.name))
        for f in dataclasses.fields(cls)
        if f.init and f.name in fields
    }
    return cls(**kwargs)


def _from_json_scalar(value: Any, hint: type) -> Any:
    if issubclass(hint, enum.Enum):
        return hint(value)
    if issubclass(hint, datetime | date | time):  # datetime, date and time each parse their own ISO form
        return hint.fromisoformat(_expect(value, str))
    if issubclass(hint, uuid.UUID):
        return hint(_expect(value, str))
    if issubclass(hint, Decimal):
        return hint(value if isinstance(value, str) else str(_expect(value, int | float)))
    if issubclass(hint, timedelta):
        return hint(seconds=_expect(value, int | float))
    if issubclass(hint, bytes | bytearray):
        return hint(base64.b64decode(_expect(value, str), validate=True))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (tuple, set, frozenset) and isinstance(value, list):
        return hint(value)
    if isinstance(value, hint):
        return value
    raise PayloadConversionError(f"expected {_type_name(hint)}, got JSON {type(value).__name__} {value!r:.60}")


def _expect(value: Any, kind: Any) -> Any:
    if not isinstance(value, kind):
        raise PayloadConversionError(f"expected a JSON {_type_name(kind)}, got {type(value).__name__}")
    return value


def _type_name(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__qualname__ if hint.__module__ == "builtins" else f"{hint.__module__}.{hint.__qualname__}"
    return repr(hint)
