"""A heartbeating activity is not timed out while its heartbeats' answers are held back (issue 16).

The answer to a heartbeat (which says whether cancellation was asked) comes on a replies partition, which every
server writes to; a server that dies with a transaction open holds every read_committed reader of that partition
until the coordinator aborts it. The SDK worker used to wait for each answer before sending the next heartbeat and
before answering the activity, so the engine, which had every heartbeat in time, timed the attempt out and ran it
again (the chaos suite's alternating kills saw it). Here a producer's open transaction holds every replies
partition for 4 s while an activity with a 1 s heartbeat timeout heartbeats: it must run once.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas.topics import Topic, topic_name
from ostinato.sdk._http import HttpService
from tests.conftest import REPO
from tests.e2e.cli_app import Steady
from tests.tools.servers import ServerProcess

QUEUE = "cli-steady"
HOLD_MS = 4_000  # the open transaction's timeout: how long the replies stay unreadable


def _hold_every_replies_partition(bootstrap: str, prefix: str) -> Producer:
    """A producer that writes one record to each replies partition in a transaction it never ends."""
    topic = topic_name(prefix, Topic.REPLIES)
    rogue = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}-rogue-{uuid.uuid4().hex[:6]}",
                      "transaction.timeout.ms": HOLD_MS})
    rogue.init_transactions(30)
    rogue.begin_transaction()
    for partition in rogue.list_topics(topic, timeout=10).topics[topic].partitions:
        rogue.produce(topic, b"held", partition=partition)
    assert rogue.flush(10) == 0
    return rogue


def _steady_worker(server: ServerProcess, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "ostinato", "worker", "tests.e2e.cli_app:steady_worker", "--server",
                             server.url], cwd=REPO, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def test_an_activity_heartbeating_while_replies_are_held_runs_once(kafka: KafkaCluster, topic_prefix: str,
                                                                   server: ServerProcess, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    log = tmp_path / "worker.log"
    worker = _steady_worker(server, log)
    try:
        async def go() -> tuple[str, list[dict]]:
            async with await HttpService.connect(server.url) as service:
                client = Client(service)
                handle = await client.start_workflow(Steady.run, str(markers), id=f"steady-{uuid.uuid4().hex[:6]}",
                                                     task_queue=QUEUE)
                deadline = time.monotonic() + 60
                while not any(markers.iterdir()):  # the attempt has begun: hold the replies now
                    assert time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
                    await asyncio.sleep(0.05)
                await asyncio.to_thread(_hold_every_replies_partition, kafka.bootstrap, topic_prefix)
                result = await asyncio.wait_for(handle.result(), 90)
                return result, await service.history("default", handle.id, "")

        result, history = asyncio.run(go())
    finally:
        worker.terminate()
        worker.wait(30)
    events = [e["event_type"] for e in history]
    assert result == "attempt 1", (result, events)
    assert sorted(p.name.split("-pid-")[0] for p in markers.iterdir()) == ["attempt-1"]
    assert "ACTIVITY_TASK_TIMED_OUT" not in events


def test_an_attempt_handed_over_too_late_is_not_run_so_it_cannot_run_twice(kafka: KafkaCluster, topic_prefix: str,
                                                                           server: ServerProcess,
                                                                           tmp_path: Path) -> None:
    """The replies are held from before the activity is dispatched: the answer that hands the started attempt to
    the worker (eagerly, or to RecordActivityTaskStarted) comes ~4 s late, after the engine timed the attempt out
    (1 s heartbeat timeout) and retried it. Run then, attempt 1 would run beside attempt 2 (the chaos suite's
    server_kill saw it); the worker leaves it, so the activity runs once, as attempt 2 or later."""
    markers = tmp_path / "markers"
    markers.mkdir()
    log = tmp_path / "worker.log"
    worker = _steady_worker(server, log)
    try:
        async def go() -> str:
            async with await HttpService.connect(server.url) as service:
                client = Client(service)
                (tmp_path / "warm").mkdir()
                warm = await client.start_workflow(Steady.run, str(tmp_path / "warm"),
                                                   id=f"warm-{uuid.uuid4().hex[:6]}", task_queue=QUEUE)
                await asyncio.wait_for(warm.result(), 90)  # the worker is up and caches nothing of the next one
                await asyncio.to_thread(_hold_every_replies_partition, kafka.bootstrap, topic_prefix)
                handle = await client.start_workflow(Steady.run, str(markers), id=f"late-{uuid.uuid4().hex[:6]}",
                                                     task_queue=QUEUE)
                return str(await asyncio.wait_for(handle.result(), 90))

        result = asyncio.run(go())
    finally:
        worker.terminate()
        worker.wait(30)
    runs = sorted(p.name.split("-pid-")[0] for p in markers.iterdir())
    assert len(runs) == 1, (runs, result, log.read_text(errors="replace")[-3000:])
    assert result == runs[0].replace("-", " "), (result, runs)
