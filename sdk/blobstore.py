"""Claim-check offloading: large payloads go to a blob store and records carry a checked reference instead."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

from ostinato.schemas.payloads import BlobRef, Payload, PayloadLimits, is_blob_ref

DEFAULT_LIMITS = PayloadLimits()


class BlobStoreError(Exception):
    """A blob cannot be stored or read, or a URI does not belong to the store it was given to."""


class BlobNotFoundError(BlobStoreError, LookupError):
    """A blob reference points at nothing: the blob was never written, or has been deleted."""


class BlobIntegrityError(BlobStoreError):
    """A blob's bytes do not match the size and sha256 its reference recorded."""


@runtime_checkable
class BlobStore(Protocol):
    """Where offloaded payload data lives: a local directory in development, S3 in production."""

    def put(self, data: bytes) -> str:
        """Store `data` durably before returning its URI; storing the same bytes again is harmless."""
        ...

    def get(self, uri: str) -> bytes:
        """The bytes stored under `uri`; raises `BlobNotFoundError` if there are none."""
        ...


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class MemoryBlobStore:
    """Keeps blobs in a dict: for tests and the in-process test environment."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        uri = f"memory://sha256/{_sha256(data)}"
        self.blobs[uri] = bytes(data)
        return uri

    def get(self, uri: str) -> bytes:
        try:
            return self.blobs[uri]
        except KeyError:
            raise BlobNotFoundError(f"no blob {uri} in this memory store") from None


class FileBlobStore:
    """Content-addressed files under `root` (`<root>/<first two hex digits>/<sha256>`), named by `file://` URIs.

    Writes go to a temporary file that is fsynced and renamed into place, so a reader never sees half a blob and
    concurrent writers of the same bytes simply agree.
    """

    def __init__(self, root: Path | str) -> None:
        self._root = Path(root).resolve()

    @property
    def root(self) -> Path:
        return self._root

    def put(self, data: bytes) -> str:
        digest = _sha256(data)
        target = self._path(digest)
        if self._holds(target, digest):
            return target.as_uri()
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{digest[:12]}.", suffix=".tmp")
        tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(target)
            _fsync_dir(target.parent)  # the rename itself must survive a crash, or a recorded reference dangles
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return target.as_uri()

    def get(self, uri: str) -> bytes:
        path = self._path_of(uri)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise BlobNotFoundError(f"blob {uri} is missing from the store at {self._root}") from None

    def _path(self, digest: str) -> Path:
        return self._root / digest[:2] / digest

    def _holds(self, path: Path, digest: str) -> bool:
        # Rewriting is harmless, but checking first skips an fsync and repairs a damaged copy instead of keeping it.
        try:
            return _sha256(path.read_bytes()) == digest
        except FileNotFoundError:
            return False

    def _path_of(self, uri: str) -> Path:
        """Map a URI back to a path, refusing any that this store could not have produced (no path traversal)."""
        parts = urlsplit(uri)
        path = Path(unquote(parts.path))
        digest = path.name
        is_digest = len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
        ours = parts.scheme == "file" and parts.netloc in ("", "localhost") and is_digest
        if not ours or path != self._path(digest):
            raise BlobStoreError(f"{uri!r} is not a blob URI of the file store at {self._root}")
        return path


def offload(payload: Payload, store: BlobStore, limits: PayloadLimits = DEFAULT_LIMITS) -> Payload:
    """Return `payload`, or a blob reference to it if it is above `limits.offload_threshold`.

    Raises:
        PayloadTooLargeError: above `limits.hard_limit`; nothing is stored.
    """
    if is_blob_ref(payload):
        return payload
    limits.check(payload)
    if not limits.should_offload(payload):
        return payload
    uri = store.put(payload.data)
    return BlobRef(uri, _sha256(payload.data), len(payload.data), payload.metadata).to_payload()


def offload_all(payloads: Sequence[Payload], store: BlobStore, limits: PayloadLimits = DEFAULT_LIMITS) -> list[Payload]:
    """`offload` for an argument list, checking every hard limit before storing anything."""
    for i, payload in enumerate(payloads):
        if not is_blob_ref(payload):
            limits.check(payload, what=f"payload {i}")
    return [offload(p, store, limits) for p in payloads]


def resolve(payload: Payload, store: BlobStore) -> Payload:
    """Return `payload`, or the payload a blob reference stands for, checked against its size and sha256.

    Raises:
        BlobNotFoundError: the referenced blob does not exist.
        BlobIntegrityError: the blob's bytes differ from what the reference recorded.
        InvalidBlobRefError: the payload is marked as a reference but is not a well-formed one.
    """
    if not is_blob_ref(payload):
        return payload
    ref = BlobRef.from_payload(payload)
    data = store.get(ref.uri)
    if len(data) != ref.size:
        raise BlobIntegrityError(f"blob {ref.uri} is {len(data):,} bytes; its reference says {ref.size:,}")
    digest = _sha256(data)
    if digest != ref.sha256:
        raise BlobIntegrityError(f"blob {ref.uri} has sha256 {digest}; its reference says {ref.sha256}")
    return Payload(ref.original_metadata, data)


def resolve_all(payloads: Sequence[Payload], store: BlobStore) -> list[Payload]:
    return [resolve(p, store) for p in payloads]
