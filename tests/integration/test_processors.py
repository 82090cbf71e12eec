"""`ostinato server --processors N`: one server, several history processors, each with its own shards and
transactions (issue 15, "no queueing behind one loop"), as threads or as processes of their own
(`--processor-mode process`). The shards are split between them, reads find the right one, histories stay exactly
once, and a restart with fewer processors takes every shard back. Processes end with the server, and a process
that dies takes the server down."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.checker import check_history
from ostinato.services.admin.cluster import init_cluster
from tests.tools.servers import ServerProcess
from tests.tools.worker import TestWorker
from tests.tools.workload import start_workflows, wait_closed

SHARDS = 4
QUEUE = "procs"


def _owners(server: ServerProcess) -> dict[int, str]:
    """shard -> owner id, for the shards this server announced since it started."""
    return {o["shard"]: o["owner_id"] for o in server.get("/api/v1/cluster/owners")[1]["owners"]
            if o["read_endpoint"] == server.url and o["updated_at_ms"] >= server.started_ms}


def _owned_gauge(server: ServerProcess) -> float:
    text = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
    found = re.search(r"^ostinato_processor_owned_shards (\S+)$", text, re.M)
    assert found, "no owned_shards gauge in /metrics"
    return float(found.group(1))


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_two_processors_split_the_shards_and_serve_every_read(kafka: KafkaCluster, topic_prefix: str,
                                                             tmp_path: Path, mode: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log",
                           extra_args=("--processors", "2", "--processor-mode", mode)).start()
    try:
        server.wait_owning(SHARDS)
        # The first processor to join may take every shard; the group then gives the second its share.
        deadline = time.monotonic() + 30
        while len(set((owners := _owners(server)).values())) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sorted(owners) == list(range(SHARDS))
        assert Counter(owners.values()) == {o: 2 for o in set(owners.values())}, (
            f"the shards should be split evenly between two processors: {owners}")
        assert _owned_gauge(server) == SHARDS  # one gauge for the server, not the last processor's count
        with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
            ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 120, "hello", QUEUE)
            closed = wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=120)
        assert Counter(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED": 120}
        for wf in ids:  # every shard's reads are served here, whichever processor holds its store: no redirect
            path = f"/api/v1/namespaces/default/workflows/{urllib.parse.quote(wf, safe='')}"
            status, body = server.get(path)
            assert status == 200 and body["status"] == "COMPLETED", (wf, status, body)
        status, body = server.get(path + "/result")  # the long-poll reads too (served where the waiters are)
        assert status == 200 and body["status"] == "COMPLETED", body
        status, body = server.get(path + "/result?run_id=no-such-run&timeout_ms=20000", timeout=15)
        assert status == 404, body  # a named run that does not exist is not waited for (an outcomes stream asks)
        status, body = server.get(path + "/history?filter=close&wait_ms=1000")
        assert status == 200 and [e["event_type"] for e in body["events"]] == ["WORKFLOW_EXECUTION_COMPLETED"]
        report = check_history(kafka.bootstrap, topic_prefix)
        assert report.ok, report.problems[:20]
        assert report.runs == 120

        # Killed, and back with one processor: it takes every shard, including those the second one held (whose
        # transactional id is not used any more), and goes on.
        server.kill()
        server.extra_args = ()
        server.start()
        server.wait_owning(SHARDS)
        assert len(set(_owners(server).values())) == 1
        with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
            more = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 40, "hello", QUEUE)
            closed = wait_closed(kafka.bootstrap, topic_prefix, more, timeout=120)
        assert Counter(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED": 40}
        report = check_history(kafka.bootstrap, topic_prefix)
        assert report.ok, report.problems[:20]
        assert report.runs == 160
    finally:
        server.stop()


def test_processor_processes_end_with_the_server_and_take_it_down(kafka: KafkaCluster, topic_prefix: str,
                                                                 tmp_path: Path) -> None:
    """SIGKILL of the server leaves no processor process behind (nobody would serve its shards' reads, and it
    would keep the shards from the next server); a processor process that dies ends the server non-zero."""
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log",
                           extra_args=("--processors", "2", "--processor-mode", "process")).start()
    try:
        server.wait_owning(SHARDS)
        assert server.proc is not None
        children = _children(server.proc.pid)
        assert len(children) == 2, f"two processor processes expected under the server: {children}"
        server.kill()  # SIGKILL: no handler runs in the server
        deadline = time.monotonic() + 10
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(c) for c in children), "processor processes outlived their server"

        server.start()  # the same owner ids fence the killed incarnations' transactions at once
        server.wait_owning(SHARDS)
        with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
            ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 20, "hello", QUEUE)
            closed = wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=120)
        assert Counter(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED": 20}
        assert server.proc is not None
        victim = _children(server.proc.pid)[0]
        os.kill(victim, signal.SIGKILL)
        assert server.wait_exit(60) == 1, server.tail()
        assert "process exited with status -9" in server.tail(200)
        report = check_history(kafka.bootstrap, topic_prefix)
        assert report.ok, report.problems[:20]
        assert report.runs == 20
    finally:
        server.stop()


def _nice(pid: int, tid: int | None = None) -> int:
    stat = Path(f"/proc/{pid}" + (f"/task/{tid}" if tid is not None else "") + "/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])  # field 19 of stat(5), after the command name


def test_processor_nice_lowers_the_processor_processes_priority(kafka: KafkaCluster, topic_prefix: str,
                                                                tmp_path: Path) -> None:
    """`--processor-nice 3`: each processor process (and its threads, started after it) runs 3 nice levels below
    the server, and its session's autogroup too, where the kernel has autogroups. A positive value needs no
    privilege, so the test runs anywhere; docs/benchmarks.md ("Sessions") measures what a negative one does."""
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log",
                           extra_args=("--processors", "2", "--processor-mode", "process", "--processor-nice", "3"))
    server.start()
    try:
        server.wait_owning(SHARDS)
        assert server.proc is not None
        children = _children(server.proc.pid)
        assert len(children) == 2, children
        for child in children:
            assert _nice(child) == min(19, _nice(server.proc.pid) + 3)
            threads = [int(t.name) for t in Path(f"/proc/{child}/task").iterdir()]
            assert len(threads) > 3 and {_nice(child, t) for t in threads} == {_nice(child)}
            autogroup = Path(f"/proc/{child}/autogroup")
            if autogroup.exists():
                assert autogroup.read_text().split()[-1] == "3", autogroup.read_text()
        assert "--processor-nice not applied" not in server.tail(200)
    finally:
        server.stop()

