"""The history processor: the exactly-once Kafka loop around the core (DESIGN.md §4).

```
  poll commands ─► decide every command + fire due timers (open overlay) ─► land the batch in flight ─► seal
        ▲                                                                                              │
        │     committer thread: send offsets ─► commit  (in flight while the next batch is decided) ◄──┤
        └──────────────────────────────────────────────────────────────── begin ─► produce outputs ◄───┘
```

Pipelined (issue 15): batch N+1 is polled and decided, over an overlay stacked on batch N's, while N's offsets are
sent and its commit runs in a thread of its own; N+1 is begun and produced only once N has landed (committed and
written to the stores), since Kafka allows one open transaction per producer. Moments that fall due while N is in
flight fire into N+1 at their own time. When N fails, N+1 was decided on state that never existed: both are
dropped and the shards rewound to the committed offsets, as for any abort. `OSTINATO_PIPELINE=0` commits in series.

One transactional producer per processor (a server runs one or more: `processors.py`), exactly-once v2: offsets
are sent with the consumer group's metadata, so a zombie that lost its shards is fenced by the group coordinator.
Every transaction that touches a shard sends that shard's offset, even one that only fired timers, or a zombie could
commit a timer firing nobody consumed a command for. Stores are written only after a commit returns, so they never
hold uncommitted data.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry, Counter

from ostinato.kafka.clients import (
    SESSION_TIMEOUT_ENV,
    STEADY_FETCH_WAIT_MS,
    base_config,
    group_session_config,
    group_session_timeout_ms,
)
from ostinato.kafka.task_topics import TaskTopics
from ostinato.schemas import codec, wire
from ostinato.schemas.cluster import ClusterSettings
from ostinato.schemas.topics import MAX_RECORD_BYTES, Topic, topic_name
from ostinato.services.history.changelog import fire_at_of
from ostinato.services.history.collector import Collector, give_back, take_over
from ostinato.services.history.faults import FaultPoints
from ostinato.services.history.input_gate import UNKNOWN, InputGate, is_timeout
from ostinato.services.history.metrics import ProcessorMetrics
from ostinato.services.history.restore import open_and_restore
from ostinato.services.history.schema_sync import sync_schemas
from ostinato.services.history.shard import Output, Sealed, Shard, Topology
from ostinato.services.history.store import (
    CHECKPOINT_HISTORY,
    CHECKPOINT_STATE,
    CHECKPOINT_TIME,
    RocksStore,
    StoreLocked,
    pack_int,
)
from ostinato.streams.config import Config

log = logging.getLogger("ostinato.processor")

# How long a crashed or frozen owner's open transaction can hold back every read_committed reader of what it touched:
# its shards' changelogs, but also shared partitions (task queues, replies, other shards' commands), so one dead
# server would stall the cluster for this long. The coordinator's clock starts at the first produce, after every
# decision of the batch is made, so a transaction normally lives for a produce and a commit (milliseconds); the
# broker must look for expired transactions often (infra/ sets
# transaction.abort.timed.out.transaction.cleanup.interval.ms=500). librdkafka also bounds each record's delivery
# by it.
TXN_TIMEOUT_MS = int(os.environ.get("OSTINATO_TXN_TIMEOUT_MS", "2000"))
OPERATION_TIMEOUT_S = 30.0
MAX_TIMERS_PER_SHARD = 500  # deadlines fired per shard per batch: a burst of timers cannot starve commands
IDLE_POLL_S = 0.5
# Timers on time (issue 15): a batch that would still be deciding commands when the next deadline falls due takes
# only as many as fit before it, plus this much more work; deadlines already due leave room for this much only.
# The deadline then fires in the next transaction, late by about one commit instead of one full batch.
TIMER_SLACK_S = 0.01
LATE_PASSES = 4  # looks for moments that fell due while a batch decided (`_fire_fallen_due`)
MIN_ROOM = 4  # commands a batch may always take, so commands keep moving under a storm of deadlines
HOLD_POLL_S = 0.02  # while timeouts are held: about one fetch
HOLD_LOG_AFTER_MS = 1_000
HIGH_WATERMARK_TIMEOUT_S = 2.0  # asking the leader for a partition's end; timeouts stay held if it does not answer
# Of a transaction, in order (metrics): "decide" includes taking commands while the previous batch commits; "wait"
# is what is left of that commit after deciding.
PHASES = ("decide", "wait", "produce", "send_offsets", "commit", "after_commit")
STOP_ABORT_TIMEOUT_S = 5.0
# Every type a batch reads or writes: their Avro code is generated at start, not on the first batch.
HOT_TYPES = (wire.COMMAND, wire.HISTORY_EVENT, wire.MUTABLE_STATE, wire.CURRENT_RUN, wire.VISIBILITY,
             wire.WORKFLOW_TASK, wire.QUERY_TASK, wire.ACTIVITY_TASK, wire.REPLY)
IN_FLIGHT_LOOK_S = 0.005  # while a batch commits, new commands are taken this often (and at once when it returns)
# While the last transaction commits, the open batch may grow to this many times `max_batch` (`_decide_in_flight`).
IN_FLIGHT_BATCHES = 4
LINGER_MIN_DECISIONS = 8  # a transaction this large means load: the next one lingers (`ProcessorOptions.linger_ms`)
REBUILD_ATTEMPTS = 5  # a new producer after a fatal error, 1 s apart, before the server gives up (and restarts)
# A shard's store can still be locked when it is assigned: a sibling processor of the same server (same data
# directory) that lost it is still closing it, or a frozen one holds it. Retried this long, then the server exits.
STORE_LOCKED_WAIT_S = 30.0


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Flight:
    """A produced batch whose offsets and commit run in the committer thread."""

    number: int  # the processor's count of transactions begun, this one included
    sealed: dict[int, Sealed]  # shard -> its part of the batch
    commands: int
    fired: int
    started: float  # perf_counter marks: the batch's decide began, ended, its transaction began, it was produced
    decided: float
    begun: float
    produced: float
    done: Future[tuple[float, float]]  # when its offsets were sent and when it committed


@dataclass
class ProcessorOptions:
    data_dir: Path
    owner_id: str = ""  # stable per data directory (the transactional id derives from it)
    read_endpoint: str = ""
    max_batch: int = 500
    session_timeout_ms: int | None = None  # None: the shortest the brokers allow, but at least 3 s
    restore_write_every: int = 5_000
    config: Config = field(default_factory=Config)
    config_for: Callable[[str], Config] | None = None  # per-namespace settings; `config` for every namespace if None
    on_history: Callable[[set[bytes]], None] | None = None  # after each landing or abort: runs (`ns/wf/run`) it changed
    on_release: Callable[[], None] | None = None  # after shards were closed: held reads look whether theirs moved
    pipeline: bool = True  # decide the next batch while the last one's commit is in flight
    # Under load, transactions begin at least this far apart: the broker's work per transaction (a marker on every
    # partition it wrote, the offsets, the transaction log) is then shared by more commands. 0: ship as soon as the
    # last one committed. Only after a transaction of `LINGER_MIN_DECISIONS` or more, so a lone step never waits.
    linger_ms: int = 0
    # While the last transaction's commit is in flight, the open batch goes on taking the commands that arrive up to
    # this many (None: `IN_FLIGHT_BATCHES` x `max_batch`), rather than stopping at `max_batch` and idling until the
    # commit returns: what arrives meanwhile rides in the next transaction either way, so deciding it now costs no
    # latency. A deadline still cuts the batch (`batch_room`).
    max_batch_in_flight: int | None = None

    @property
    def in_flight_cap(self) -> int:
        """The most commands a batch may take while the last one's commit is in flight."""
        if self.max_batch_in_flight is not None:
            return max(self.max_batch, self.max_batch_in_flight)
        return IN_FLIGHT_BATCHES * self.max_batch

    @classmethod
    def from_env(cls, data_dir: Path, read_endpoint: str = "") -> ProcessorOptions:
        """Options with the tuning knobs operators and chaos tests set through the environment."""
        env = os.environ
        return cls(data_dir=data_dir, read_endpoint=read_endpoint,
                   max_batch=int(env.get("OSTINATO_MAX_BATCH", "500")),
                   session_timeout_ms=int(env[SESSION_TIMEOUT_ENV]) if env.get(SESSION_TIMEOUT_ENV) else None,
                   restore_write_every=int(env.get("OSTINATO_RESTORE_WRITE_EVERY", "5000")),
                   pipeline=env.get("OSTINATO_PIPELINE", "1") != "0",
                   linger_ms=int(env.get("OSTINATO_LINGER_MS", "0")),
                   max_batch_in_flight=(int(env["OSTINATO_MAX_BATCH_IN_FLIGHT"])
                                        if env.get("OSTINATO_MAX_BATCH_IN_FLIGHT") else None),
                   # Retention of namespaces that have no record of their own (the default one); tests shorten it.
                   config=Config(retention_ms=int(env.get("OSTINATO_DEFAULT_RETENTION_MS", Config().retention_ms)),
                                 egress_topics=egress_patterns(env.get(EGRESS_ENV, ""))))


