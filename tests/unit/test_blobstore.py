"""Claim-check offloading: what goes to the blob store, what comes back, and what is refused."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ostinato.schemas.payloads import (
    ENCODING,
    ENCODING_JSON,
    BlobRef,
    InvalidBlobRefError,
    Payload,
    PayloadLimits,
    PayloadTooLargeError,
    is_blob_ref,
    payload_size,
)
from ostinato.sdk.blobstore import (
    BlobIntegrityError,
    BlobNotFoundError,
    BlobStore,
    BlobStoreError,
    FileBlobStore,
    MemoryBlobStore,
    offload,
    offload_all,
    resolve,
    resolve_all,
)

LIMITS = PayloadLimits(offload_threshold=1000, hard_limit=5000)
META = {ENCODING: ENCODING_JSON, "encryption-key-id": b"k1"}
META_SIZE = payload_size(Payload(META, b""))


def sized(total: int, fill: bytes = b"x") -> Payload:
    """A payload whose `payload_size` is exactly `total`."""
    return Payload(META, fill * (total - META_SIZE))


def stored_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_stores_satisfy_the_protocol(tmp_path: Path) -> None:
    assert isinstance(FileBlobStore(tmp_path), BlobStore)
    assert isinstance(MemoryBlobStore(), BlobStore)


def test_payload_at_the_threshold_stays_inline(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    payload = sized(1000)
    assert offload(payload, store, LIMITS) is payload
    assert not (tmp_path / "blobs").exists()


def test_payload_above_the_threshold_is_offloaded_and_resolved(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    payload = sized(1001)
    ref_payload = offload(payload, store, LIMITS)
    assert is_blob_ref(ref_payload)
    ref = BlobRef.from_payload(ref_payload)
    assert payload_size(ref_payload) < 250 + len(ref.uri)  # the record carries a small reference
    assert ref.sha256 == hashlib.sha256(payload.data).hexdigest()
    assert ref.size == len(payload.data)
    assert ref.original_metadata == META
    [blob] = stored_files(tmp_path)
    assert blob.read_bytes() == payload.data
    assert ref.uri == blob.as_uri()
    assert resolve(ref_payload, store) == payload


def test_default_limits_offload_above_256_kib() -> None:
    store = MemoryBlobStore()
    assert offload(Payload({}, b"x" * 256 * 1024), store) == Payload({}, b"x" * 256 * 1024)
    assert is_blob_ref(offload(Payload({}, b"x" * (256 * 1024 + 1)), store))


def test_above_the_hard_limit_nothing_is_stored_and_the_error_names_the_limit(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    with pytest.raises(PayloadTooLargeError, match="above the hard limit of 5,000 bytes") as info:
        offload(sized(5001), store, LIMITS)
    assert (info.value.size, info.value.limit) == (5001, 5000)
    assert "5,001" in str(info.value)
    assert stored_files(tmp_path) == []
    assert is_blob_ref(offload(sized(5000), store, LIMITS))


def test_offload_all_checks_every_limit_before_storing_anything() -> None:
    store = MemoryBlobStore()
    with pytest.raises(PayloadTooLargeError, match="payload 1 is"):
        offload_all([sized(2000), sized(6000)], store, LIMITS)
    assert store.blobs == {}
    small, large = sized(10), sized(2000)
    refs = offload_all([small, large], store, LIMITS)
    assert refs[0] is small and is_blob_ref(refs[1])
    assert resolve_all(refs, store) == [small, large]


def test_offloading_a_reference_again_is_a_no_op() -> None:
    store = MemoryBlobStore()
    ref = offload(sized(2000), store, LIMITS)
    assert offload(ref, store, LIMITS) is ref
    assert len(store.blobs) == 1


def test_puts_are_idempotent_and_content_addressed(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    first = store.put(b"same bytes")
    assert store.put(b"same bytes") == first
    assert FileBlobStore(tmp_path).put(b"same bytes") == first  # a second process agrees
    assert store.put(b"other bytes") != first
    digest = hashlib.sha256(b"same bytes").hexdigest()
    assert first == (tmp_path.resolve() / digest[:2] / digest).as_uri()
    assert len(stored_files(tmp_path)) == 2  # no temporary files left behind
    assert store.get(first) == b"same bytes"


def test_put_repairs_a_damaged_copy(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    uri = store.put(b"precious")
    [blob] = stored_files(tmp_path)
    blob.write_bytes(b"damaged")
    assert store.put(b"precious") == uri
    assert store.get(uri) == b"precious"


def test_tampered_blob_is_detected(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    ref = offload(sized(2000, b"a"), store, LIMITS)
    [blob] = stored_files(tmp_path)
    data = bytearray(blob.read_bytes())
    data[100] ^= 0x01
    blob.write_bytes(bytes(data))
    with pytest.raises(BlobIntegrityError, match="sha256"):
        resolve(ref, store)
    blob.write_bytes(bytes(data[:-1]))
    with pytest.raises(BlobIntegrityError, match="bytes; its reference says"):
        resolve(ref, store)


def test_missing_blob_raises_not_found(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    ref = offload(sized(2000), store, LIMITS)
    for blob in stored_files(tmp_path):
        blob.unlink()
    with pytest.raises(BlobNotFoundError, match="missing"):
        resolve(ref, store)
    with pytest.raises(BlobNotFoundError):
        MemoryBlobStore().get("memory://sha256/" + "0" * 64)


DIGEST = "ab" * 32


@pytest.mark.parametrize(
    "make_uri",
    [
        lambda root: "file:///etc/passwd",
        lambda root: "s3://bucket/" + DIGEST,
        lambda root: f"file://otherhost{root}/ab/{DIGEST}",
        lambda root: f"file://{root}/ab/../ab/{DIGEST}",
        lambda root: f"file://{root}/cd/{DIGEST}",
        lambda root: f"file://{root}/ab/{DIGEST.upper()}",
        lambda root: f"file://{root}/../{root.name}/ab/{DIGEST}",
    ],
)
def test_file_store_refuses_uris_it_did_not_produce(tmp_path: Path, make_uri: Callable[[Path], str]) -> None:
    root = tmp_path.resolve()
    store = FileBlobStore(root)
    for folder in ("ab", "cd"):
        (root / folder).mkdir()
        (root / folder / DIGEST).write_bytes(b"exists, so only the URI check can refuse")
    assert store.get(f"file://{root}/ab/{DIGEST}") == b"exists, so only the URI check can refuse"
    with pytest.raises(BlobStoreError, match="not a blob URI"):
        store.get(make_uri(root))


def test_resolve_passes_ordinary_payloads_through() -> None:
    payload = sized(10)
    assert resolve(payload, MemoryBlobStore()) is payload


def test_malformed_reference_raises_the_typed_error() -> None:
    ref = offload(sized(2000), MemoryBlobStore(), LIMITS)
    broken = Payload(ref.metadata, json.dumps({"uri": "x"}).encode())
    with pytest.raises(InvalidBlobRefError):
        resolve(broken, MemoryBlobStore())
