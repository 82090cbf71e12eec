"""Payload codecs: framing, zlib, AES-GCM and chains restore exactly what went in, and refuse tampering."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ostinato.schemas.payloads import ENCODING, ENCODING_JSON, Payload, payload_size
from ostinato.sdk.codecs import (
    ENCODING_ENCRYPTED,
    ENCODING_ZLIB,
    KEY_ID,
    NONCE_SIZE,
    AesGcmCodec,
    CodecChain,
    PayloadCodec,
    PayloadCodecError,
    PayloadDecryptionError,
    ZlibCodec,
    deserialize_payload,
    serialize_payload,
)

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
TEXT = Payload({ENCODING: ENCODING_JSON, "trace": b"\x00\xff"}, b'{"order": "' + b"spam " * 200 + b'"}')


@given(st.dictionaries(st.text(), st.binary(), max_size=5), st.binary())
def test_frame_round_trip(metadata: dict[str, bytes], data: bytes) -> None:
    payload = Payload(metadata, data)
    assert deserialize_payload(serialize_payload(payload)) == payload


def test_frame_is_deterministic_and_documented() -> None:
    a = Payload({"b": b"2", "a": b"1"}, b"xy")
    b = Payload({"a": b"1", "b": b"2"}, b"xy")
    expected = b"\x01" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01a\x00\x00\x00\x011" + b"\x00\x00\x00\x01b"
    assert serialize_payload(a) == serialize_payload(b) == expected + b"\x00\x00\x00\x012xy"


@pytest.mark.parametrize("frame", [b"", b"\x02", b"\x01\x00\x00", b"\x01\x00\x00\x00\x01\x00\x00\x00\x09ab"])
def test_broken_frames_raise_the_typed_error(frame: bytes) -> None:
    with pytest.raises(PayloadCodecError):
        deserialize_payload(frame)


def test_every_codec_satisfies_the_protocol() -> None:
    for codec in (ZlibCodec(), AesGcmCodec(KEY, "k1"), CodecChain([])):
        assert isinstance(codec, PayloadCodec)


def test_zlib_round_trip_restores_metadata_and_data() -> None:
    codec = ZlibCodec()
    [encoded] = codec.encode([TEXT])
    assert encoded.metadata == {ENCODING: ENCODING_ZLIB}
    assert payload_size(encoded) < payload_size(TEXT) / 5
    assert codec.decode([encoded]) == [TEXT]


def test_zlib_leaves_incompressible_payloads_alone() -> None:
    random = Payload({ENCODING: b"binary/plain"}, os.urandom(4096))
    tiny = Payload({ENCODING: ENCODING_JSON}, b"1")
    assert ZlibCodec().encode([random, tiny]) == [random, tiny]
    assert ZlibCodec().decode([random, tiny]) == [random, tiny]


def test_zlib_refuses_corrupt_data() -> None:
    with pytest.raises(PayloadCodecError, match="does not inflate"):
        ZlibCodec().decode([Payload({ENCODING: ENCODING_ZLIB}, b"not deflate")])


def test_aes_gcm_round_trip_hides_metadata_and_data() -> None:
    codec = AesGcmCodec(KEY, "k1")
    [encoded] = codec.encode([TEXT])
    assert encoded.metadata == {ENCODING: ENCODING_ENCRYPTED, KEY_ID: b"k1"}
    assert b"spam" not in encoded.data and b"trace" not in encoded.data
    assert codec.decode([encoded]) == [TEXT]


def test_nonce_differs_between_two_encodings_of_the_same_payload() -> None:
    codec = AesGcmCodec(KEY, "k1")
    first, second = codec.encode([TEXT, TEXT])
    assert first.data[:NONCE_SIZE] != second.data[:NONCE_SIZE]
    assert first.data != second.data
    assert codec.decode([first, second]) == [TEXT, TEXT]


def test_wrong_key_raises_the_typed_error() -> None:
    encoded = AesGcmCodec(KEY, "k1").encode([TEXT])
    with pytest.raises(PayloadDecryptionError, match="key is wrong or the data was altered") as info:
        AesGcmCodec(OTHER_KEY, "k1").decode(encoded)
    assert info.value.key_id == "k1"


@pytest.mark.parametrize("position", [0, NONCE_SIZE, -1])
def test_tampered_ciphertext_raises_the_typed_error(position: int) -> None:
    codec = AesGcmCodec(KEY, "k1")
    [encoded] = codec.encode([TEXT])
    data = bytearray(encoded.data)
    data[position] ^= 0x01
    with pytest.raises(PayloadDecryptionError):
        codec.decode([Payload(encoded.metadata, bytes(data))])


def test_unknown_or_missing_key_id_raises_the_typed_error() -> None:
    [encoded] = AesGcmCodec(KEY, "k1").encode([TEXT])
    with pytest.raises(PayloadDecryptionError, match=r"'k1'.*does not hold.*k2"):
        AesGcmCodec(KEY, "k2").decode([encoded])
    with pytest.raises(PayloadDecryptionError, match="no 'encryption-key-id'"):
        AesGcmCodec(KEY, "k1").decode([Payload({ENCODING: ENCODING_ENCRYPTED}, encoded.data)])
    with pytest.raises(PayloadDecryptionError, match="too short"):
        AesGcmCodec(KEY, "k1").decode([Payload(encoded.metadata, b"short")])


def test_relabelled_key_id_is_detected_even_with_the_same_key() -> None:
    # The key id is authenticated, so a payload cannot be passed off as sealed under another key's name.
    [encoded] = AesGcmCodec(KEY, "k1").encode([TEXT])
    relabelled = Payload({**encoded.metadata, KEY_ID: b"k2"}, encoded.data)
    with pytest.raises(PayloadDecryptionError):
        AesGcmCodec(KEY, "k2").decode([relabelled])


def test_old_keys_decrypt_after_rotation() -> None:
    [old] = AesGcmCodec(KEY, "2024").encode([TEXT])
    rotated = AesGcmCodec(OTHER_KEY, "2025", old_keys={"2024": KEY})
    [new] = rotated.encode([TEXT])
    assert new.metadata[KEY_ID] == b"2025"
    assert rotated.decode([old, new]) == [TEXT, TEXT]


@pytest.mark.parametrize(("key", "key_id", "message"), [(b"short", "k", "must be 16, 24 or 32"), (KEY, "", "key_id")])
def test_bad_key_or_key_id_is_refused(key: bytes, key_id: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AesGcmCodec(key, key_id)


def test_chain_encodes_in_order_and_decodes_in_reverse() -> None:
    zlib_codec, aes = ZlibCodec(), AesGcmCodec(KEY, "k1")
    chain = CodecChain([zlib_codec, aes])
    [encoded] = chain.encode([TEXT])
    assert encoded.metadata[ENCODING] == ENCODING_ENCRYPTED  # encryption ran last
    [inner] = aes.decode([encoded])
    assert inner.metadata == {ENCODING: ENCODING_ZLIB}  # compression ran first, on the plaintext
    assert chain.decode([encoded]) == [TEXT]
    # The wrong order encrypts first, and ciphertext does not compress.
    [backwards] = CodecChain([aes, zlib_codec]).encode([TEXT])
    assert backwards.metadata[ENCODING] == ENCODING_ENCRYPTED
    assert payload_size(backwards) > payload_size(encoded)


def test_codecs_pass_through_payloads_they_did_not_write() -> None:
    plain = Payload({ENCODING: ENCODING_JSON}, b"1")
    assert CodecChain([ZlibCodec(), AesGcmCodec(KEY, "k1")]).decode([plain]) == [plain]


def test_zlib_refuses_a_decompression_bomb() -> None:
    import zlib

    from ostinato.sdk.codecs import ENCODING_ZLIB, PayloadCodecError, ZlibCodec

    bomb = Payload({"encoding": ENCODING_ZLIB}, zlib.compress(b"\0" * (8 * 2**20)))
    assert len(bomb.data) < 20_000
    with pytest.raises(PayloadCodecError, match="inflates past 1048576 bytes"):
        ZlibCodec(max_inflated_bytes=2**20).decode([bomb])
    with pytest.raises(PayloadCodecError, match="truncated"):
        ZlibCodec().decode([Payload({"encoding": ENCODING_ZLIB}, zlib.compress(b"x" * 1000)[:-6])])
