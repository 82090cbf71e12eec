"""The payload wire shape: sizes, limits, the too-large error and blob references."""

from __future__ import annotations

import json

import pytest

from ostinato.schemas.payloads import (
    BLOB_REF_METADATA_PREFIX,
    ENCODING,
    ENCODING_BLOB_REF,
    ENCODING_JSON,
    BlobRef,
    InvalidBlobRefError,
    Payload,
    PayloadLimits,
    PayloadTooLargeError,
    is_blob_ref,
    payload_size,
)
from ostinato.schemas.topics import MAX_RECORD_BYTES

DIGEST = "ab" * 32


def test_payload_copies_its_metadata() -> None:
    metadata = {ENCODING: ENCODING_JSON}
    payload = Payload(metadata, b"1")
    metadata[ENCODING] = b"changed"
    assert payload.metadata == {ENCODING: ENCODING_JSON}
    assert payload.encoding == ENCODING_JSON


@pytest.mark.parametrize(
    ("metadata", "data"),
    [({ENCODING: "json/plain"}, b""), ({1: b"x"}, b""), ({}, "text"), ({}, bytearray(b"x"))],
)
def test_payload_rejects_wrong_types(metadata: dict[object, object], data: object) -> None:
    with pytest.raises(TypeError):
        Payload(metadata, data)  # type: ignore[arg-type]


def test_size_counts_data_and_every_metadata_key_and_value() -> None:
    payload = Payload({"encoding": b"json/plain", "ключ": b"\x00\x01"}, b"12345")
    # 5 data + "encoding" 8 + "json/plain" 10 + "ключ" 8 UTF-8 bytes + 2
    assert payload_size(payload) == 5 + 8 + 10 + 8 + 2
    assert payload_size(Payload({}, b"")) == 0


def test_default_limits_are_the_design_numbers() -> None:
    limits = PayloadLimits()
    assert limits.offload_threshold == 256 * 1024
    assert limits.hard_limit == 2 * 1024 * 1024


@pytest.mark.parametrize(
    ("threshold", "hard"),
    [(0, 10), (-1, 10), (10, 0), (11, 10), (True, 10), (1.5, 10), (MAX_RECORD_BYTES, 2 * MAX_RECORD_BYTES)],
)
def test_invalid_limits_are_refused(threshold: int, hard: int) -> None:
    with pytest.raises(ValueError, match="PayloadLimits"):
        PayloadLimits(offload_threshold=threshold, hard_limit=hard)


def test_threshold_may_equal_hard_limit() -> None:
    assert PayloadLimits(offload_threshold=10, hard_limit=10).hard_limit == 10


def test_check_allows_exactly_the_hard_limit_and_rejects_one_more() -> None:
    limits = PayloadLimits(offload_threshold=4, hard_limit=10)
    assert limits.check(Payload({}, b"x" * 10)) == 10
    with pytest.raises(PayloadTooLargeError) as info:
        limits.check(Payload({"e": b"x"}, b"x" * 9))  # 9 + 1 + 1: metadata counts too
    assert (info.value.size, info.value.limit) == (11, 10)


def test_offload_decision_is_strictly_above_the_threshold() -> None:
    limits = PayloadLimits(offload_threshold=4, hard_limit=10)
    assert not limits.should_offload(Payload({}, b"1234"))
    assert limits.should_offload(Payload({}, b"12345"))


def test_too_large_message_names_size_limit_and_remedy() -> None:
    error = PayloadTooLargeError(3_000_000, 2_097_152, what="workflow input")
    message = str(error)
    assert isinstance(error, ValueError)
    assert "workflow input is 3,000,000 bytes" in message
    assert "2,097,152" in message and "PayloadLimits.hard_limit" in message
    assert "reference" in message


def test_blob_ref_round_trip_keeps_original_metadata() -> None:
    original = {ENCODING: ENCODING_JSON, "encryption-key-id": b"k1"}
    ref = BlobRef("s3://bucket/x", DIGEST, 300_000, original)
    payload = ref.to_payload()
    assert is_blob_ref(payload)
    assert payload.metadata[ENCODING] == ENCODING_BLOB_REF
    assert payload.metadata[BLOB_REF_METADATA_PREFIX + ENCODING] == ENCODING_JSON
    assert json.loads(payload.data) == {"uri": "s3://bucket/x", "sha256": DIGEST, "size": 300_000}
    assert BlobRef.from_payload(payload) == ref


def test_ordinary_payload_is_not_a_blob_ref() -> None:
    payload = Payload({ENCODING: ENCODING_JSON}, b'{"uri":"x"}')
    assert not is_blob_ref(payload)
    with pytest.raises(InvalidBlobRefError, match="not"):
        BlobRef.from_payload(payload)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"uri": "u", "sha256": "' + DIGEST.encode() + b'"}',
        b'{"uri": 1, "sha256": "' + DIGEST.encode() + b'", "size": 1}',
        b'{"uri": "u", "sha256": "ABC", "size": 1}',
        b'{"uri": "u", "sha256": "' + DIGEST.encode() + b'", "size": -1}',
        b'{"uri": "u", "sha256": "' + DIGEST.encode() + b'", "size": "1"}',
    ],
)
def test_malformed_blob_refs_raise_the_typed_error(body: bytes) -> None:
    with pytest.raises(InvalidBlobRefError):
        BlobRef.from_payload(Payload({ENCODING: ENCODING_BLOB_REF}, body))
