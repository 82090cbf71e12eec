"""The claim check on a real S3 server: a 5 MiB value goes client -> workflow -> activity -> workflow -> client
through Kafka as blob references only; values over the hard limit are refused before anything is stored."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.client import Client
from ostinato.exceptions import WorkflowFailureError
from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas import codec
from ostinato.schemas.payloads import MIB, PayloadLimits, PayloadTooLargeError
from ostinato.sdk._http import HttpService
from ostinato.sdk.blobstore_s3 import S3BlobStore, s3_client
from ostinato.sdk.data import DataConverter
from ostinato.services.admin.cluster import init_cluster
from ostinato.worker import Worker
from tests.tools.servers import ServerProcess

SHARDS = 2
LIMITS = PayloadLimits(hard_limit=8 * MIB)  # the default offload threshold (256 KiB) stays
BIG = 5 * MIB


@activity.defn
async def digest_and_echo(text: str) -> str:
    """Sees the whole value (resolved from S3), returns it again (offloaded again)."""
    assert len(text) == BIG
    return text


@activity.defn
async def inflate(text: str) -> str:
    return text * 3  # above the hard limit: the result itself is refused


@workflow.defn
class Echo:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(digest_and_echo, text, start_to_close_timeout=timedelta(seconds=60))


@workflow.defn
class Inflate:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(inflate, text, start_to_close_timeout=timedelta(seconds=60),
                                               retry_policy=_one_attempt())


def _one_attempt() -> Any:
    from ostinato import RetryPolicy

    return RetryPolicy(maximum_attempts=1)


@pytest.fixture
def server(kafka: KafkaCluster, tmp_path: Path) -> Iterator[ServerProcess]:
    prefix = f"cc{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    srv = ServerProcess(kafka.bootstrap, prefix, tmp_path / "data", tmp_path / "server.log").start()
    try:
        srv.wait_owning(SHARDS)
        yield srv
    finally:
        srv.stop()


def _objects(client: Any, bucket: str) -> list[dict[str, Any]]:
    return client.list_objects_v2(Bucket=bucket).get("Contents", [])


def test_five_mib_round_trips_and_over_limit_is_refused(server: ServerProcess, s3: Any) -> None:
    boto = s3_client(s3.url, s3.access_key, s3.secret_key)
    bucket = f"blobs-{uuid.uuid4().hex[:8]}"
    store = S3BlobStore(bucket, "payloads/", boto, create_bucket=True)
    text = base64.b64encode(hashlib.sha512(b"seed").digest() * (BIG // 64))[:BIG].decode()

    async def scenario() -> None:
        service = await HttpService.connect(server.url)
        client = Client(service, data_converter=DataConverter(blob_store=store, limits=LIMITS))
        queue = f"q-{uuid.uuid4().hex[:6]}"
        try:
            async with Worker(client, task_queue=queue, workflows=[Echo, Inflate],
                              activities=[digest_and_echo, inflate]):
                handle = await client.start_workflow(Echo.run, text, id=f"echo-{uuid.uuid4().hex[:6]}",
                                                     task_queue=queue)
                assert await asyncio.wait_for(handle.result(), 120) == text
                history = await service.history("default", handle.id, "")
                # Nothing large travelled through Kafka: every event is small and carries references.
                sizes = [len(codec.encode("ostinato.history.HistoryEvent", e)) for e in history]
                assert max(sizes) < 16 * 1024, sizes
                # Input, activity input, activity result and workflow result: one content-addressed blob.
                (blob,) = _objects(boto, bucket)
                assert blob["Key"].startswith("payloads/blobs/sha256/") and blob["Size"] >= BIG

                before = len(_objects(boto, bucket))
                too_big = "y" * (9 * MIB)
                with pytest.raises(PayloadTooLargeError, match="above the hard limit of 8,388,608 bytes"):
                    await client.start_workflow(Echo.run, too_big, id="never", task_queue=queue)
                assert len(_objects(boto, bucket)) == before  # refused before anything was stored

                handle = await client.start_workflow(Inflate.run, text[: 3 * MIB], id=f"inf-{uuid.uuid4().hex[:6]}",
                                                     task_queue=queue)
                with pytest.raises(WorkflowFailureError) as failure:
                    await asyncio.wait_for(handle.result(), 120)
                assert "above the hard limit" in str(failure.value.cause.cause or failure.value.cause)
        finally:
            await service.close()

    asyncio.run(scenario())
