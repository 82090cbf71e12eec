"""`ostinato.converter`: the data converter, payload converters and codecs, under Temporal's module name
(`temporalio.converter`)."""

from ostinato.sdk.codecs import PayloadCodec
from ostinato.sdk.converter import DefaultPayloadConverter, PayloadConversionError, PayloadConverter
from ostinato.sdk.data import DEFAULT, DataConverter

CompositePayloadConverter = DefaultPayloadConverter  # Ostinato's one JSON converter composes binary/null, bytes, JSON
default = DEFAULT  # Temporal's `converter.default()` is a function; here the default instance itself

__all__ = ["CompositePayloadConverter", "DataConverter", "DefaultPayloadConverter", "PayloadCodec",
           "PayloadConversionError", "PayloadConverter", "default"]
