"""`ostinato.converter`: the data converter, payload converters and codecs, under Temporal's module name
(`temporalio.converter`)."""

from ostinato.schemas.payloads import Payload  # temporalio.api.common.v1.Payload: metadata and data, the same fields
from ostinato.sdk.codecs import PayloadCodec
from ostinato.sdk.converter import DefaultPayloadConverter, PayloadConversionError, PayloadConverter
from ostinato.sdk.converter_composite import (
    BinaryNullPayloadConverter,
    BinaryPlainPayloadConverter,
    CompositePayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
)
from ostinato.sdk.data import DEFAULT, DataConverter


def default() -> DataConverter:
    """The default data converter, as Temporal's `converter.default()` (also `DataConverter.default`)."""
    return DEFAULT


__all__ = [
    "BinaryNullPayloadConverter", "BinaryPlainPayloadConverter", "CompositePayloadConverter", "DataConverter",
    "DefaultPayloadConverter", "EncodingPayloadConverter", "JSONPlainPayloadConverter", "Payload", "PayloadCodec",
    "PayloadConversionError", "PayloadConverter", "default",
]
