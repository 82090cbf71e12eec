"""The chaos cluster (two `ostinato server` processes, two SDK worker processes, on a three-broker Kafka) and the
faults done to it, each recorded as a `FaultEvent` with what it needs for its figures.

Blocking steps (process start and stop, Kafka admin calls) run in threads, so the workload's event loop keeps
its schedule while a fault is being done.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import signal
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import admin_client
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.cluster import init_cluster
from tests.tools.chaos_load import FrontDoor, now_ms
from tests.tools.chaos_worker import WorkerProcess
from tests.tools.servers import ServerProcess

__all__ = ["SERVER_NAMES", "ChaosCluster", "FaultEvent", "Faults"]

SHARDS = 4
QUEUE = "chaos"
SERVER_NAMES = ("a", "b")
# How long a SIGSTOP lasts: past the processor's group session (10 s before issue 16's fixes; since then the
# brokers' minimum, at least 3 s), so the frozen server's shards move and it comes back as a zombie to be fenced.
STOP_S = 14.0
OWN_TIMEOUT_S = 90.0
HANDOVER_POLL_S = 0.05  # how often the heir's ownership table is read while a SIGTERM'd server hands over
FREEZE_TRIES = 60  # attempts at catching a server with a transaction open (each a SIGSTOP of a few milliseconds)


@dataclass
class FaultEvent:
    """One fault: what, to whom, when it struck (epoch ms), and what its figures need.

    Attributes:
        healthy_shards: shards the other server owned when the fault began (a one-server fault), or every shard
            (a broker fault); empty when no gap is measured.
        back_ms: when the victim was running again (restarted, or SIGCONT); 0 if never.
        restart_ms: for both servers killed: when both were started again.
        in_transaction: for a server fault: whether the victim was caught with a transaction open (see
            `Faults.freeze_in_transaction`); None for other faults.
        handover_s: for a SIGTERM: from the signal until the other server had announced every shard as its own
            (restored and serving); None if it never did within `OWN_TIMEOUT_S`.
        exit_s: for a SIGTERM: from the signal until the stopped server's process exited.
    """

    kind: str
    target: str
    at_ms: int
    healthy_shards: list[int] = field(default_factory=list)
    began_ms: int = field(default_factory=now_ms)  # when the fault began (before any probing for a transaction)
    back_ms: int = 0
    restart_ms: int = 0
    in_transaction: bool | None = None  # a server fault: whether it struck while the victim had a transaction open
    handover_s: float | None = None
    exit_s: float | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ChaosCluster:
    """Two servers (`a`, `b`, own data dirs) and two workers (`w1`, `w2`) of one topic prefix, under `home`."""

    def __init__(self, kafka: KafkaCluster, home: Path, *, shards: int = SHARDS, queue: str = QUEUE,
                 prefix: str | None = None, server_env: dict[str, str] | None = None) -> None:
        self.kafka, self.home, self.shards, self.queue = kafka, home, shards, queue
        self.prefix = prefix or f"chaos{uuid.uuid4().hex[:8]}"
        self.ledger = home / "ledger"
        home.mkdir(parents=True, exist_ok=True)
        self.servers = {name: ServerProcess(kafka.bootstrap, self.prefix, home / f"server-{name}",
                                            home / f"server-{name}.log", env=server_env)
                        for name in SERVER_NAMES}
        self.workers: dict[str, WorkerProcess] = {}

    def start(self, worker_targets: dict[str, str]) -> ChaosCluster:
        """Init the cluster, start both servers until they split the shards, then a worker per entry of
        `worker_targets` (worker name -> the server it fetches histories from)."""
        init_cluster(self.kafka.bootstrap, self.prefix, shards=self.shards)
        for server in self.servers.values():
            server.start()
        for server in self.servers.values():
            server.wait_owning(1, timeout=OWN_TIMEOUT_S)
        self.wait_split()
        for name, target in worker_targets.items():
            self.workers[name] = WorkerProcess(name, self.servers[target].url, self.queue, self.ledger,
                                               self.home / f"worker-{name}.log").start()
        return self

    def wait_split(self, timeout: float = OWN_TIMEOUT_S) -> None:
        """Until the two servers own every shard between them, none twice."""
        deadline = time.monotonic() + timeout
        a, b = (self.servers[n] for n in SERVER_NAMES)
        while time.monotonic() < deadline:
            mine_a, mine_b = set(a.wait_owning()), set(b.wait_owning())
            if mine_a and mine_b and len(mine_a | mine_b) == self.shards and not mine_a & mine_b:
                return
            time.sleep(0.3)
        raise TimeoutError(f"the shards were not split between the two servers in {timeout:.0f}s")

    def owned_by(self, name: str) -> list[int]:
        """Shards the server claimed since it (re)started, per the ownership table."""
        return self.servers[name].wait_owning(timeout=10)

    def stop(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        for server in self.servers.values():
            server.stop()


def _other(name: str) -> str:
    return SERVER_NAMES[1 - SERVER_NAMES.index(name)]


def open_transaction(admin: AdminClient, partitions: list[TopicPartition]) -> bool:
    """Whether a transaction is open on any of `partitions`: its last stable offset is behind its end."""
    spec = {tp: OffsetSpec.latest() for tp in partitions}
    stable = admin.list_offsets(spec, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=5)
    end = admin.list_offsets(spec, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=5)
    return any(stable[tp].result().offset < end[tp].result().offset for tp in partitions)


class Faults:
    """The fault actions; each appends its `FaultEvent`s to `events` and keeps `door` (the servers clients may use)
    in step: a server is marked down just before it is hurt and up once it owns shards again."""

    def __init__(self, cluster: ChaosCluster, door: FrontDoor) -> None:
        self.cluster = cluster
        self.door = door
        self.events: list[FaultEvent] = []
        self.hurting: set[str] = set()  # processes a fault is killing or restarting right now
        self.unexpected: list[dict[str, Any]] = []  # processes that exited on their own

    async def watch(self, every_s: float = 0.5) -> None:
        """Until cancelled: a server or worker that exits while no fault is hurting it is recorded (with its exit
        code and the end of its log) and, for a server, taken out of the front door."""
        seen: set[tuple[str, int]] = set()
        while True:
            processes = [*self.cluster.servers.items(), *self.cluster.workers.items()]
            for name, process in processes:
                proc = process.proc
                if proc is None or name in self.hurting or proc.poll() is None or (name, proc.pid) in seen:
                    continue
                seen.add((name, proc.pid))
                self.unexpected.append({"process": name, "at_ms": now_ms(), "returncode": proc.returncode,
                                        "log_tail": process.tail(12)})
                if name in self.cluster.servers:
                    self.door.mark_down(name)
            await asyncio.sleep(every_s)

    async def freeze_in_transaction(self, name: str) -> bool:
        """SIGSTOP server `name` at a moment it holds a transaction open, and leave it stopped.

        A transaction is open only between a batch's first produce and its commit, a small share of the time, so a
        kill at a random moment rarely leaves one behind; the fault that matters (readers of every partition the
        transaction touched wait for its abort) needs one. So: stop the process, ask the brokers whether the last
        stable offset of its shards' history or state partitions is behind their end (only the owner writes
        there), and if not, let it run a moment and try again. Returns False, the server stopped all the same, when
        no open transaction was caught in FREEZE_TRIES tries.
        """
        server = self.cluster.servers[name]
        shards = await self._owned(name)
        prefix = self.cluster.prefix
        partitions = [TopicPartition(topic_name(prefix, topic), shard)
                      for topic in (Topic.HISTORY, Topic.STATE) for shard in shards]
        admin = admin_client(self.cluster.kafka.bootstrap)
        for _ in range(FREEZE_TRIES if partitions else 0):
            server.signal(signal.SIGSTOP)
            try:
                if await asyncio.to_thread(open_transaction, admin, partitions):
                    return True
            except KafkaException:
                pass
            server.signal(signal.SIGCONT)
            await asyncio.sleep(random.uniform(0.02, 0.2))
        server.signal(signal.SIGSTOP)
        return False

    async def _owned(self, name: str) -> list[int]:
        try:
            return await asyncio.to_thread(self.cluster.owned_by, name)
        except (TimeoutError, RuntimeError):
            return []

    async def _healthy(self, victim: str) -> list[int]:
        try:
            return await asyncio.to_thread(self.cluster.owned_by, _other(victim))
        except (TimeoutError, RuntimeError):
            return []

    async def _back(self, name: str, event: FaultEvent) -> None:
        """Wait until the restarted server owns a shard again (or say in the event that it did not)."""
        server = self.cluster.servers[name]
        try:
            await asyncio.to_thread(server.wait_owning, 1, OWN_TIMEOUT_S)
        except TimeoutError:
            event.note += f" {name} owned no shard {OWN_TIMEOUT_S:.0f}s after its restart;"
        self.door.mark_up(name)

    async def kill_server(self, name: str, down_s: float = 5.0) -> FaultEvent:
        """kill -9 of one server while it holds a transaction open; a supervisor restarts it (same data
        directory) `down_s` later."""
        event = FaultEvent("server_kill", name, 0, await self._healthy(name))
        self.hurting.add(name)
        self.door.mark_down(name)
        event.in_transaction = await self.freeze_in_transaction(name)
        event.at_ms = now_ms()
        await asyncio.to_thread(self.cluster.servers[name].kill)
        self.events.append(event)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(self.cluster.servers[name].start)
        self.hurting.discard(name)
        event.back_ms = now_ms()
        await self._back(name, event)
        return event

    async def stop_server(self, name: str, stopped_s: float = STOP_S) -> FaultEvent:
        """SIGSTOP of one server, caught with a transaction open, for longer than its group session; then
        SIGCONT."""
        event = FaultEvent("server_stop", name, 0, await self._healthy(name))
        self.door.mark_down(name)
        event.in_transaction = await self.freeze_in_transaction(name)
        event.at_ms = now_ms()
        self.events.append(event)
        await asyncio.sleep(stopped_s)
        self.cluster.servers[name].signal(signal.SIGCONT)
        event.back_ms = now_ms()
        await self._back(name, event)
        return event

    async def term_server(self, name: str, down_s: float = 5.0) -> FaultEvent:
        """SIGTERM of one server (a deploy or a scale-in): it leaves the group and the other server takes its
        shards; it is started again `down_s` after it exited. The handover is timed from outside: from the signal
        until the other server announces every shard (`FaultEvent.handover_s`)."""
        event = FaultEvent("server_term", name, 0, await self._healthy(name))
        heir = self.cluster.servers[_other(name)]
        server = self.cluster.servers[name]
        self.hurting.add(name)
        self.door.mark_down(name)
        event.at_ms = now_ms()
        signalled = time.monotonic()
        server.signal(signal.SIGTERM)
        self.events.append(event)

        def handed_over() -> float | None:
            deadline = signalled + OWN_TIMEOUT_S
            while time.monotonic() < deadline:
                try:
                    status, body = heir.get("/api/v1/cluster/owners", timeout=2)
                except OSError:
                    status, body = 0, None
                if status == 200:
                    mine = {o["shard"] for o in body["owners"]
                            if o["read_endpoint"] == heir.url and o["updated_at_ms"] >= event.at_ms}
                    if len(mine | set(event.healthy_shards)) >= self.cluster.shards:
                        return time.monotonic() - signalled
                time.sleep(HANDOVER_POLL_S)
            return None

        exited = asyncio.ensure_future(asyncio.to_thread(server.wait_exit, OWN_TIMEOUT_S))
        handover = await asyncio.to_thread(handed_over)
        event.handover_s = None if handover is None else round(handover, 2)
        if handover is None:
            event.note += f" {heir.url} did not own every shard {OWN_TIMEOUT_S:.0f}s after the SIGTERM;"
        await exited
        event.exit_s = round(time.monotonic() - signalled, 2)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(server.start)
        self.hurting.discard(name)
        event.back_ms = now_ms()
        await self._back(name, event)
        return event

    async def wipe_server(self, name: str) -> FaultEvent:
        """kill -9 of one server (with a transaction open), its data directory deleted, and a restart: every
        shard it gets is restored from the changelogs, and its new transactional id fences nothing, so the open
        transaction lasts until the coordinator aborts it."""
        server = self.cluster.servers[name]
        event = FaultEvent("server_wipe", name, 0, await self._healthy(name))
        self.hurting.add(name)
        self.door.mark_down(name)
        event.in_transaction = await self.freeze_in_transaction(name)
        event.at_ms = now_ms()
        await asyncio.to_thread(server.kill)
        self.events.append(event)
        await asyncio.to_thread(shutil.rmtree, server.data_dir, True)
        await asyncio.to_thread(server.start)
        self.hurting.discard(name)
        event.back_ms = now_ms()
        await self._back(name, event)
        return event

    async def kill_both(self, down_s: float = 3.0) -> FaultEvent:
        """kill -9 of both servers at once (`a` with a transaction open); both restarted `down_s` later."""
        servers = list(self.cluster.servers.values())
        event = FaultEvent("both_servers_kill", "a+b", 0)
        self.hurting.update(SERVER_NAMES)
        for name in SERVER_NAMES:
            self.door.mark_down(name)
        event.in_transaction = await self.freeze_in_transaction(SERVER_NAMES[0])
        event.at_ms = now_ms()
        for server in servers:
            server.signal(signal.SIGKILL)
        await asyncio.gather(*(asyncio.to_thread(s.wait_exit, 30) for s in servers))
        self.events.append(event)
        await asyncio.sleep(down_s)
        event.restart_ms = event.back_ms = now_ms()
        for server in servers:
            await asyncio.to_thread(server.start)
        self.hurting.difference_update(SERVER_NAMES)
        await asyncio.gather(*(self._back(name, event) for name in SERVER_NAMES))
        return event

    async def kill_broker(self, down_s: float = 15.0) -> FaultEvent:
        """kill -9 of the broker leading the first commands partition; restarted `down_s` later."""
        kafka = self.cluster.kafka
        topic = topic_name(self.cluster.prefix, Topic.COMMANDS)

        def leader() -> int:
            return int(admin_client(kafka.bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[0].leader)

        node = await asyncio.to_thread(leader)
        event = FaultEvent("broker_kill", f"broker-{node}", now_ms(), list(range(self.cluster.shards)))
        await asyncio.to_thread(kafka.kill_node, node)
        self.events.append(event)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(kafka.start_node, node)
        event.back_ms = now_ms()
        return event

    async def kill_worker(self, name: str, down_s: float = 5.0) -> FaultEvent:
        """kill -9 of one worker process; restarted `down_s` later."""
        worker = self.cluster.workers[name]
        event = FaultEvent("worker_kill", name, now_ms())
        self.hurting.add(name)
        await asyncio.to_thread(worker.kill)
        self.events.append(event)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(worker.start)
        self.hurting.discard(name)
        event.back_ms = now_ms()
        return event

    async def alternate(self, kills: int = 5, every_s: float = 12.0, down_s: float = 2.0) -> list[FaultEvent]:
        """`kills` kill -9s alternating between the servers (a, b, a, ...), one every `every_s` seconds at most
        as often as the last victim is back."""
        out = []
        for i in range(kills):
            began = time.monotonic()
            out.append(await self.kill_server(SERVER_NAMES[i % 2], down_s))
            await asyncio.sleep(max(0.0, every_s - (time.monotonic() - began)))
        return out