class Processor:
    """Owns the shards Kafka's group protocol gives it; run `run()` in its own thread."""

    def __init__(self, bootstrap: str, settings: ClusterSettings, options: ProcessorOptions,
                 registry: CollectorRegistry | None = None, faults: FaultPoints | None = None,
                 metrics: ProcessorMetrics | None = None) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self.options = options
        self.prefix = settings.topic_prefix
        self.owner_id = options.owner_id or owner_id_of(options.data_dir / self.prefix)
        # Several processors of one server share one set (`processors.py`); one alone registers its own.
        self.metrics = metrics or ProcessorMetrics(registry if registry is not None else CollectorRegistry())
        self._collector = Collector(self.metrics.gc_seconds)
        self._phases = {p: self.metrics.phase_seconds.labels(p) for p in PHASES}  # labels resolved once, off the loop
        self.faults = faults if faults is not None else FaultPoints.from_env()
        self.commands_topic = topic_name(self.prefix, Topic.COMMANDS)
        self.state_topic = topic_name(self.prefix, Topic.STATE)
        self.history_topic = topic_name(self.prefix, Topic.HISTORY)
        self.cluster_topic = topic_name(self.prefix, Topic.CLUSTER)
        self.task_topics = TaskTopics(bootstrap, self.prefix, settings.replication_factor)
        self.egress = EgressTopics(bootstrap)
        self.topology = Topology(self.prefix, settings.shards, settings.reply_partitions, self.task_topics.partitions,
                                 self.egress.partitions)
        self.shards: dict[int, Shard] = {}
        self.next_offsets: dict[int, int] = {}  # shard -> next command offset to process
        self.ready = threading.Event()  # set once subscribed (tests wait on it)
        self.restored = threading.Event()  # set after the first assignment is restored
        self._announce: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.RLock()  # guards `shards` for readers on other threads
        self._delivered: dict[tuple[str, int], int] = {}
        self._delivery_error: KafkaError | None = None
        self._batch_no = 0
        self._gates: dict[int, InputGate] = {}  # shard -> timeouts held until its commands are read
        self._holding = False
        self._hold_logged: dict[int, int] = {}
        # When the stores may be behind what Kafka says (see `settled`): a transaction failed and none has
        # committed since, or the open one began long ago. Written by the processor thread, read by the API's.
        self._failed_since: float | None = None
        self._open_since: float | None = None
        self._session_s = 0.0
        self._decide_s = 0.0  # seconds one decision (a command or a firing) took, moving average
        self._next_due_ms: int | None = None  # the earliest deadline of the owned shards, as of the last look
        # Fetched commands a batch left undecided because a deadline fell due meanwhile (`_decide_commands`): the
        # next batch takes them first, so the deadline fires one commit late, not one batch late.
        self._carry: list[Message] = []
        self._flight: Flight | None = None  # the batch whose commit is in flight (`pipeline`)
        self._linger_until = 0.0  # perf_counter time before which a busy processor does not ship (`linger_ms`)
        self._flight_error: KafkaException | None = None  # a flight that failed while a rebalance callback landed it
        self._in_transaction = False  # a batch's, begun and neither committed nor aborted
        self._begun_ahead = False  # an empty transaction, begun by the committer thread after a commit (`_begin_next`)
        # Transactions begun, and how many of them are in the stores or were aborted (`mark`, `landed`): written by
        # the processor thread, read by the API's. Ints, each set in one step.
        self._txns_begun = 0
        self._txns_landed = 0
        self._committer = ThreadPoolExecutor(1, thread_name_prefix="ostinato-commit")
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None
        self._restorer: Consumer | None = None
        self._watermarks: Consumer | None = None  # read_uncommitted, never subscribed: asks leaders for log ends

    # -- life cycle -----------------------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Process until `stop()`; leaves the group cleanly (revocation closes the stores)."""
        sync_schemas(self.bootstrap, self.prefix)
        codec.registry().prepare(HOT_TYPES)
        self.producer = self._new_producer()
        # The environment's setting is in the options already (`from_env`); a caller's options say it alone.
        session_ms = self.options.session_timeout_ms or group_session_timeout_ms(self.bootstrap, {})
        self._session_s = session_ms / 1000
        self._restorer = Consumer({**base_config(self.bootstrap, f"{self.owner_id}-restore"),
                                   "group.id": f"{self.prefix}-restore-unused", "enable.auto.commit": False,
                                   "isolation.level": "read_committed", "enable.partition.eof": True,
                                   "auto.offset.reset": "error", "fetch.wait.max.ms": 10,
                                   "fetch.max.bytes": MAX_RECORD_BYTES * 2})
        # A read_committed consumer's ListOffsets answers the last stable offset, which stops at an open
        # transaction: the input gate needs the end of the log, so it asks through a read_uncommitted client.
        self._watermarks = Consumer({**base_config(self.bootstrap, f"{self.owner_id}-watermarks"),
                                     "group.id": f"{self.prefix}-watermarks-unused", "enable.auto.commit": False,
                                     "isolation.level": "read_uncommitted"})
        self.consumer = Consumer({
            **base_config(self.bootstrap, self.owner_id),
            "group.id": f"{self.prefix}-history",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            **group_session_config(session_ms),
            "fetch.wait.max.ms": STEADY_FETCH_WAIT_MS,
            "fetch.max.bytes": MAX_RECORD_BYTES * 4,
        })
        self.consumer.subscribe([self.commands_topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)
        # Learn the changelogs' partitions while the group forms (the join runs in librdkafka's threads): a
        # restorer's first assignment otherwise waits ~0.5 s for that metadata, on the path of every restart
        # (measured: first empty restore 0.65 s, then 0.1 s; with this and the 10 ms fetch wait, 0.02-0.04 s).
        for topic in (self.state_topic, self.history_topic):
            self._restorer.list_topics(topic, timeout=OPERATION_TIMEOUT_S)
        self.ready.set()
        log.info("processor %s subscribed to %s (group session %d ms)", self.owner_id, self.commands_topic, session_ms)
        take_over()
        tid = threading.get_native_id()
        self.metrics.thread_times.add(tid)
        try:
            while not self._stop.is_set():
                self.step()
        finally:
            self.metrics.thread_times.discard(tid)
            give_back()
            self._settle()
            self.consumer.close()
            self._committer.shutdown(wait=True)
            self._close_shards(list(self.shards))
            self._restorer.close()
            self._watermarks.close()
            if self.producer is not None:
                self._abort_open()
                self.producer.flush(5)

    def _abort_open(self) -> None:
        """Stopping: abort the transaction still open, the empty one begun ahead, or a failed batch's (the next
        incarnation's `init_transactions` would, but read_committed readers of its partitions wait until then)."""
        assert self.producer is not None
        if not (self._in_transaction or self._begun_ahead):
            return
        try:
            self.producer.abort_transaction(STOP_ABORT_TIMEOUT_S)
        except KafkaException as exc:
            log.info("aborting the open transaction at stop: %s", exc.args[0].str())
        self._in_transaction = self._begun_ahead = False

    def _new_producer(self) -> Producer:
        producer = Producer({
            **base_config(self.bootstrap, f"{self.owner_id}-producer"),
            "transactional.id": f"{self.prefix}-processor-{self.owner_id}",
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 1,
            "retry.backoff.ms": 10,
            "retry.backoff.max.ms": 100,
            "message.max.bytes": MAX_RECORD_BYTES + 64 * 1024,
            "queue.buffering.max.messages": 1_000_000,
        })
        producer.init_transactions(OPERATION_TIMEOUT_S)  # fences and aborts this owner's previous incarnation
        return producer

    # -- rebalancing ----------------------------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Restore every newly owned shard before its commands are fetched (no transaction is open here)."""
        self._settle()
        self._drop_carried({tp.partition for tp in partitions})  # re-read from the committed offset now
        for tp in partitions:
            try:
                self._open_shard(tp.partition)
            except Exception:
                log.exception("shard %d: restore failed; giving the shard back", tp.partition)
                raise
        consumer.incremental_assign(partitions)
        if partitions:
            self._read_committed_offsets([tp.partition for tp in partitions])
        self.restored.set()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Callbacks run inside poll, between transactions: the batch in flight lands first, so nothing is open
        and the stores hold every commit."""
        self._settle()
        self._drop_carried({tp.partition for tp in partitions})  # uncommitted: the next owner reads them again
        self._close_shards([tp.partition for tp in partitions])
        consumer.incremental_unassign(partitions)

    def _open_shard(self, index: int) -> None:
        assert self._restorer is not None
        path = self.options.data_dir / self.prefix / f"shard-{index}"
        waited, backoff = 0.0, 0.05
        while True:
            try:
                store, result = open_and_restore(
                    path, index, self.state_topic, self.history_topic, self._restorer, self.options.config,
                    now_ms=wall_ms, write_every=self.options.restore_write_every,
                    on_batch=lambda n: self.faults.hit("mid-restore"), config_for=self.options.config_for)
                break
            except StoreLocked as exc:
                if waited >= STORE_LOCKED_WAIT_S:
                    raise
                log.warning("shard %d: %s; trying again in %.2f s", index, exc, backoff)
                time.sleep(backoff)
                waited += backoff
                backoff = min(1.0, backoff * 2)
        self.metrics.restore_seconds.observe(result.seconds)
        self.metrics.restore_records.inc(result.records)
        with self._lock:
            self.shards[index] = Shard(index, store, self.topology, self.options.config,
                                       config_for=self.options.config_for)
        self.metrics.owned_shards.inc()  # inc/dec, not set: the gauge is the server's, shared by its processors
        self._announce.add(index)
        log.info("shard %d: owned by %s (restored %d records in %.2fs)", index, self.owner_id, result.records,
                 result.seconds)

    def _close_shards(self, indexes: list[int]) -> None:
        with self._lock:
            for index in indexes:
                shard = self.shards.pop(index, None)
                self.next_offsets.pop(index, None)
                self._gates.pop(index, None)
                self._announce.discard(index)
                if shard is not None:
                    shard.store.close()
                    self.metrics.owned_shards.dec()
                    log.info("shard %d: released by %s", index, self.owner_id)
        if indexes and self.options.on_release is not None:  # after the table changed: a woken read sees the move
            self.options.on_release()

    def _drop_carried(self, partitions: set[int]) -> None:
        self._carry = [msg for msg in self._carry if msg.partition() not in partitions]

    def _read_committed_offsets(self, indexes: list[int]) -> None:
        """Where each shard's commands resume: the group's committed offset (stable: it waits for a pending
        transaction of the previous owner), or the partition's start when nothing was ever committed."""
        assert self.consumer is not None
        tps = [TopicPartition(self.commands_topic, i) for i in indexes]
        for tp in self.consumer.committed(tps, timeout=OPERATION_TIMEOUT_S):
            offset = tp.offset
            if offset < 0:
                offset = self.consumer.get_watermark_offsets(tp, timeout=10.0, cached=False)[0]
            self.next_offsets[tp.partition] = offset

    # -- the loop -------------------------------------------------------------------------------------------------

    def step(self) -> None:
        """One batch: whatever commands arrived, plus due timers, in one transaction; with `pipeline`, decided while
        the previous batch's commit is in flight."""
        assert self.consumer is not None
        messages = self._poll()
        if self._flight_error is not None:  # a rebalance callback landed a flight that had failed
            exc, self._flight_error = self._flight_error, None
            self._recover(exc)
            return
        now = wall_ms()
        commands = self._commands_of(messages)
        due = {i: self._judged(i, s.due_timers(now, MAX_TIMERS_PER_SHARD), now) for i, s in self.shards.items()}
        if not commands and not any(due.values()) and not self._announce and self._flight is None:
            next_due = self._next_due_ms
            self._collector.idle(math.inf if next_due is None else (next_due - now) / 1000)
            return
        try:
            self._transaction(commands, due, now)
        except KafkaException as exc:
            self._recover(exc)
            return
        self._collector.busy()  # pipelined, the batch's commit round trip overlaps the collection, if one is due

    def _commands_of(self, messages: list[Message]) -> list[Message]:
        commands: list[Message] = []
        for msg in messages:
            err = msg.error()
            if err is None:
                commands.append(msg)
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning("consuming %s: %s", self.commands_topic, err.str())
        return commands

    def _poll(self) -> list[Message]:
        """Return as soon as one command is there (a batch never waits to fill), then take what else is ready."""
        assert self.consumer is not None
        if self._carry:  # the last batch stopped at a deadline: its rest first, then whatever else is ready
            self._refresh_next_due()  # for the room
            room = self._room(wall_ms()) - len(self._carry)
            more = self.consumer.consume(room, timeout=0) if room > 0 else []  # may revoke: prunes the carry
            carried, self._carry = self._carry, []
            return [*carried, *more]
        first = self.consumer.poll(self._poll_timeout())
        if first is None:
            return []
        room = self._room(wall_ms())
        return [first, *self.consumer.consume(room - 1, timeout=0)] if room > 1 else [first]

    def _room(self, now_ms: int, cap: int | None = None) -> int:
        cap = self.options.max_batch if cap is None else cap
        return batch_room(cap, self._next_due_ms, self._decide_s, now_ms, self._holding_any())

    def _judged(self, index: int, keys: list[bytes], now: int) -> list[bytes]:
        """The due deadlines that may fire now: timeouts wait until everything written to the shard's commands
        before they fell due has been read (`input_gate.py`)."""
        if not keys:
            return keys
        assert self.consumer is not None
        tp = TopicPartition(self.commands_topic, index)
        position = self.consumer.position([tp])[0].offset
        gate = self._gates.setdefault(index, InputGate())
        high = UNKNOWN  # only asked for when the gate takes a new target
        if gate.target is None and any(is_timeout(k) for k in keys):
            high = self._high_watermark(tp)
        ready, held = gate.judge(keys, now, position, high)
        if held:
            self.metrics.timeouts_held.inc(held)
            self._holding = True
            waited = gate.held_for_ms(now)
            if waited >= HOLD_LOG_AFTER_MS and now - self._hold_logged.get(index, 0) >= HOLD_LOG_AFTER_MS:
                self._hold_logged[index] = now
                log.warning("shard %d: %d timeouts held for %d ms: the commands partition is unreadable past offset "
                            "%d (waiting to read up to %d; an open transaction of a crashed or frozen producer?)",
                            index, held, waited, position, gate.target if gate.target is not None else high)
        return ready

    def _high_watermark(self, tp: TopicPartition) -> int:
        """The partition's end as the leader has it now. Not the consumer's cached figure: that is as old as the
        last fetch response, so a completion written just before a timeout fell due could be missed (the chaos
        suite's SIGTERM caught a heartbeat timeout fired over a heartbeat that way, during a rebalance). Nor the
        processor's consumer's own query: read_committed, it answers the last stable offset."""
        assert self._watermarks is not None
        try:
            high = self._watermarks.get_watermark_offsets(tp, timeout=HIGH_WATERMARK_TIMEOUT_S, cached=False)[1]
        except KafkaException as exc:
            log.debug("high watermark of %s[%d]: %s", tp.topic, tp.partition, exc)
            return UNKNOWN
        return high if high >= 0 else UNKNOWN

    def _refresh_next_due(self) -> int | None:
        self._next_due_ms = self._earliest_deadline()
        return self._next_due_ms

    def _earliest_deadline(self, after_ms: int = -1) -> int | None:
        found = [t for t in (s.next_timer_ms(after_ms) for s in self.shards.values()) if t is not None]
        return min(found) if found else None

    def _poll_timeout(self) -> float:
        next_due = self._refresh_next_due()
        if self._announce or self._flight is not None:  # a flight is waited for after the poll (`_land`)
            return 0.0
        if self._holding:  # due timeouts wait for the inputs: look again after a fetch, not in a busy loop
            self._holding = False
            return HOLD_POLL_S
        if next_due is None:
            return IDLE_POLL_S
        return min(IDLE_POLL_S, max(0.0, (next_due - wall_ms()) / 1000))

    def _transaction(self, commands: list[Message], due: dict[int, list[bytes]], now: int) -> None:
        """Decide the batch, and while the one in flight commits go on taking and deciding what arrives (firing what
        falls due), land it, then hand this one to the committer thread; without `pipeline`, land it too."""
        started = time.perf_counter()
        touched: set[int] = set()
        moments, timeouts = split_due(due)
        fired = self._fire(moments, now, touched)
        decided_commands, last = self._decide_commands(commands, touched, now, due)
        fired += self._fire(timeouts, last, touched)
        fired += self._fire_fallen_due(now, touched, floor=last)
        if decided_commands or fired:
            per = (time.perf_counter() - started) / (decided_commands + fired)
            self._decide_s = per if self._decide_s == 0 else 0.8 * self._decide_s + 0.2 * per
        if self._flight is not None:
            more, more_fired, last = self._decide_in_flight(now, last, touched, decided_commands)
            decided_commands, fired = decided_commands + more, fired + more_fired
        decided = time.perf_counter()
        if self._flight is not None:
            fired += self._land(now, touched, floor=last)
        if touched and time.perf_counter() < self._linger_until:  # the "wait" phase, with the landing
            more, more_fired, last = self._decide_lingering(now, last, touched, decided_commands)
            decided_commands, fired = decided_commands + more, fired + more_fired
        if touched or self._announce:
            self._ship(touched | self._announce, decided_commands, fired, started, decided)
        if not self.options.pipeline:
            self._land(now, None)

    def _decide_in_flight(self, now: int, last: int, touched: set[int], taken: int) -> tuple[int, int, int]:
        """Until the batch in flight lands, take the commands that arrive and decide them into the open batch, and
        fire the moments that fall due. Everything that arrives before the commit returns rides in the next
        transaction, as it did when commits ran in series (as few transactions, markers and offset commits for
        the broker), but it is decided meanwhile. Each look has its own time, never earlier than the last, and
        moments fire before the commands that come after them, so a workflow's events still go forward in time;
        timeouts wait for the next batch's input gate. Stops when the batch is full (`in_flight_cap`: stopping at
        `max_batch`, bench/processor.py's thread idled 0.5-0.6 s of a 9 s window waiting for commits) or was cut
        at a deadline (its rest goes first in the next). A rebalance during a look lands the flight in its
        callback (`_settle`).
        `now` is the batch's time (what was due by then and not fired is a backlog for the next batches), `last`
        the time of its last decision. Returns the commands decided, the moments fired and the time of the last
        decision or look."""
        assert self.consumer is not None
        decided = fired = 0
        while self._flight is not None and not self._stop.is_set():
            room = self._room(wall_ms(), self.options.in_flight_cap) - taken - decided
            if self._carry or room <= 0:
                break
            flight = self._flight.done
            wait([flight], timeout=IN_FLIGHT_LOOK_S)  # wakes at once when the commit returns
            messages = self.consumer.consume(room, timeout=0)
            if self._flight_error is not None:  # the flight failed while a rebalance callback landed it
                exc, self._flight_error = self._flight_error, None
                raise exc
            more, more_fired, last = self._take(messages, now, last, touched)
            decided, fired = decided + more, fired + more_fired
            if flight.done():  # what arrived until it returned has been taken: ship now
                break
        return decided, fired, last

    def _decide_lingering(self, now: int, last: int, touched: set[int], taken: int) -> tuple[int, int, int]:
        """After the last transaction landed, go on taking commands into the open batch until `_linger_until`, as
        while it was in flight (`_decide_in_flight`): a busy processor ships fewer, larger transactions. Moments
        that fall due meanwhile fire into the batch at their own time. Returns what `_decide_in_flight` does."""
        assert self.consumer is not None
        decided = fired = 0
        while not self._stop.is_set():
            room = self._room(wall_ms()) - taken - decided
            left = self._linger_until - time.perf_counter()
            if self._carry or room <= 0 or left <= 0:
                break
            messages = self.consumer.consume(room, timeout=min(left, IN_FLIGHT_LOOK_S))
            more, more_fired, last = self._take(messages, now, last, touched)
            decided, fired = decided + more, fired + more_fired
        return decided, fired, last

    def _take(self, messages: list[Message], now: int, last: int, touched: set[int]) -> tuple[int, int, int]:
        """One look of an open batch between its decide and its ship: fire the moments that fell due since `last`,
        then decide the commands fetched, each at its own time. Returns the commands decided, the moments fired
        and the time of the look or of its last decision."""
        fired = self._fire_fallen_due(now, touched, self.metrics.timers_fired_in_flight, floor=last)
        at = max(last, wall_ms())
        commands = self._commands_of(messages)
        if not commands:
            return 0, fired, at
        decided, last = self._decide_commands(commands, touched, at, {})
        return decided, fired, last

    def _ship(self, touched: set[int], commands: int, fired: int, started: float, decided: float) -> None:
        """Begin the batch's transaction, produce its records and hand its offsets and commit to the committer
        thread. Its shards' overlays are sealed: the next batch is decided above them until it lands."""
        assert self.producer is not None and self.consumer is not None
        begun = time.perf_counter()
        self._linger_until = linger_until(self.options, commands + fired, begun)
        self._open_since = time.monotonic()
        self._txns_begun += 1
        if not self._begun_ahead:  # the committer thread begins the next one after each commit (`_begin_next`)
            self.producer.begin_transaction()
        self._begun_ahead, self._in_transaction = False, True
        sealed = {i: self.shards[i].seal() for i in sorted(touched) if i in self.shards}
        self._produce_batch(sealed)
        self.faults.hit("after-produce")
        produced = time.perf_counter()
        offsets = [TopicPartition(self.commands_topic, i, self.next_offsets[i]) for i in sorted(touched)
                   if i in self.next_offsets]
        metadata = self.consumer.consumer_group_metadata()
        done = self._committer.submit(self._send_offsets_and_commit, offsets, metadata)
        self._flight = Flight(self._txns_begun, sealed, commands, fired, started, decided, begun, produced, done)

    def _send_offsets_and_commit(self, offsets: list[TopicPartition], metadata: Any) -> tuple[float, float, bool]:
        """In the committer thread: both round trips of the transaction's end, then the next transaction's begin
        (the producer is not touched by the processor thread until this returns). Returns when the offsets were
        sent, when the commit returned, and whether the next transaction is begun."""
        assert self.producer is not None
        self.producer.send_offsets_to_transaction(offsets, metadata, OPERATION_TIMEOUT_S)
        self.faults.hit("after-send-offsets")
        sent = time.perf_counter()
        self._commit()
        self.faults.hit("after-commit")
        committed = time.perf_counter()
        return sent, committed, self._begin_next()

    def _begin_next(self) -> bool:
        """Begin the next transaction here, while the processor thread decides its batch. `begin_transaction` is
        local, but librdkafka runs it on its main thread and waits for the answer: on a loaded machine that took
        70-150 ms of the processor thread's wall time with no CPU spent (S4, a trail of the loop's steps), and the
        timers due meanwhile fired that late. A refusal is left for the processor thread to meet again in `_ship`,
        where it is recovered from as before: the commit that just returned must still land, so nothing raised here
        may reach its future (a failed flight is aborted and its overlays dropped; librdkafka's callbacks have
        raised a SystemError from a call under load, see `_rebuild`)."""
        assert self.producer is not None
        try:
            self.producer.begin_transaction()
        except Exception as exc:  # noqa: BLE001 - whatever it is, `_ship` meets it again
            log.info("beginning the next transaction after a commit: %s: %s", type(exc).__name__, exc)
            return False
        return True

    def _land(self, now: int, touched: set[int] | None, floor: int | None = None) -> int:
        """Wait for the batch in flight, then write it to the stores and wake its readers. With `touched` (the open
        batch's shards), moments that fall due meanwhile fire into the open batch at their own time, as at the end
        of its decide (`_fire_fallen_due`): a commit round trip under load (S4: p99 250-400 ms) is no longer a
        timer's wait. `now` is the open batch's time, `floor` the time of its last decision (nothing fires
        stamped earlier); what fell due between them and did not fire yet (while commands were decided) fires
        first. Returns how many fired. A failed flight is dropped and its error raised (the caller recovers: abort,
        reset both overlays, rewind)."""
        flight = self._flight
        assert flight is not None
        fired, since = 0, now
        try:
            while True:
                if touched is not None:
                    looked = wall_ms()
                    fired += self._fire_fallen_due(now, touched, self.metrics.timers_fired_in_flight, floor=floor)
                    since = max(since, looked)  # timeouts due by then wait for the next batch's gate: no busy wait
                next_due = self._earliest_deadline(after_ms=since) if touched is not None else None
                timeout = None if next_due is None else max(0.0, (next_due - wall_ms()) / 1000)
                try:
                    sent, committed, next_begun = flight.done.result(timeout)
                    break
                except FutureTimeout:
                    continue
        finally:
            if flight.done.done():
                self._flight = None
        self._open_since = self._failed_since = None
        self._in_transaction, self._begun_ahead = False, next_begun
        self._after_commit(flight)
        ends = (flight.decided, flight.begun, flight.produced, sent, committed, time.perf_counter())
        for phase, begun, ended in zip(PHASES, (flight.started, *ends[:-1]), ends, strict=True):
            self._phases[phase].observe(ended - begun)
        return fired

    def _settle(self) -> None:
        """Land the batch in flight now (a rebalance callback, or stopping): shards change only between
        transactions, with their stores holding every commit. A failed flight is left for `step` to recover from,
        its overlays dropped here."""
        if self._flight is None:
            return
        try:
            self._land(wall_ms(), None)
        except KafkaException as exc:
            self._flight_error = exc
            for shard in self.shards.values():
                shard.reset()

    def _decide_commands(self, commands: list[Message], touched: set[int], now: int,
                         due: dict[int, list[bytes]]) -> tuple[int, int]:
        """Decide the fetched commands in order until the next deadline not fired by this batch falls due; keep
        the rest for the next batch (`_carry`) and return how many were decided and the clock's last reading (what
        the batch fires after them is stamped no earlier).

        Each command is decided at its own time (the clock read before it, never earlier than the one before):
        its events, and the deadlines it arms, carry the moment it was decided, not the batch's start. A batch of
        completions that each start a one-second timer arms them spread over the time it took to decide them, so
        a second later they fall due spread the same way, not as one wave that a timer due just after it waits
        for (S4: 3,000 timers).

        `batch_room` sized the fetch from the average cost of a decision, but a loaded machine stretches any one
        batch (S4 measured decide phases of 0.4-1.2 s of wall time for 14-100 ms of CPU: the process was waiting
        for a core), and a timer due meanwhile waited for the whole batch and its commit. At least `MIN_ROOM` are
        decided, so commands keep moving under a storm of deadlines. No stop while timeouts are held for their
        inputs, nor in a batch that fires timeouts: the input gate let them fire because every command read
        before they fell due is decided before them, in this batch or earlier, and a carried command would break
        that (a completion written in time, fetched, then decided after its own timeout). The carried commands
        are decided first in the next batch, before the timeouts it fires."""
        may_stop = (len(commands) > MIN_ROOM and not self._holding_any()
                    and not any(is_timeout(key) for keys in due.values() for key in keys))
        stop_at = self._earliest_deadline(after_ms=now) if may_stop else None  # no store scan for small batches
        decided, at = 0, now
        for i, msg in enumerate(commands):
            at = max(at, wall_ms())
            if stop_at is not None and decided >= MIN_ROOM and at >= stop_at:
                self._carry = commands[i:]
                self.metrics.batches_cut.inc()
                break
            if self._flight is not None and self._flight.done.done():
                self._land(at, None)  # its stores and waiting readers need not wait for the rest of this batch
            shard = self.shards.get(msg.partition())
            if shard is None:
                continue  # fetched before its partition was revoked
            shard.process(msg.value(), msg.offset(), at)
            self.next_offsets[msg.partition()] = msg.offset() + 1
            touched.add(msg.partition())
            decided += 1
        return decided, at

    def _fire(self, due: dict[int, list[bytes]], now: int, touched: set[int]) -> int:
        fired = 0
        for index, keys in due.items():
            shard = self.shards[index]
            for key in keys:
                shard.fire(key, self.next_offsets.get(index, 0), now)
                fired += 1
            if keys:
                touched.add(index)
        return fired

    def _fire_fallen_due(self, now: int, touched: set[int], counter: Counter | None = None,
                         floor: int | None = None) -> int:
        """Fire, in this batch and at the time they are fired, the moments (user timers, retries, backoffs) that
        fell due while it decided (after `now`, its time), instead of after its produce, send offsets, commit and
        the next fetch (S4: p99 send offsets + commit 250-400 ms on a loaded machine). This comes after every
        command of the batch, so a workflow's events still go forward in time. Timeouts wait for the next batch:
        the input gate must first see every command written before they fell due (`input_gate.py`). A backlog due
        before `now` (beyond the batch's 500 per shard) waits too, so commands keep their share. At most
        `LATE_PASSES` looks, each firing what fell due during the one before, so a stream of deadlines cannot hold
        a batch open. Nothing fires stamped earlier than `floor`, the time of the batch's last decision."""
        fired, since, floor = 0, now, now if floor is None else floor
        for _ in range(LATE_PASSES):
            at = max(wall_ms(), floor)
            if at <= since:
                break
            late = {i: [k for k in s.due_timers(at, MAX_TIMERS_PER_SHARD) if fire_at_of(k) > now and not is_timeout(k)]
                    for i, s in self.shards.items()}
            if not any(late.values()):
                break
            fired += self._fire(late, at, touched)
            (counter or self.metrics.timers_fired_late_pass).inc(sum(len(keys) for keys in late.values()))
            since = at
        return fired

    def _holding_any(self) -> bool:
        return any(gate.target is not None for gate in self._gates.values())

    def _produce_batch(self, sealed: dict[int, Sealed]) -> None:
        assert self.producer is not None
        self._batch_no += 1
        batch = self._batch_no
        self._delivered = {}
        self._delivery_error = None
        tracked = {self.state_topic, self.history_topic}

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if batch != self._batch_no:
                return  # a late report of an earlier (aborted) transaction
            if err is not None:
                self._delivery_error = err
            elif msg.topic() in tracked:
                key = (msg.topic(), msg.partition())
                self._delivered[key] = max(self._delivered.get(key, -1), msg.offset())

        outputs: list[Output] = [o for _, part in sorted(sealed.items()) for o in part.outputs]
        outputs.extend(self._ownership_records())
        # Only the last record of each changelog partition reports its delivery: records of one partition are
        # delivered in order, and the checkpoint wants the last offset. A report is a Python call under the
        # interpreter lock (four a command, taken from the processor thread deciding the next batch); a record that
        # fails without one fails the transaction's commit, which librdkafka refuses once any record failed.
        last = {(out.topic, out.partition): i for i, out in enumerate(outputs) if out.topic in tracked}
        reported = set(last.values())
        # Records go to librdkafka a partition at a time (`produce_batch`: one call, no keyword parsing per record;
        # `produce` cost about twice as much a record, four a command). It carries no headers: a record with
        # headers (egress) goes alone, after what its partition gathered before it, so each partition keeps the
        # batch's order.
        groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for i, out in enumerate(outputs):
            where = (out.topic, out.partition)
            if out.headers:
                self._produce_group(where, groups.pop(where, []))
                self._produce_one(out, delivered if i in reported else None)
                continue
            message: dict[str, Any] = {"key": out.key, "value": out.value}
            if i in reported:
                message["callback"] = delivered
            groups.setdefault(where, []).append(message)
        for where, messages in groups.items():
            self._produce_group(where, messages)

    def _produce_group(self, where: tuple[str, int], messages: list[dict[str, Any]]) -> None:
        """Hand one partition's records to librdkafka in order. A full local queue (it holds a million records,
        a batch a few thousand) refuses the rest of the call: they go again once deliveries drained it. Any other
        refusal, or a gap (a refused record with an accepted one after it, which would reorder the partition),
        fails the batch's transaction: it is aborted and decided again (`_recover`)."""
        assert self.producer is not None
        topic, partition = where
        while messages:
            if self.producer.produce_batch(topic, messages, partition=partition) == len(messages):
                return
            first = next(i for i, m in enumerate(messages) if "_error" in m)
            rest = messages[first:]
            errors = [m.pop("_error", None) for m in rest]
            refused = next(e for e in errors if e is not None)
            if any(e is None or e.code() != KafkaError._QUEUE_FULL for e in errors):
                raise KafkaException(refused)
            messages = rest
            self.producer.poll(0.05)

    def _produce_one(self, out: Output, on_delivery: Callable[[KafkaError | None, Message], None] | None) -> None:
        assert self.producer is not None
        while True:
            try:
                self.producer.produce(out.topic, out.value, out.key, partition=out.partition, on_delivery=on_delivery,
                                      headers=list(out.headers))
                return
            except BufferError:
                self.producer.poll(0.05)  # the local queue is full: let deliveries drain it

    def _ownership_records(self) -> list[Output]:
        out = []
        for index in sorted(self._announce):
            record = {"shard": index, "owner_id": self.owner_id, "read_endpoint": self.options.read_endpoint,
                      "generation": wall_ms(), "updated_at_ms": wall_ms()}
            out.append(Output(self.cluster_topic, 0, f"shard/{index}".encode(), codec.encode(wire.SHARD_OWNER, record)))
        return out

    def _commit(self) -> None:
        assert self.producer is not None
        for attempt in range(5):
            try:
                self.producer.commit_transaction(OPERATION_TIMEOUT_S)
                break
            except KafkaException as exc:
                err = exc.args[0]
                if not (err.retriable() and attempt < 4):
                    raise
                log.warning("commit: %s; retrying", err.str())
        self.producer.poll(0)  # serve any delivery report commit left queued
        if self._delivery_error is not None:  # cannot happen after a successful commit; never trust it silently
            raise RuntimeError(f"a record of a committed transaction reported {self._delivery_error.str()}")

    def _after_commit(self, flight: Flight) -> None:
        now = pack_int(wall_ms())
        grown: set[bytes] = set()
        for index, sealed in sorted(flight.sealed.items()):
            shard = self.shards.get(index)
            if shard is None:
                continue
            checkpoint = {CHECKPOINT_TIME: now}
            state = self._delivered.get((self.state_topic, index))
            if state is not None:
                checkpoint[CHECKPOINT_STATE] = pack_int(state + 1)
            history = self._delivered.get((self.history_topic, index))
            if history is not None:
                checkpoint[CHECKPOINT_HISTORY] = pack_int(history + 1)
            for rejection in sealed.rejections:
                self.metrics.rejections.labels(rejection.code).inc()
                log.info("shard %d: rejected %s: %s (%s)", index, _command_name(rejection.command), rejection.code,
                         rejection.message)
            self.metrics.count_quarantined(sealed.quarantined)
            for lateness in sealed.timers_fired:
                self.metrics.timer_lateness.observe(max(0, lateness) / 1000)
            if self.options.on_history is not None:  # only a server with waiting readers asks
                grown |= sealed.grown_runs()
            shard.land(sealed, checkpoint)
        self._txns_landed = flight.number
        if self.options.on_history is not None:  # even with no run grown: reads wait for the landing (`mark`)
            self.options.on_history(grown)
        self._announce.clear()
        self.metrics.commands.inc(flight.commands)
        self.metrics.timers.inc(flight.fired)
        self.metrics.batch_size.observe(flight.commands + flight.fired)
        self.metrics.commit_seconds.observe(time.perf_counter() - flight.started)

    # -- failures -------------------------------------------------------------------------------------------------

    def _recover(self, exc: KafkaException) -> None:
        """Abortable: abort, drop the overlays, rewind to the committed offsets. Fatal (fenced): a new producer,
        and every owned shard caught up from its changelog again, since another owner may have written to it."""
        assert self.producer is not None
        err: KafkaError = exc.args[0]
        flight = self._flight
        if flight is not None:  # the failure came while deciding the next batch, with this one still committing
            wait([flight.done])  # the producer is the committer thread's until its commit returns
            if flight.done.exception() is None:
                self._land(wall_ms(), None)  # committed: the stores must hold it before the overlays are dropped
            self._flight = None
        self._open_since = None
        if self._failed_since is None:
            self._failed_since = time.monotonic()
        for shard in self.shards.values():
            shard.reset()
        self._txns_landed = self._txns_begun  # an aborted batch never reaches the stores: reads need not wait for it
        if self.options.on_history is not None:
            self.options.on_history(set())
        if err.fatal():
            self.metrics.aborts.labels("fatal").inc()
            log.warning("producer fatal error (%s): rebuilding the producer and restoring owned shards", err.str())
            self._rebuild()
            return
        self.metrics.aborts.labels("abortable").inc()
        # No batch's records were produced since the last commit: only the decisions are dropped, and an empty
        # transaction begun ahead stays for the next batch.
        if not self._in_transaction:
            log.warning("batch dropped before its transaction began: %s", err.str())
            self._rewind()
            return
        log.warning("transaction aborted: %s", err.str())
        try:
            self.producer.abort_transaction(OPERATION_TIMEOUT_S)
            self._in_transaction = self._begun_ahead = False
        except KafkaException as abort_exc:
            log.warning("abort failed (%s): rebuilding the producer", abort_exc.args[0].str())
            self._rebuild()
            return
        self._rewind()

    def _rebuild(self) -> None:
        assert self.producer is not None
        # A fenced producer's records were aborted with its transaction: drop them, do not wait for them. It may
        # refuse even that, in any way (a SystemError from librdkafka's log callback was seen under load); it is
        # thrown away whatever it says.
        with contextlib.suppress(Exception):
            self.producer.purge()
        self.producer = None
        self._in_transaction = self._begun_ahead = False
        for attempt in range(REBUILD_ATTEMPTS):
            try:
                self.producer = self._new_producer()
                break
            except KafkaException as exc:
                if attempt == REBUILD_ATTEMPTS - 1:
                    raise
                log.warning("a new producer could not start (%s); trying again", exc.args[0].str())
                time.sleep(1.0)
        owned = sorted(self.shards)
        self._close_shards(owned)
        for index in owned:
            self._open_shard(index)
        self._rewind()

    def _rewind(self) -> None:
        """Seek every owned shard back to its committed offset: the batch's commands are processed again."""
        assert self.consumer is not None
        self._carry = []  # fetched past the committed offsets: read again after the seek
        owned = sorted(self.shards)
        if not owned:
            return
        try:
            self._read_committed_offsets(owned)
            for index in owned:
                self.consumer.seek(TopicPartition(self.commands_topic, index, self.next_offsets[index]))
        except KafkaException as exc:
            # Typically: the group moved on (this process was a zombie); the next poll revokes the shards.
            log.warning("rewind failed: %s", exc.args[0].str())

    # -- reads from other threads ---------------------------------------------------------------------------------

    def store_of(self, shard: int) -> RocksStore | None:
        with self._lock:
            found = self.shards.get(shard)
            return found.store if found is not None and isinstance(found.store, RocksStore) else None

    def owned(self) -> list[int]:
        with self._lock:
            return sorted(self.shards)

    def mark(self) -> tuple[int, ...]:
        """The transactions begun so far: a read that arrives now waits until they have `landed` (its client may
        have been told of a write in one that committed but is not in the stores yet; see `reads.caught_up`)."""
        return (self._txns_begun,)

    def landed(self, mark: tuple[int, ...]) -> bool:
        return self._txns_landed >= mark[0]

    def settled(self) -> bool:
        """Whether a read that finds nothing in an owned store may answer "not found".

        A store holds what this process committed. When a transaction failed and none has committed since, or one
        has been open for longer than the group session, this process may have lost its shards without hearing
        of it yet (a broker failover can keep the revocation from it for seconds) while the new owner commits
        runs this store will never see. Its reads then are stale: a run it does not have may exist, and clients
        just told of it would be told it does not (seen in the chaos suite's broker kill). Found data is still
        data that was committed; only absence is in doubt."""
        failed, opened = self._failed_since, self._open_since
        if failed is not None:
            return False
        return opened is None or time.monotonic() - opened < max(self._session_s, 1.0)


EGRESS_ENV = "OSTINATO_EGRESS_TOPICS"


def egress_patterns(text: str) -> tuple[str, ...]:
    """`--egress-topics`: comma-separated fnmatch patterns of the topics workflows may publish to."""
    return tuple(p.strip() for p in text.split(",") if p.strip())


def egress_conflicts(patterns: tuple[str, ...], prefix: str) -> list[str]:
    """The patterns that would let a workflow write into this cluster's own topics (refused at start)."""
    import fnmatch

    own = [topic_name(prefix, t) for t in Topic] + [f"{prefix}.tasks.x.workflow", f"{prefix}.tasks.x.activity",
                                                    f"{prefix}.held.x.activity"]
    return [p for p in patterns if any(fnmatch.fnmatchcase(t, p) for t in own)]


class EgressTopics:
    """Partition counts of the user topics workflows publish to (`workflow.publish`), from the brokers' metadata: a
    known topic is looked up again after a minute (it may have grown), a missing one at most every 5 s (the command
    that named it is quarantined meanwhile, and an operator redrives it once the topic exists)."""

    KNOWN_FOR_S = 60.0
    MISSING_FOR_S = 5.0

    def __init__(self, bootstrap: str) -> None:
        self._admin = AdminClient(base_config(bootstrap, "ostinato-egress"))
        self._seen: dict[str, tuple[int | None, float]] = {}

    def partitions(self, topic: str) -> int | None:
        found = self._seen.get(topic)
        now = time.monotonic()
        if found is not None and now - found[1] < (self.KNOWN_FOR_S if found[0] else self.MISSING_FOR_S):
            return found[0]
        try:
            metadata = self._admin.list_topics(topic=topic, timeout=OPERATION_TIMEOUT_S).topics.get(topic)
        except KafkaException as exc:
            log.warning("egress: metadata of %s: %s", topic, exc)
            return found[0] if found is not None else None
        count = len(metadata.partitions) if metadata is not None and metadata.error is None else None
        self._seen[topic] = (count or None, now)
        return count or None


def split_due(due: dict[int, list[bytes]]) -> tuple[dict[int, list[bytes]], dict[int, list[bytes]]]:
    """The due moments (user timers, retries, backoffs) and the due timeouts, per shard. Moments fire at the
    batch's start, before its commands: nothing orders them after commands fetched with them (a completion racing
    its workflow's timer can land on either side of it, in one batch or two), so a wave of them does not wait for a
    batch of commands, nor the commands for them beyond `MAX_TIMERS_PER_SHARD`. Timeouts fire after the batch's
    commands, since the input gate let them fire only because every command written before they fell due is
    decided first (`input_gate.py`)."""
    moments: dict[int, list[bytes]] = {}
    timeouts: dict[int, list[bytes]] = {}
    for index, keys in due.items():
        moments[index], timeouts[index] = [], []
        for key in keys:
            (timeouts if is_timeout(key) else moments)[index].append(key)
    return moments, timeouts


def linger_until(options: ProcessorOptions, decisions: int, begun: float) -> float:
    """When the transaction after one of `decisions` begun at `begun` (perf_counter) may ship at the earliest: a
    large one means load, and the next waits `linger_ms` from this one's begin for more commands to share its
    broker work; a small one (a lone step) lets the next ship as soon as this one landed (0.0)."""
    busy = options.pipeline and options.linger_ms > 0 and decisions >= LINGER_MIN_DECISIONS
    return begun + options.linger_ms / 1000 if busy else 0.0


def batch_room(max_batch: int, next_due_ms: int | None, decide_s: float, now_ms: int, holding: bool) -> int:
    """How many commands a batch may take: `max_batch`, unless deciding them would run past the next deadline (at
    `decide_s` a decision, the measured average); then what fits before it, and `TIMER_SLACK_S` more, but at least
    `MIN_ROOM`. Deadlines fire with the time their batch began, so a timer due while a batch decides is late by the
    rest of that batch and its commit: 500 commands at ~0.5 ms each made S4's p99 lateness 0.35-1.3 s. While
    timeouts are held for their inputs (`holding`), the inputs must come in quickly: no limit."""
    if next_due_ms is None or decide_s <= 0 or holding:
        return max_batch
    fits = (max(0, next_due_ms - now_ms) / 1000 + TIMER_SLACK_S) / decide_s
    if fits >= max_batch:  # also a cost so small the quotient overflows to infinity (found by hypothesis)
        return max_batch
    return min(max_batch, max(MIN_ROOM, int(fits)))


def owner_id_of(directory: Path) -> str:
    """A stable id per data directory: a restarted process reuses its transactional id and so fences (and
    aborts) its own crashed incarnation's open transaction at once instead of after the transaction timeout."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "owner-id"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"processor-{uuid.uuid4().hex[:12]}\n")
        tmp.replace(path)
    return path.read_text().strip()


def _command_name(command: dict[str, Any] | None) -> str:
    return "an unreadable record" if command is None else str(command["body"][0]).rsplit(".", 1)[-1]

