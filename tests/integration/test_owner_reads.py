"""Owner reads over HTTP: served from the owning process's store, redirected by any other server."""

from __future__ import annotations

import json
import threading
import time
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


def _raw(url: str, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=timeout) as resp:
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


def _path(wf: str) -> str:
    return f"/api/v1/namespaces/default/workflows/{urllib.request.quote(wf, safe='')}"


def _owned_by(server: ServerProcess) -> set[int]:
    return {o["shard"] for o in server.get("/api/v1/cluster/owners")[1]["owners"] if o["read_endpoint"] == server.url}


def _terminate(server: ServerProcess, wf: str) -> int:
    request = urllib.request.Request(f"{server.url}{_path(wf)}/terminate", data=b'{"reason": "test over"}',
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        return int(resp.status)


def test_long_polls_held_while_their_shards_move_answer_a_redirect_or_503_never_500(
        kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    """One server owns every shard and holds a history long-poll on each of a dozen open runs; a second server
    starts and takes some shards over. The first server's processor closes the stores of the shards it gives up
    while the long-polls wait on them: those answer a redirect to the new owner or a 503 with Retry-After, none
    500; the others go on waiting until their run gains an event. Afterwards every run reads through either
    server."""
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    a = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "a", tmp_path / "a.log").start()
    b = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "b", tmp_path / "b.log")
    try:
        a.wait_owning(SHARDS)
        # No worker serves the queue and the task timeout is long: nothing adds events while the polls wait.
        # Fixed ids that cover every shard (`lp-0` .. `lp-11`: 3, 4, 2 and 3 per shard); random ones miss a shard in
        # one run of eight. Each test has its own topic prefix, so fixed ids never meet.
        ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 12, "sleep", "nobody-q", id_prefix="lp",
                              task_timeout_ms=120_000)
        assert {shard_for("default", wf, SHARDS) for wf in ids} == set(range(SHARDS))
        lengths: dict[str, int] = {}
        deadline = time.monotonic() + 30
        while len(lengths) < len(ids) and time.monotonic() < deadline:
            for wf in set(ids) - set(lengths):
                status, page = a.get(f"{_path(wf)}/history")
                if status == 200 and page["events"]:
                    lengths[wf] = len(page["events"])
            time.sleep(0.2)
        assert len(lengths) == len(ids), lengths

        answers: dict[str, tuple[int, dict[str, str], bytes]] = {}

        def poll(wf: str) -> None:
            answers[wf] = _raw(f"{a.url}{_path(wf)}/history?wait_ms=60000&next_page_token={lengths[wf] + 1}",
                               timeout=90)

        polls = [threading.Thread(target=poll, args=(wf,)) for wf in ids]
        for thread in polls:
            thread.start()
        time.sleep(1.0)
        assert not answers  # every poll is caught up and waiting
        b.start()
        b.wait_owning(1)
        moved: list[str] = []
        deadline = time.monotonic() + 50  # well within the polls' 60 s: the moves, not the waits, end them
        while time.monotonic() < deadline and not (moved and all(wf in answers for wf in moved)):
            time.sleep(0.5)
            moved = [wf for wf in ids if shard_for("default", wf, SHARDS) in _owned_by(b)]
        stayed = [wf for wf in ids if wf not in moved]
        assert moved and stayed and not any(wf in answers for wf in stayed), (moved, sorted(answers))
        for wf in stayed:  # an event ends the waits of the runs whose shard stayed
            assert _terminate(a, wf) == 200
        for thread in polls:
            thread.join(60)
        assert len(answers) == len(ids)

        statuses = {wf: status for wf, (status, _, _) in answers.items()}
        assert 500 not in statuses.values() and set(statuses.values()) <= {200, 307, 503}, statuses
        for wf in stayed:
            status, _, body = answers[wf]
            assert status == 200 and json.loads(body)["events"][0]["event_type"] == "WORKFLOW_EXECUTION_TERMINATED"
        for wf in moved:
            status, headers, body = answers[wf]
            if status == 307:
                assert headers["Location"].startswith(b.url + _path(wf)), headers
            else:
                assert status == 503 and json.loads(body)["code"] == "shard_unavailable", (status, body)
                assert headers["Retry-After"] == "1"

        for wf in ids:  # the new owners serve them; the old one redirects
            deadline = time.monotonic() + 30
            while (status := a.get(_path(wf))[0]) == 503 and time.monotonic() < deadline:
                time.sleep(0.5)
            assert status == 200, (wf, status)
        for server in (a, b):
            assert "Error handling request" not in server.log.read_text(errors="replace"), server.tail()
    finally:
        b.stop()
        a.stop()
