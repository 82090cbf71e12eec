"""The default payload converter: what each kind of value becomes on the wire, and how it comes back."""

from __future__ import annotations

import enum
import json
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ostinato.schemas.payloads import ENCODING, ENCODING_BINARY, ENCODING_JSON, ENCODING_NULL, Payload
from ostinato.sdk.converter import DefaultPayloadConverter, PayloadConversionError

converter = DefaultPayloadConverter()


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Address:
    street: str
    zip_code: str | None = None


@dataclass
class Customer:
    id: uuid.UUID
    name: str
    joined: datetime
    colour: Colour
    addresses: list[Address] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)
    tags: frozenset[str] = frozenset()
    balance: Decimal = Decimal("0")


class FakeModel:
    """Quacks like a pydantic v2 model: `model_dump(mode="json")` out, `model_validate` in."""

    def __init__(self, name: str, when: date) -> None:
        self.name, self.when = name, when

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        assert mode == "json", "the converter must ask for JSON-safe output"
        return {"name": self.name, "when": self.when.isoformat()}

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> FakeModel:
        return cls(data["name"], date.fromisoformat(data["when"]))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeModel) and (self.name, self.when) == (other.name, other.when)

    __hash__ = None  # type: ignore[assignment]


def round_trip(value: Any, hint: Any = None) -> Any:
    return converter.from_payload(converter.to_payload(value), hint)


def test_none_is_binary_null() -> None:
    payload = converter.to_payload(None)
    assert payload == Payload({ENCODING: ENCODING_NULL}, b"")
    assert converter.from_payload(payload, int) is None


@pytest.mark.parametrize("value", [b"", b"\x00\xffraw", bytearray(b"ba"), memoryview(b"mv")])
def test_bytes_pass_through_unchanged(value: bytes) -> None:
    payload = converter.to_payload(value)
    assert payload.metadata == {ENCODING: ENCODING_BINARY}
    assert payload.data == bytes(value)
    assert converter.from_payload(payload) == bytes(value)


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        ("héllo", '"héllo"'),
        (42, "42"),
        (-1.5, "-1.5"),
        (True, "true"),
        ([1, "a", None], '[1,"a",null]'),
        ({"a": {"b": [1]}}, '{"a":{"b":[1]}}'),
    ],
)
def test_json_values_are_compact_utf8_json(value: Any, wire: str) -> None:
    payload = converter.to_payload(value)
    assert payload.metadata == {ENCODING: ENCODING_JSON}
    assert payload.data == wire.encode()
    assert converter.from_payload(payload) == value


def test_nested_dataclass_round_trip_with_type_hint() -> None:
    customer = Customer(
        id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        name="Ada",
        joined=datetime(2024, 5, 17, 9, 30, 1, 250, tzinfo=UTC),
        colour=Colour.BLUE,
        addresses=[Address("1 Main St", "12345"), Address("2 Side St")],
        scores={1: 0.5, 2: 3.0},
        tags=frozenset({"b", "a"}),
        balance=Decimal("1234567890.000000001"),
    )
    raw = json.loads(converter.to_payload(customer).data)
    assert raw["joined"] == "2024-05-17T09:30:01.000250+00:00"
    assert raw["id"] == "12345678-1234-5678-1234-567812345678"
    assert raw["colour"] == "blue"
    assert raw["tags"] == ["a", "b"]  # sorted, so every worker writes the same bytes
    assert raw["balance"] == "1234567890.000000001"  # a string: no float rounding
    assert round_trip(customer, Customer) == customer


def test_without_a_hint_a_dataclass_comes_back_as_a_dict() -> None:
    assert round_trip(Address("x")) == {"street": "x", "zip_code": None}


