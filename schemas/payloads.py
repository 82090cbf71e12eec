"""Payloads on the wire (DESIGN.md §3): the `{metadata, data}` shape, size limits and blob references."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ostinato.schemas.topics import MAX_RECORD_BYTES

ENCODING = "encoding"
"""The metadata key every payload carries: how to read `data`."""
ENCODING_NULL = b"binary/null"
ENCODING_BINARY = b"binary/plain"
ENCODING_JSON = b"json/plain"
ENCODING_BLOB_REF = b"ostinato/blob-ref"
BLOB_REF_METADATA_PREFIX = "ostinato.original."
"""A blob reference keeps the offloaded payload's metadata under this prefix, so only `data` leaves the record."""

KIB = 1024
MIB = 1024 * KIB
DEFAULT_OFFLOAD_THRESHOLD = 256 * KIB
DEFAULT_HARD_LIMIT = 2 * MIB


@dataclass(frozen=True)
class Payload:
    """One user value as the engine carries it: opaque `data` plus string-keyed byte `metadata`.

    The engine never reads `data`; converters and codecs in the SDK (or any other language) produce and read it.
    """

    metadata: dict[str, bytes]
    data: bytes

    def __post_init__(self) -> None:
        # Copy so a caller mutating its dict afterwards cannot change a payload that was already sized or encoded.
        metadata = dict(self.metadata)
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, bytes):
                raise TypeError(f"payload metadata must map str to bytes, got {key!r}: {type(value).__name__}")
        if not isinstance(self.data, bytes):
            raise TypeError(f"payload data must be bytes, not {type(self.data).__name__}")
        object.__setattr__(self, "metadata", metadata)

    @property
    def encoding(self) -> bytes | None:
        return self.metadata.get(ENCODING)


def payload_size(payload: Payload) -> int:
    """Bytes a payload costs on the wire: data plus every metadata key (UTF-8) and value.

    Every limit is measured with this one function, so the SDK and the server agree on what "too large" means.
    """
    return len(payload.data) + sum(len(k.encode()) + len(v) for k, v in payload.metadata.items())


class PayloadTooLargeError(ValueError):
    """A payload is above the hard limit; it is rejected before anything is stored or sent."""

    def __init__(self, size: int, limit: int, what: str = "payload") -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"{what} is {size:,} bytes, above the hard limit of {limit:,} bytes (PayloadLimits.hard_limit). "
            "Store large data yourself and pass a reference to it (e.g. an object-store URI) instead, "
            "or raise PayloadLimits.hard_limit; payloads above the offload threshold go to the blob store."
        )


@dataclass(frozen=True)
class PayloadLimits:
    """Above `offload_threshold` a payload goes to the blob store; above `hard_limit` it is rejected."""

    offload_threshold: int = DEFAULT_OFFLOAD_THRESHOLD
    hard_limit: int = DEFAULT_HARD_LIMIT

    def __post_init__(self) -> None:
        for name in ("offload_threshold", "hard_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"PayloadLimits.{name} must be a positive number of bytes, not {value!r}")
        if self.offload_threshold > self.hard_limit:
            raise ValueError(
                f"PayloadLimits.offload_threshold ({self.offload_threshold:,}) must not exceed "
                f"hard_limit ({self.hard_limit:,})"
            )
        # Inline payloads travel inside Kafka records; one at the threshold must still fit with its envelope.
        if self.offload_threshold >= MAX_RECORD_BYTES:
            raise ValueError(
                f"PayloadLimits.offload_threshold ({self.offload_threshold:,}) must stay below the "
                f"{MAX_RECORD_BYTES:,}-byte Kafka record limit; larger payloads belong in the blob store"
            )

    def check(self, payload: Payload, what: str = "payload") -> int:
        """Return the payload's size, raising `PayloadTooLargeError` if it is above the hard limit."""
        size = payload_size(payload)
        if size > self.hard_limit:
            raise PayloadTooLargeError(size, self.hard_limit, what)
        return size

    def should_offload(self, payload: Payload) -> bool:
        return payload_size(payload) > self.offload_threshold


class InvalidBlobRefError(ValueError):
    """A payload claims to be a blob reference but its body is not one."""


@dataclass(frozen=True)
class BlobRef:
    """Where an offloaded payload's data lives and how to check it: the body of a blob-reference payload."""

    uri: str
    sha256: str
    size: int
    original_metadata: dict[str, bytes] = field(default_factory=dict)

    def to_payload(self) -> Payload:
        """The payload that travels instead: `{"uri", "sha256", "size"}` as JSON, original metadata prefixed."""
        body = json.dumps({"uri": self.uri, "sha256": self.sha256, "size": self.size}, separators=(",", ":"))
        metadata = {BLOB_REF_METADATA_PREFIX + k: v for k, v in self.original_metadata.items()}
        metadata[ENCODING] = ENCODING_BLOB_REF
        return Payload(metadata, body.encode())

    @classmethod
    def from_payload(cls, payload: Payload) -> BlobRef:
        if not is_blob_ref(payload):
            raise InvalidBlobRefError(f"payload encoding is {payload.encoding!r}, not {ENCODING_BLOB_REF!r}")
        try:
            body = json.loads(payload.data)
            uri, sha256, size = body["uri"], body["sha256"], body["size"]
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidBlobRefError(f"blob reference body is not {{uri, sha256, size}} JSON: {exc}") from exc
        if not isinstance(uri, str) or not _is_sha256_hex(sha256) or type(size) is not int or size < 0:
            raise InvalidBlobRefError(f"blob reference has a malformed uri, sha256 or size: {body!r}")
        n = len(BLOB_REF_METADATA_PREFIX)
        original = {k[n:]: v for k, v in payload.metadata.items() if k.startswith(BLOB_REF_METADATA_PREFIX)}
        return cls(uri, sha256, size, original)


def is_blob_ref(payload: Payload) -> bool:
    return payload.metadata.get(ENCODING) == ENCODING_BLOB_REF


def _is_sha256_hex(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
