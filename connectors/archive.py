"""Closed runs in S3 as Avro object container files (DESIGN.md §7): an open format any Avro reader decodes.

Layout, under an optional key prefix::

    {ns}/{yyyy}/{mm}/{dd}/{workflow_id}/{run_id}.avro     the history, one HistoryEvent per Avro datum
    _index/{ns}/{workflow_id}/{run_id}.json                where that file is, so a run is found by id alone

The date is the run's close time in UTC, so lifecycle rules and analysts can work by day. Every path component
is percent-encoded (`quote(..., safe="")`): workflow ids may hold `/` or any other character, and a key must
still split back into its parts. The file's bytes depend only on the run (a sync marker derived from its key,
deflate at a fixed level), so archiving a run twice writes the same object: idempotent by construction.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import fastavro

from ostinato.schemas import codec, wire

CODEC = "deflate"  # in every Avro implementation, so "plain fastavro" (or Spark, or avro-tools) reads it
_META = "ostinato."
_MISSING = ("NoSuchKey", "404", "NotFound")


class ArchiveError(Exception):
    """An archive cannot be written, read or found."""


class ArchiveNotFoundError(ArchiveError, LookupError):
    pass


@dataclass(frozen=True)
class ArchivedRun:
    namespace: str
    workflow_id: str
    run_id: str
    workflow_type: str
    status: str
    close_time_ms: int
    events: list[dict[str, Any]]  # decoded HistoryEvent records, union branches as (name, value)


@dataclass(frozen=True)
class IndexEntry:
    """What `_index/` says about one archived run."""

    namespace: str
    workflow_id: str
    run_id: str
    uri: str
    close_time_ms: int
    event_count: int
    workflow_type: str
    status: str


@functools.cache
def history_schema() -> Any:
    """The HistoryEvent schema the archives are written with: its Parsing Canonical Form, which defines every
    named type where first used, so the file's header is a complete schema for any reader."""
    return fastavro.parse_schema(json.loads(codec.registry().schema(wire.HISTORY_EVENT).canonical))


def archive_key(namespace: str, workflow_id: str, run_id: str, close_time_ms: int, prefix: str = "") -> str:
    day = datetime.fromtimestamp(close_time_ms / 1000, UTC)
    return (f"{prefix}{_q(namespace)}/{day:%Y/%m/%d}/{_q(workflow_id)}/{_q(run_id)}.avro")


def index_key(namespace: str, workflow_id: str, run_id: str = "", prefix: str = "") -> str:
    base = f"{prefix}_index/{_q(namespace)}/{_q(workflow_id)}/"
    return base + (f"{_q(run_id)}.json" if run_id else "")


def _q(component: str) -> str:
    return quote(component, safe="")


def write_container(run: ArchivedRun) -> bytes:
    """The run's history as an Avro object container file, byte-for-byte the same for the same run."""
    out = io.BytesIO()
    marker = hashlib.sha256(f"{run.namespace}\0{run.workflow_id}\0{run.run_id}".encode()).digest()[:16]
    metadata = {
        f"{_META}namespace": run.namespace, f"{_META}workflow_id": run.workflow_id, f"{_META}run_id": run.run_id,
        f"{_META}workflow_type": run.workflow_type, f"{_META}status": run.status,
        f"{_META}close_time_ms": str(run.close_time_ms), f"{_META}event_count": str(len(run.events)),
    }
    fastavro.writer(out, history_schema(), run.events, codec=CODEC, metadata=metadata, sync_marker=marker,
                    codec_compression_level=6, strict_allow_default=True)
    return out.getvalue()


def read_container(data: bytes) -> ArchivedRun:
    """An archive file back into a run; union branches come back as (name, value), as `codec.decode` gives them."""
    try:
        reader = fastavro.reader(io.BytesIO(data), return_record_name=True, return_record_name_override=True)
        events: list[dict[str, Any]] = list(reader)  # type: ignore[arg-type]
        meta = {k.removeprefix(_META): v for k, v in reader.metadata.items() if k.startswith(_META)}
        return ArchivedRun(meta["namespace"], meta["workflow_id"], meta["run_id"], meta.get("workflow_type", ""),
                           meta.get("status", ""), int(meta.get("close_time_ms", "0")), events)
    except (ValueError, KeyError, EOFError) as exc:
        raise ArchiveError(f"not an Ostinato history archive: {exc}") from exc


