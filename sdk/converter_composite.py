"""Temporal's way of composing payload converters: `EncodingPayloadConverter`s, each owning one encoding, tried in
order by a `CompositePayloadConverter` (`to_payload`: the first that accepts the value; `from_payload`: the one
named by the payload's encoding). The default three are the `DefaultPayloadConverter`'s encodings, so a custom
converter is `CompositePayloadConverter(Mine(), *DefaultPayloadConverter.default_encoding_payload_converters)`, as
in Temporal's custom-converter sample."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from ostinato.schemas.payloads import ENCODING_BINARY, ENCODING_JSON, ENCODING_NULL, Payload
from ostinato.sdk.converter import DefaultPayloadConverter, PayloadConversionError, PayloadConverter


class EncodingPayloadConverter(ABC):
    """Converts the values it knows to payloads of its `encoding` (`to_payload` returns None for the others)."""

    @property
    @abstractmethod
    def encoding(self) -> str: ...

    @abstractmethod
    def to_payload(self, value: Any) -> Payload | None: ...

    @abstractmethod
    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any: ...


class _DefaultEncoding(EncodingPayloadConverter):
    """One of the default converter's encodings, delegating to it (so its JSON rules hold as they are)."""

    _default = DefaultPayloadConverter()

    def __init__(self, encoding: bytes, accepts: Callable[[Any], bool]) -> None:
        self._encoding = encoding
        self._accepts = accepts

    @property
    def encoding(self) -> str:
        return self._encoding.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return self._default.to_payload(value) if self._accepts(value) else None

    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any:
        return self._default.from_payload(payload, type_hint)


class BinaryNullPayloadConverter(_DefaultEncoding):
    def __init__(self) -> None:
        super().__init__(ENCODING_NULL, lambda value: value is None)


class BinaryPlainPayloadConverter(_DefaultEncoding):
    def __init__(self) -> None:
        super().__init__(ENCODING_BINARY, lambda value: isinstance(value, bytes | bytearray | memoryview))


class JSONPlainPayloadConverter(_DefaultEncoding):
    def __init__(self) -> None:
        super().__init__(ENCODING_JSON, lambda value: True)


DEFAULT_ENCODING_PAYLOAD_CONVERTERS: tuple[EncodingPayloadConverter, ...] = (
    BinaryNullPayloadConverter(), BinaryPlainPayloadConverter(), JSONPlainPayloadConverter())


class CompositePayloadConverter(PayloadConverter):
    """Tries `converters` in order; with none given, the default three (None, bytes, JSON)."""

    def __init__(self, *converters: EncodingPayloadConverter) -> None:
        self.converters = converters or DEFAULT_ENCODING_PAYLOAD_CONVERTERS
        self._by_encoding = {c.encoding.encode(): c for c in self.converters}

    def to_payload(self, value: Any) -> Payload:
        for converter in self.converters:
            payload = converter.to_payload(value)
            if payload is not None:
                return payload
        raise PayloadConversionError(f"no payload converter accepts a {type(value).__name__} (tried "
                                     f"{', '.join(c.encoding for c in self.converters)})")

    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any:
        converter = self._by_encoding.get(payload.encoding or b"")
        if converter is None:
            raise PayloadConversionError(f"no payload converter for encoding {payload.encoding!r}")
        return converter.from_payload(payload, type_hint)


# Temporal's `DefaultPayloadConverter.default_encoding_payload_converters`, to compose a custom converter with.
DefaultPayloadConverter.default_encoding_payload_converters = DEFAULT_ENCODING_PAYLOAD_CONVERTERS
