"""The claim-check blob store on S3 (or any S3-compatible server): where production payloads above the offload
threshold live, so Kafka records only carry a checked reference (DESIGN.md §3)."""

from __future__ import annotations

import hashlib
import os
from typing import Any
from urllib.parse import urlsplit

from ostinato.sdk.blobstore import BlobNotFoundError, BlobStoreError

_MISSING = ("NoSuchKey", "404", "NotFound")


def s3_client(endpoint_url: str | None = None, access_key: str | None = None, secret_key: str | None = None,
              region: str | None = None) -> Any:
    """A boto3 S3 client; unset arguments come from `OSTINATO_S3_*`, then boto3's usual chain (AWS_* variables,
    profiles, instance roles).

    Path-style addressing, because S3-compatible servers on a private host name rarely serve
    `<bucket>.<host>`; checksums only where S3 requires them, because older compatible servers refuse the
    trailing checksums boto3 sends by default.
    """
    import boto3  # type: ignore[import-untyped]
    from botocore.config import Config  # type: ignore[import-untyped]

    endpoint_url = endpoint_url or os.environ.get("OSTINATO_S3_ENDPOINT") or None
    return boto3.client(
        "s3", endpoint_url=endpoint_url,
        aws_access_key_id=access_key or os.environ.get("OSTINATO_S3_ACCESS_KEY") or None,
        aws_secret_access_key=secret_key or os.environ.get("OSTINATO_S3_SECRET_KEY") or None,
        region_name=region or os.environ.get("OSTINATO_S3_REGION") or "us-east-1",
        config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                      response_checksum_validation="when_required", retries={"max_attempts": 5, "mode": "standard"}),
    )


class S3BlobStore:
    """Content-addressed objects `<prefix>blobs/sha256/<digest>` in one bucket, named by `s3://` URIs.

    Content addressing makes a retried put (a worker that crashed after uploading) write the same key with the
    same bytes, so nothing is ever orphaned twice and references stay valid whichever attempt won.

    Args:
        bucket: an existing bucket (`create_bucket=True` creates it if missing: handy in development).
        prefix: a key prefix, e.g. `"orders/"`, so one bucket can serve several clusters.
        client: a boto3 S3 client; by default `s3_client()` from the environment.
    """

    def __init__(self, bucket: str, prefix: str = "", client: Any = None, *, create_bucket: bool = False) -> None:
        if not bucket:
            raise ValueError("S3BlobStore needs a bucket name")
        self.bucket = bucket
        self.prefix = prefix
        self.client = client if client is not None else s3_client()
        if create_bucket:
            ensure_bucket(self.client, bucket)

    @classmethod
    def from_uri(cls, uri: str, client: Any = None, *, create_bucket: bool = False) -> S3BlobStore:
        """`s3://bucket/optional/prefix/`."""
        parts = urlsplit(uri)
        if parts.scheme != "s3" or not parts.netloc:
            raise ValueError(f"{uri!r} is not an s3://bucket[/prefix] URI")
        prefix = parts.path.lstrip("/")
        return cls(parts.netloc, prefix + ("/" if prefix and not prefix.endswith("/") else ""), client,
                   create_bucket=create_bucket)

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        key = f"{self.prefix}blobs/sha256/{digest}"
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentLength=len(data),
                                   ContentType="application/octet-stream")
        except Exception as exc:
            raise BlobStoreError(f"cannot store a {len(data):,}-byte blob at s3://{self.bucket}/{key}: {exc}") from exc
        return f"s3://{self.bucket}/{key}"

    def get(self, uri: str) -> bytes:
        parts = urlsplit(uri)
        key = parts.path.lstrip("/")
        if parts.scheme != "s3" or parts.netloc != self.bucket or not key.startswith(f"{self.prefix}blobs/"):
            raise BlobStoreError(f"{uri!r} is not a blob URI of s3://{self.bucket}/{self.prefix}")
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            return bytes(body.read())
        except Exception as exc:
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise BlobNotFoundError(f"blob {uri} does not exist (deleted, or never uploaded)") from None
            raise BlobStoreError(f"cannot read blob {uri}: {exc}") from exc


def ensure_bucket(client: Any, bucket: str) -> None:
    """Create `bucket` unless it exists (and is ours)."""
    try:
        client.head_bucket(Bucket=bucket)
        return
    except Exception as exc:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code not in (*_MISSING, "NoSuchBucket"):
            raise BlobStoreError(f"cannot reach bucket {bucket!r}: {exc}") from exc
    try:
        client.create_bucket(Bucket=bucket)
    except Exception as exc:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise BlobStoreError(f"cannot create bucket {bucket!r}: {exc}") from exc
