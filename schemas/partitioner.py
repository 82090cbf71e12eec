"""Kafka's Java default partitioner for keyed records, bit for bit, so every process agrees on a key's shard."""

from __future__ import annotations

import struct

__all__ = ["murmur2", "partition_for"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
# `Struct.unpack_from` reads all full little-endian blocks in one C call. One struct per block count is kept for
# keys up to 1 KiB (every real key); longer ones build theirs each time so the cache cannot grow without bound.
_CACHED_BLOCKS = 256
_BLOCKS: dict[int, struct.Struct] = {}


def _murmur2_unsigned(data: bytes) -> int:
    """Kafka's `Utils.murmur2` on unsigned 32-bit values (Java's `>>>` is `>>` here, `*` is masked)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    blocks = length >> 2
    if blocks:
        unpack = _BLOCKS.get(blocks)
        if unpack is None:
            unpack = struct.Struct(f"<{blocks}I")
            if blocks <= _CACHED_BLOCKS:
                _BLOCKS[blocks] = unpack
        m = _M
        mask = _MASK
        for k in unpack.unpack_from(data):
            k = (k * m) & mask
            k = ((k ^ (k >> 24)) * m) & mask
            h = ((h * m) ^ k) & mask
    tail = length & 3
    if tail:
        # Java's switch falls through from case 3 to case 1; the bytes are masked with 0xff there, unsigned here.
        end = length - tail
        if tail == 3:
            h ^= data[end + 2] << 16
        if tail >= 2:
            h ^= data[end + 1] << 8
        h = ((h ^ data[end]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2(byte[])`: the signed 32-bit int Java returns.

    Args:
        data: the serialized key.

    Returns:
        A value in [-2**31, 2**31), equal to what the Java client computes for the same bytes.
    """
    h = _murmur2_unsigned(data)
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """The partition Kafka's Java producer picks for a record with this key.

    `toPositive(murmur2(key.getBytes(UTF_8))) % partitions`. Ostinato producers always pass the partition
    explicitly, so a shard never depends on which client library (or language) produced the record.

    Args:
        key: the record key. It must be valid UTF-8 text: a lone surrogate raises `UnicodeEncodeError`
            (Java would silently hash it as `?` and collide with other keys).
        partitions: the topic's partition count, at least 1.

    Returns:
        The partition index in `[0, partitions)`.

    Raises:
        ValueError: if `partitions` is less than 1.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    # `& 0x7fffffff` of the unsigned value equals Java's toPositive of the signed one.
    return (_murmur2_unsigned(key.encode()) & 0x7FFFFFFF) % partitions
