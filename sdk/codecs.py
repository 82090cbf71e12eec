"""Payload codecs (compression, encryption) applied after conversion, so the engine only sees encoded payloads."""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ostinato.schemas.payloads import ENCODING, Payload, payload_size

ENCODING_ZLIB = b"binary/zlib"
ENCODING_ENCRYPTED = b"binary/encrypted"
KEY_ID = "encryption-key-id"
"""Metadata key naming the key an encrypted payload was sealed with (never the key itself)."""

FRAME_VERSION = 1
NONCE_SIZE = 12
_TAG_SIZE = 16
_AAD_PREFIX = b"ostinato/aes-gcm/v1:"
_U32 = struct.Struct(">I")


class PayloadCodecError(ValueError):
    """An encoded payload cannot be decoded: it is malformed, or not what its metadata claims."""


class PayloadDecryptionError(PayloadCodecError):
    """Decryption failed: unknown key id, wrong key, or data changed after it was encrypted."""

    def __init__(self, message: str, key_id: str | None) -> None:
        super().__init__(message)
        self.key_id = key_id


@runtime_checkable
class PayloadCodec(Protocol):
    """Encodes a list of payloads into as many payloads, and back. Payloads a codec did not write pass through."""

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]: ...

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]: ...


def serialize_payload(payload: Payload) -> bytes:
    """The whole payload as bytes, so a codec can wrap metadata and data together and restore both exactly.

    Framing (all integers unsigned 32-bit big-endian), identical for identical payloads:
    `version` (1 byte, = 1), `count` of metadata entries, then per entry in ascending order of the key's UTF-8
    bytes: key length, key (UTF-8), value length, value; then `data`, running to the end of the frame.
    """
    entries = sorted((k.encode(), v) for k, v in payload.metadata.items())
    parts = [bytes([FRAME_VERSION]), _U32.pack(len(entries))]
    for key, value in entries:
        parts += [_U32.pack(len(key)), key, _U32.pack(len(value)), value]
    parts.append(payload.data)
    return b"".join(parts)


def deserialize_payload(frame: bytes) -> Payload:
    """Inverse of `serialize_payload`; raises `PayloadCodecError` for anything it did not produce."""
    view = memoryview(frame)

    def take(n: int, pos: int) -> tuple[bytes, int]:
        if n > len(view) - pos:
            raise PayloadCodecError(f"payload frame is truncated: needs {n} bytes at offset {pos} of {len(view)}")
        return bytes(view[pos:pos + n]), pos + n

    if not frame or frame[0] != FRAME_VERSION:
        raise PayloadCodecError(f"unknown payload frame version {frame[:1].hex() or 'none'}; expected {FRAME_VERSION}")
    raw, pos = take(4, 1)
    metadata: dict[str, bytes] = {}
    for _ in range(_U32.unpack(raw)[0]):
        raw, pos = take(4, pos)
        key, pos = take(_U32.unpack(raw)[0], pos)
        raw, pos = take(4, pos)
        value, pos = take(_U32.unpack(raw)[0], pos)
        try:
            metadata[key.decode()] = value
        except UnicodeDecodeError as exc:
            raise PayloadCodecError(f"payload frame has a metadata key that is not UTF-8: {key!r}") from exc
    return Payload(metadata, bytes(view[pos:]))


