"""Owner reads over HTTP: served from the owning process's store, redirected by any other server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas.keys import shard_for
from ostinato.services.admin.cluster import init_cluster
from tests.tools import servers as server_tools
from tests.tools.servers import ServerProcess
from tests.tools.worker import TestWorker
from tests.tools.workload import start_workflows, wait_closed

SHARDS = 4
QUEUE = "q"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _raw(url: str) -> tuple[int, dict[str, str], bytes]:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def two_servers(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path):
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    with server_tools.two_servers(kafka.bootstrap, topic_prefix, tmp_path) as servers:
        yield servers


def test_reads_come_from_the_owner_and_others_redirect(kafka: KafkaCluster, topic_prefix: str,
                                                       two_servers: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = two_servers
    with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
        ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 12, "chain", QUEUE, input="r",
                              id_prefix="read/me")  # a '/' in the id travels percent-encoded
        wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=60)
    owners = {o["shard"]: o["read_endpoint"] for o in a.get("/api/v1/cluster/owners")[1]["owners"]}
    assert set(owners) == set(range(SHARDS)) and set(owners.values()) == {a.url, b.url}
    for wf in ids:
        path = f"/api/v1/namespaces/default/workflows/{urllib.request.quote(wf, safe='')}"
        owner = owners[shard_for("default", wf, SHARDS)]
        other = b if owner == a.url else a
        status, headers, _ = _raw(other.url + path)
        assert status == 307 and headers["Location"].startswith(owner + path), (status, headers)
        for srv in (a, b):  # urllib follows the redirect: both answer the same
            status, body = srv.get(path)
            assert status == 200 and body["status"] == "COMPLETED" and body["workflow_id"] == wf
    wf = ids[0]
    path = f"/api/v1/namespaces/default/workflows/{urllib.request.quote(wf, safe='')}"
    events, token = [], "1"
    while token:
        status, page = a.get(f"{path}/history?page_size=4&next_page_token={token}")
        assert status == 200 and len(page["events"]) <= 4
        events += page["events"]
        token = page["next_page_token"]
    assert [e["event_id"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["event_type"] == "WORKFLOW_EXECUTION_STARTED"
    assert events[-1]["event_type"] == "WORKFLOW_EXECUTION_COMPLETED"
    assert sum(e["event_type"] == "ACTIVITY_TASK_COMPLETED" for e in events) == 3
    status, pending = a.get(f"{path}/pending")
    assert status == 200 and pending["activities"] == [] and pending["status"] == "COMPLETED"


def test_unknown_workflows_and_bad_pages_get_clear_errors(two_servers: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = two_servers
    status, body = a.get("/api/v1/namespaces/default/workflows/nobody")
    assert status == 404 and body["code"] == "not_found" and "nobody" in body["message"]
    status, body = a.get("/api/v1/namespaces/default/workflows/nobody/history?page_size=0")
    assert status == 400 and body["code"] == "invalid_argument"
    status, body = a.get("/api/v1/namespaces/default/workflows/nobody/history?page_size=x")
    assert status == 400


def test_a_server_without_processor_fails_clearly_when_no_owner_is_known(kafka: KafkaCluster, topic_prefix: str,
                                                                         tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    lone = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "d", tmp_path / "d.log", processor=False).start()
    try:
        lone.wait_owning()
        status, _, body = _raw(lone.url + "/api/v1/namespaces/default/workflows/w")
        assert status == 503 and json.loads(body)["code"] == "shard_unavailable", body
    finally:
        lone.stop()
