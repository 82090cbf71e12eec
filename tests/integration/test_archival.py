"""Archival against the real broker, server and S3 server: with the archiver stopped nothing past retention is
deleted; with it running every closed run lands in S3 as an Avro file plain fastavro reads into exactly the
events of its history, and only then is the run deleted."""

from __future__ import annotations

import base64
import io
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

import fastavro
import pytest

from ostinato.connectors.archive import S3Archive
from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas import codec
from ostinato.sdk.blobstore_s3 import s3_client
from ostinato.services.admin.cluster import init_cluster
from tests.conftest import run_cli
from tests.tools.servers import ServerProcess
from tests.tools.worker import TestWorker
from tests.tools.workload import start_workflows, wait_closed

SHARDS = 2
QUEUE = "archq"
RETENTION_MS = 2_000
COUNT = 12


def _s3_env(s3: Any) -> dict[str, str]:
    return {"OSTINATO_S3_ENDPOINT": s3.url, "OSTINATO_S3_ACCESS_KEY": s3.access_key,
            "OSTINATO_S3_SECRET_KEY": s3.secret_key}


def _path(wf: str, suffix: str = "") -> str:
    return f"/api/v1/namespaces/default/workflows/{urllib.parse.quote(wf, safe='')}{suffix}"


def _raw_history(server: ServerProcess, wf: str) -> list[bytes]:
    status, page = server.get(_path(wf, "/history?format=avro&page_size=1000"))
    assert status == 200 and page["next_page_token"] == "", page
    return [base64.b64decode(e) for e in page["events"]]


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def s3_env(s3: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = _s3_env(s3)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def test_nothing_is_deleted_until_archived_and_archives_are_plain_avro(
        kafka: KafkaCluster, topic_prefix: str, tmp_path: Path, s3_env: dict[str, str]) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    uri = f"s3://arch-{topic_prefix.lower()}/cluster-a"
    env = {**s3_env, "OSTINATO_DEFAULT_RETENTION_MS": str(RETENTION_MS)}
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log", env=env,
                           extra_args=("--archive-uri", uri, "--no-archiver")).start()
    try:
        server.wait_owning(SHARDS)
        with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
            ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, COUNT, "chain", QUEUE, input="a",
                                  id_prefix="arch/wf")
            assert set(wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=60).values()) == {
                "WORKFLOW_EXECUTION_COMPLETED"}
        histories = {wf: _raw_history(server, wf) for wf in ids}

        # The archiver is not running: retention passes several times over, and every run is still there.
        time.sleep(RETENTION_MS / 1000 * 3)
        for wf in ids:
            status, body = server.get(_path(wf))
            assert status == 200 and body["status"] == "COMPLETED", (wf, status, body)
        archive = S3Archive.from_uri(s3_client(), uri)
        assert all(archive.find("default", wf) == [] for wf in ids)
    finally:
        server.stop()

    # Same data, archiver on: every run is archived, then deleted (its retention is long over).
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server2.log", env=env,
                           extra_args=("--archive-uri", uri)).start()
    try:
        server.wait_owning(SHARDS)
        _wait(lambda: all(server.get(_path(wf))[0] == 404 for wf in ids), 90, "every run archived and deleted")
        for wf in ids:
            (entry,) = archive.find("default", wf)
            key = urllib.parse.urlsplit(entry.uri).path.lstrip("/")
            assert key.startswith("cluster-a/default/") and key.endswith(".avro")
            assert urllib.parse.quote(wf, safe="") in key
            reader = fastavro.reader(io.BytesIO(archive.get(key)), return_record_name=True,
                                     return_record_name_override=True)
            assert list(reader) == [codec.decode(e)[1] for e in histories[wf]]
            assert entry.event_count == len(histories[wf])
        # After deletion, the history is still readable from the archive through the API and the CLI.
        wf = ids[0]
        status, page = server.get(_path(wf, "/archived-history"))
        assert status == 200 and len(page["events"]) == len(histories[wf])
        assert page["events"][-1]["event_type"] == "WORKFLOW_EXECUTION_COMPLETED"
        shown = run_cli("workflow", "show", wf, "--archived", "--server", server.url, "-o", "json")
        assert shown.returncode == 0, shown.stderr
        assert [e["event_id"] for e in json.loads(shown.stdout)] == list(range(1, len(histories[wf]) + 1))
        missing = run_cli("workflow", "show", "never-ran", "--archived", "--server", server.url)
        assert missing.returncode != 0 and "no archived run" in (missing.stdout + missing.stderr)
    finally:
        server.stop()