def test_dataclass_decoding_ignores_unknown_fields_and_uses_defaults() -> None:
    payload = Payload({ENCODING: ENCODING_JSON}, b'{"street": "x", "added_later": 1}')
    assert converter.from_payload(payload, Address) == Address("x")


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (datetime(2030, 1, 2, 3, 4, 5), datetime),
        (date(2030, 1, 2), date),
        (timedelta(hours=1, microseconds=5), timedelta),
        (uuid.uuid4(), uuid.UUID),
        (Decimal("0.1"), Decimal),
        (Colour.RED, Colour),
        ({1, 2, 3}, set[int]),
        ((1, "a"), tuple[int, str]),
        ([Address("a")], list[Address]),
        (None, Address | None),
        (Address("a"), Address | None),
        (b"\x00nested", bytes),
        (3, float),
    ],
)
def test_typed_round_trips(value: Any, hint: Any) -> None:
    result = round_trip(value, hint)
    assert result == value
    assert type(result) is type(value) or (hint is float and type(result) is float)


def test_bytes_inside_a_structure_are_base64() -> None:
    assert json.loads(converter.to_payload({"blob": b"\x00\x01"}).data) == {"blob": "AAE="}
    assert round_trip({"blob": b"\x00\x01"}, dict[str, bytes]) == {"blob": b"\x00\x01"}


def test_duck_typed_pydantic_model_round_trip() -> None:
    model = FakeModel("launch", date(2031, 7, 1))
    payload = converter.to_payload(model)
    assert json.loads(payload.data) == {"name": "launch", "when": "2031-07-01"}
    assert converter.from_payload(payload, FakeModel) == model
    assert converter.from_payload(converter.to_payload([model]), list[FakeModel]) == [model]


def test_real_pydantic_model_round_trip() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Order(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        id: uuid.UUID
        placed: datetime
        total: Decimal

    order = Order(id=uuid.uuid4(), placed=datetime(2024, 1, 1, tzinfo=UTC), total=Decimal("9.99"))
    assert round_trip(order, Order) == order


def test_to_and_from_payloads_for_argument_lists() -> None:
    args = [None, b"raw", Address("a"), 7]
    payloads = converter.to_payloads(args)
    assert [p.encoding for p in payloads] == [ENCODING_NULL, ENCODING_BINARY, ENCODING_JSON, ENCODING_JSON]
    assert converter.from_payloads(payloads, [None, bytes, Address, int]) == args
    assert converter.from_payloads(payloads)[2] == {"street": "a", "zip_code": None}
    with pytest.raises(PayloadConversionError, match="4 payloads but 3 type hints"):
        converter.from_payloads(payloads, [None, None, None])


def test_unserialisable_object_names_its_type() -> None:
    with pytest.raises(PayloadConversionError, match=r"a _thread\.lock has no JSON form") as info:
        converter.to_payload({"lock": threading.Lock()})
    assert "dict" in str(info.value)  # the value the caller passed


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {(1, 2): "tuple key"}])
def test_values_json_cannot_represent_are_refused(value: Any) -> None:
    with pytest.raises(PayloadConversionError):
        converter.to_payload(value)


def test_circular_structure_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(PayloadConversionError, match="list"):
        converter.to_payload(loop)


@pytest.mark.parametrize(
    ("data", "hint"),
    [(b'"x"', int), (b'{"zip_code": "1"}', Address), (b"[1]", Address), (b'"purple"', Colour), (b'"nope"', date)],
)
def test_payload_that_does_not_fit_the_hint_raises_the_typed_error(data: bytes, hint: Any) -> None:
    with pytest.raises(PayloadConversionError, match="cannot read payload as"):
        converter.from_payload(Payload({ENCODING: ENCODING_JSON}, data), hint)


def test_unknown_encoding_and_broken_json_raise_the_typed_error() -> None:
    with pytest.raises(PayloadConversionError, match="binary/encrypted"):
        converter.from_payload(Payload({ENCODING: b"binary/encrypted"}, b"..."))
    with pytest.raises(PayloadConversionError, match="not valid JSON"):
        converter.from_payload(Payload({ENCODING: ENCODING_JSON}, b"{"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


@given(json_values)
def test_json_values_round_trip(value: Any) -> None:
    payload = converter.to_payload(value)
    assert payload.encoding == (ENCODING_NULL if value is None else ENCODING_JSON)
    assert converter.from_payload(payload) == value
    assert converter.to_payload(converter.from_payload(payload)) == payload  # same value, same bytes