class S3Archive:
    """Archives in one bucket. Takes a boto3 client, so credentials and endpoints stay the caller's business."""

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"

    @classmethod
    def from_uri(cls, client: Any, uri: str) -> S3Archive:
        """`s3://bucket[/prefix]`."""
        parts = urlsplit(uri)
        if parts.scheme != "s3" or not parts.netloc:
            raise ValueError(f"{uri!r} is not an s3://bucket[/prefix] URI")
        return cls(client, parts.netloc, parts.path.lstrip("/"))

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def write(self, run: ArchivedRun) -> str:
        """Put the archive, then its index entry; returns the archive's URI. Safe to repeat."""
        key = archive_key(run.namespace, run.workflow_id, run.run_id, run.close_time_ms, self.prefix)
        body = write_container(run)
        entry = {"uri": f"s3://{self.bucket}/{key}", "close_time_ms": run.close_time_ms,
                 "event_count": len(run.events), "workflow_type": run.workflow_type, "status": run.status}
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="avro/binary")
            self.client.put_object(Bucket=self.bucket, Key=index_key(run.namespace, run.workflow_id, run.run_id,
                                                                      self.prefix),
                                   Body=json.dumps(entry).encode(), ContentType="application/json")
        except Exception as exc:
            raise ArchiveError(f"cannot write s3://{self.bucket}/{key}: {exc}") from exc
        return str(entry["uri"])

    def read(self, uri: str) -> ArchivedRun:
        parts = urlsplit(uri)
        if parts.scheme != "s3" or parts.netloc != self.bucket:
            raise ArchiveError(f"{uri!r} is not in s3://{self.bucket}")
        return read_container(self.get(parts.path.lstrip("/")))

    def find(self, namespace: str, workflow_id: str, run_id: str = "") -> list[IndexEntry]:
        """Archived runs of a workflow id (one run when `run_id` is given), latest close first."""
        if run_id:
            keys = [index_key(namespace, workflow_id, run_id, self.prefix)]
        else:
            keys = self.list(index_key(namespace, workflow_id, prefix=self.prefix))
        found = []
        for key in keys:
            try:
                entry = json.loads(self.get(key))
            except ArchiveNotFoundError:
                continue
            rid = key.rsplit("/", 1)[1].removesuffix(".json")

            found.append(IndexEntry(namespace, workflow_id, unquote(rid), entry["uri"], entry["close_time_ms"],
                                    entry["event_count"], entry.get("workflow_type", ""), entry.get("status", "")))
        return sorted(found, key=lambda e: (-e.close_time_ms, e.run_id))

    def get(self, key: str) -> bytes:
        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except Exception as exc:
            if str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) in _MISSING:
                raise ArchiveNotFoundError(f"s3://{self.bucket}/{key} does not exist") from None
            raise ArchiveError(f"cannot read s3://{self.bucket}/{key}: {exc}") from exc

    def archives(self) -> list[tuple[str, int]]:
        """(key, last-modified epoch ms) of every archive file under the prefix, newest first, the index left out:
        one listing tells the replay gate which runs are recent without downloading any."""
        found: list[tuple[str, int]] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
                found.extend((obj["Key"], int(obj["LastModified"].timestamp() * 1000))
                             for obj in page.get("Contents", []) if obj["Key"].endswith(".avro")
                             and not obj["Key"][len(self.prefix):].startswith("_index/"))
        except Exception as exc:
            if str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) == "NoSuchBucket":
                return []
            raise ArchiveError(f"cannot list {self.uri}: {exc}") from exc
        return sorted(found, key=lambda item: (-item[1], item[0]))

    def list(self, prefix: str) -> Sequence[str]:
        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                keys.extend(obj["Key"] for obj in page.get("Contents", []))
        except Exception as exc:
            if str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) == "NoSuchBucket":
                return []  # nothing was ever archived here
            raise ArchiveError(f"cannot list s3://{self.bucket}/{prefix}: {exc}") from exc
        return keys
