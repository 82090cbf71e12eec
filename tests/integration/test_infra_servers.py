"""The OpenSearch and S3 servers that infra/ starts are real: documents are searchable, objects round-trip."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from ostinato.infra.opensearch import OpenSearchServer
from ostinato.infra.s3 import S3Server


def _call(method: str, url: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.load(resp)


def test_opensearch_indexes_and_searches(opensearch: OpenSearchServer) -> None:
    index = f"t{uuid.uuid4().hex[:12]}"
    _call("PUT", f"{opensearch.url}/{index}/_doc/1?refresh=true", {"workflow": "order-42", "status": "completed"})
    hits = _call("POST", f"{opensearch.url}/{index}/_search", {"query": {"match": {"workflow": "order-42"}}})
    assert [h["_source"]["status"] for h in hits["hits"]["hits"]] == ["completed"]


def test_s3_round_trip(s3: S3Server) -> None:
    client = boto3.client(
        "s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key, aws_secret_access_key=s3.secret_key,
        region_name=s3.region, config=Config(s3={"addressing_style": "path"}),
    )
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="snapshots/shard-0", Body=b"state")
    assert client.get_object(Bucket=bucket, Key="snapshots/shard-0")["Body"].read() == b"state"
    listed = client.list_objects_v2(Bucket=bucket, Prefix="snapshots/")
    assert [o["Key"] for o in listed["Contents"]] == ["snapshots/shard-0"]
    client.delete_object(Bucket=bucket, Key="snapshots/shard-0")
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    """Own instances, not the session fixtures: runuser, the launcher and the JVM must all be gone."""
    node = OpenSearchServer(tmp_path / "opensearch", port=None).start()
    server = S3Server(tmp_path / "s3", port=None).start()
    try:
        assert node.running() and server.running()
        os_pids, s3_pids = node.stop(), server.stop()
        assert os_pids and s3_pids
        for pid in [*os_pids, *s3_pids]:
            assert not Path(f"/proc/{pid}").exists(), f"pid {pid} is still in the process table"
        assert not node.running() and not server.running()
        assert OpenSearchServer.existing(tmp_path / "opensearch") is not None  # status still finds it, stopped
    finally:
        node.wipe()
        server.stop()