class ZlibCodec:
    """Deflates payloads (metadata included) when that makes them smaller; leaves them alone otherwise."""

    def __init__(self, level: int = 6, max_inflated_bytes: int = 64 * 2**20) -> None:
        if not -1 <= level <= 9:
            raise ValueError(f"zlib level must be between -1 and 9, not {level}")
        self._level = level
        # A few KiB of crafted deflate data can inflate to gigabytes; a worker must not be knocked over by one.
        self._max_inflated = max_inflated_bytes

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._encode_one(p) for p in payloads]

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decode_one(p) if p.encoding == ENCODING_ZLIB else p for p in payloads]

    def _encode_one(self, payload: Payload) -> Payload:
        compressed = Payload({ENCODING: ENCODING_ZLIB}, zlib.compress(serialize_payload(payload), self._level))
        # Already-compressed or random data grows a little; sending it as it was is both smaller and cheaper.
        return compressed if payload_size(compressed) < payload_size(payload) else payload

    def _decode_one(self, payload: Payload) -> Payload:
        inflater = zlib.decompressobj()
        try:
            frame = inflater.decompress(payload.data, self._max_inflated)
        except zlib.error as exc:
            raise PayloadCodecError(f"payload marked {ENCODING_ZLIB!r} does not inflate: {exc}") from exc
        if inflater.unconsumed_tail:
            raise PayloadCodecError(
                f"payload marked {ENCODING_ZLIB!r} inflates past {self._max_inflated} bytes (max_inflated_bytes)"
            )
        if not inflater.eof:
            raise PayloadCodecError(f"payload marked {ENCODING_ZLIB!r} is truncated")
        return deserialize_payload(frame)


class AesGcmCodec:
    """Encrypts each payload (metadata included) with AES-GCM under a named key.

    Encoded payloads carry `encoding=binary/encrypted` and `encryption-key-id=<key_id>`; `data` is a fresh random
    12-byte nonce followed by the ciphertext and 16-byte tag of `serialize_payload(original)`, with associated
    data `b"ostinato/aes-gcm/v1:" + key_id`. Random nonces are safe for about 2**32 payloads per key: rotate keys
    by passing the new one as `key` and the old ones in `old_keys`, which are used only to decrypt.
    """

    def __init__(self, key: bytes, key_id: str, old_keys: Mapping[str, bytes] | None = None) -> None:
        if not key_id:
            raise ValueError("AesGcmCodec needs a non-empty key_id so readers can pick the right key")
        keys = {**(old_keys or {}), key_id: key}
        for kid, k in keys.items():
            if len(k) not in (16, 24, 32):
                raise ValueError(f"AES key {kid!r} must be 16, 24 or 32 bytes, not {len(k)}")
        self._key_id = key_id
        self._ciphers = {kid: AESGCM(k) for kid, k in keys.items()}

    @property
    def key_id(self) -> str:
        return self._key_id

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._encrypt(p) for p in payloads]

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt(p) if p.encoding == ENCODING_ENCRYPTED else p for p in payloads]

    def _encrypt(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_SIZE)
        aad = _AAD_PREFIX + self._key_id.encode()
        sealed = self._ciphers[self._key_id].encrypt(nonce, serialize_payload(payload), aad)
        return Payload({ENCODING: ENCODING_ENCRYPTED, KEY_ID: self._key_id.encode()}, nonce + sealed)

    def _decrypt(self, payload: Payload) -> Payload:
        raw_id = payload.metadata.get(KEY_ID)
        if raw_id is None:
            raise PayloadDecryptionError(f"encrypted payload has no {KEY_ID!r} metadata", None)
        key_id = raw_id.decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            known = ", ".join(sorted(self._ciphers))
            raise PayloadDecryptionError(
                f"payload was encrypted with key id {key_id!r}, which this codec does not hold (it has: {known}); "
                "pass that key in old_keys", key_id,
            )
        if len(payload.data) < NONCE_SIZE + _TAG_SIZE:
            raise PayloadDecryptionError(f"encrypted payload is too short ({len(payload.data)} bytes)", key_id)
        nonce, sealed = payload.data[:NONCE_SIZE], payload.data[NONCE_SIZE:]
        try:
            frame = cipher.decrypt(nonce, sealed, _AAD_PREFIX + raw_id)
        except InvalidTag as exc:
            raise PayloadDecryptionError(
                f"payload does not decrypt with key {key_id!r}: the key is wrong or the data was altered", key_id
            ) from exc
        return deserialize_payload(frame)


class CodecChain:
    """Applies codecs in order when encoding and in reverse when decoding: put compression before encryption."""

    def __init__(self, codecs: Sequence[PayloadCodec]) -> None:
        self._codecs = tuple(codecs)

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for codec in self._codecs:
            out = codec.encode(out)
        return out

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for codec in reversed(self._codecs):
            out = codec.decode(out)
        return out
