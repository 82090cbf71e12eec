"""The partitioner reproduces Kafka's Java producer: the vectors its own code generated, and its published values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ostinato.schemas import murmur2, partition_for

VECTORS_FILE = Path(__file__).resolve().parents[2] / "schemas" / "test-vectors" / "partitioner.json"
PARTITION_COUNTS = {1, 2, 3, 4, 7, 8, 12, 16, 64, 100, 1000, 4096}


class Vector(TypedDict):
    key: str
    partitions: int
    partition: int


def _vectors() -> list[Vector]:
    vectors: list[Vector] = json.loads(VECTORS_FILE.read_text(encoding="ascii"))
    return vectors


VECTORS = _vectors()
KEY_BYTES = {v["key"].encode() for v in VECTORS}


def test_every_vector_matches() -> None:
    wrong = [(v, partition_for(v["key"], v["partitions"])) for v in VECTORS
             if partition_for(v["key"], v["partitions"]) != v["partition"]]
    assert not wrong, f"{len(wrong)} of {len(VECTORS)} vectors differ from Java, e.g. {wrong[:3]}"


# Apache Kafka, clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
# Re-checked against Utils.murmur2 of kafka-clients 4.1.1 (the jar the vectors are generated with).
KAFKA_UTILS_TEST_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_UTILS_TEST_MURMUR2)
def test_murmur2_matches_kafka_utils_test(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_murmur2_of_nothing_matches_java() -> None:
    assert murmur2(b"") == 275646681  # Utils.murmur2(new byte[0]) in kafka-clients 4.1.1


@pytest.mark.parametrize("partitions", [0, -1, -4096])
def test_partitions_below_one_are_refused(partitions: int) -> None:
    with pytest.raises(ValueError, match="partitions must be at least 1"):
        partition_for("default/order-1", partitions)


def test_a_lone_surrogate_is_not_a_key() -> None:
    with pytest.raises(UnicodeEncodeError):
        partition_for("default/\ud800", 8)


@given(st.text(), st.integers(min_value=1, max_value=2**31 - 1))
def test_partition_is_in_range_and_murmur2_is_a_java_int(key: str, partitions: int) -> None:
    assert 0 <= partition_for(key, partitions) < partitions
    assert -(2**31) <= murmur2(key.encode()) < 2**31


# The file must exercise what a port gets wrong: tails, sign handling, UTF-8, length, partition counts.


def test_the_vector_file_is_large_and_pure_ascii() -> None:
    assert len(VECTORS) >= 150
    assert VECTORS_FILE.read_bytes().isascii()
    assert all(set(v) == {"key", "partitions", "partition"} for v in VECTORS)
    assert all(0 <= v["partition"] < v["partitions"] for v in VECTORS)


def test_the_vectors_cover_every_tail_and_length_up_to_20_bytes() -> None:
    assert {len(k) for k in KEY_BYTES} >= set(range(21))
    assert b"" in KEY_BYTES


def test_the_vectors_cover_multi_byte_utf8() -> None:
    widths = {len(ch.encode()) for v in VECTORS for ch in v["key"]}
    assert widths == {1, 2, 3, 4}  # accents, CJK, emoji
    assert any(b >= 0x80 for k in KEY_BYTES for b in k[len(k) & ~3:])  # a high-bit byte in a tail


def test_the_vectors_cover_long_keys() -> None:
    assert any(len(k) >= 1024 and not k.isascii() for k in KEY_BYTES)
    assert max(len(k) for k in KEY_BYTES) >= 4096


def test_the_vectors_cover_ostinato_keys_and_every_partition_count() -> None:
    keys = {v["key"] for v in VECTORS}
    assert "default/order-1" in keys
    assert any("%2F" in k for k in keys) and any("%25" in k for k in keys)
    assert {v["partitions"] for v in VECTORS} == PARTITION_COUNTS
    assert {v["partitions"] for v in VECTORS if v["key"] == "default/order-1"} == PARTITION_COUNTS
