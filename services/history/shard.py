"""One owned shard inside one batch: commands and due timers in, changelog writes and output records out.

This is the part of the Kafka shell that needs no Kafka. It runs the core's `decide` over an overlay of the
shard's store, turns each step into the records of DESIGN.md §3, and keeps everything of the batch in memory
until the processor has committed the transaction; only then is the overlay written to the store (`committed`).
A command that fails (a bug in the core, an output too large for Kafka) is rejected alone: its workflow is
reloaded from the overlay as the previous command left it, and the rest of the batch goes on. When nobody was told
of the failure, the command is also quarantined in its run (`streams/quarantine.py`), so the run is not left
silently waiting for what the command would have recorded.
"""

from __future__ import annotations

import bisect
import functools
import logging
import operator
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import activity_task_key, history_key, history_key_in, run_key, workflow_key
from ostinato.schemas.partitioner import murmur2
from ostinato.schemas.topics import (
    MAX_RECORD_BYTES,
    TaskKind,
    Topic,
    held_topic_name,
    task_topic_name,
    topic_name,
)
from ostinato.services.history.changelog import (
    WriteSet,
    empty_writes,
    fire_at_of,
    parse_timer_key,
    timer_key,
    timers_from,
)
from ostinato.services.history.store import Family, ShardStore, pack_int, unpack_int
from ostinato.services.history.timer_index import TimerIndex
from ostinato.services.history.waiters import closed_key, state_key
from ostinato.streams.actions import Deadline, Publish
from ostinato.streams.config import Config
from ostinato.streams.deadlines import timer_command
from ostinato.streams.deciders import decide
from ostinato.streams.events import CLOSE_STATUS
from ostinato.streams.model import RunState, Workflow, decode_current, decode_run, encode_current, encode_run
from ostinato.streams.perform import EgressRefused, RecordTooLarge, perform
from ostinato.streams.quarantine import quarantinable, quarantine, quarantined_message
from ostinato.streams.records import HistorySequence
from ostinato.streams.versioning import unversioned_queue

Record = dict[str, Any]
CACHE_SIZE = 10_000  # decoded workflows kept per shard between batches
TIMER_IDENTITY = "ostinato-timer"

log = logging.getLogger("ostinato.processor")

# Keys repeat (a workflow's tasks, its activities): murmur2 in Python is worth remembering.
_partition = functools.lru_cache(maxsize=65_536)(partition_for)


class Output(NamedTuple):
    """A record to produce inside the batch's transaction. A tuple: four are made a command, and a frozen
    dataclass's constructor costs twice as much."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class Topology:
    """What a shard needs to know about the cluster to address its outputs."""

    prefix: str
    shards: int
    reply_partitions: int
    task_partitions: Callable[[str], int]  # task topic -> partitions; creates the topic on first use
    egress_partitions: Callable[[str], int | None] = lambda topic: None  # a user topic -> partitions, None if absent

    def topic(self, t: Topic) -> str:
        return topic_name(self.prefix, t)


@dataclass
class Rejection:
    code: str
    message: str
    command: Record | None


@dataclass(frozen=True)
class Quarantined:
    """A failed command kept in its run's state (counted by `ostinato_commands_quarantined_total`)."""

    code: str  # INTERNAL or TOO_LARGE
    command_type: str  # without its namespace: "RespondActivityTaskCompleted"
    run_id: str


@dataclass
class Sealed:
    """A batch handed to its transaction (`Shard.seal`). Until its commit lands (`Shard.land`), the next batch
    reads beneath its own overlay through this one, so it can be decided while the commit is in flight."""

    writes: WriteSet
    outputs: list[Output]
    rejections: list[Rejection]
    quarantined: list[Quarantined]
    timers_fired: list[int]
    events: dict[bytes, Record]
    written_runs: dict[tuple[str, str], set[bytes]]
    working: dict[tuple[str, str], Workflow]

    def grown_runs(self) -> set[bytes]:
        """For readers waiting on runs: the runs (state keys `ns/wf/run`) this batch added history to, (as
        `state_key`) those whose state it changed, for a caller waiting for an update's stage (a rejected update
        changes the run's state and writes no event), and (as `closed_key`) those it closed."""
        writes = self.writes
        grown = {key.rpartition(b"/")[0] for key, value in writes[Family.HISTORY].items() if value is not None}
        grown.update(state_key(key) for key in writes[Family.STATE] if key.count(b"/") == 2)  # runs only
        grown.update(closed_key(key.rpartition(b"/")[0]) for key, event in self.events.items()
                     if event["event_type"] in CLOSE_STATUS)
        return grown


@dataclass
class _Pending:
    """What one command wrote, merged into the batch only when the whole command succeeded."""

    writes: WriteSet = field(default_factory=empty_writes)
    outputs: list[Output] = field(default_factory=list)
    events: dict[bytes, Record] = field(default_factory=dict)  # history key -> event, for tasks built in the batch
    runs: list[tuple[tuple[str, str], bytes]] = field(default_factory=list)  # ((ns, wf), state key) of runs written

    def clear(self) -> None:
        """Empty again, for the next command: cheaper than a new one (a dict per changelog family)."""
        for items in self.writes.values():
            if items:
                items.clear()
        self.outputs.clear()
        self.events.clear()
        self.runs.clear()


@dataclass
class _Moments:
    """The deadlines of the open and the sealed batch (`Shard._moments`)."""

    overlay: dict[bytes, bytes | None]  # key -> b"" added, None removed; the open batch's over the sealed one's
    added: list[tuple[int, bytes]]  # (fire time, key) of those added, in order


_FIRE_AT = operator.itemgetter(0)  # of a `_Moments.added` entry


class Shard:
    """The owner's view of one shard: committed store, the sealed batch whose commit is in flight (if any), and the
    open batch's overlay on top."""

    def __init__(self, index: int, store: ShardStore, topology: Topology, config: Config,
                 cache_size: int = CACHE_SIZE, config_for: Callable[[str], Config] | None = None) -> None:
        self.index = index
        self.config_for = config_for or (lambda namespace: config)  # per-namespace settings (retention)
        self.store = store
        self.topology = topology
        self.config = config
        self.writes = empty_writes()
        self.outputs: list[Output] = []
        self.rejections: list[Rejection] = []
        self.quarantined: list[Quarantined] = []  # the processor counts them after the commit
        self.commands = 0
        self.timers_fired: list[int] = []  # lateness in ms of each timer fired in the batch
        self._events: dict[bytes, Record] = {}
        self._working: dict[tuple[str, str], Workflow] = {}
        self._written_runs: dict[tuple[str, str], set[bytes]] = {}  # state keys of runs the batch wrote
        self._loaded: set[tuple[str, str]] = set()  # workflows the open batch loaded (`land` must not cache them)
        self._pending = _Pending()
        self._sealed: Sealed | None = None
        # Committed workflows, decoded: a workflow moves from here to `_working` when a batch touches it and back
        # when the batch commits; an abort drops `_working`, so nothing uncommitted is ever cached.
        self._cache: OrderedDict[tuple[str, str], Workflow] = OrderedDict()
        self._cache_size = cache_size
        self._outbox = _ShardOutbox(self)
        self._timers = TimerIndex(lambda start: (k for k, _ in store.scan(Family.TIMERS, start=start)))
        self._moments_cache: _Moments | None = None  # `_moments`: dropped whenever the overlays' deadlines change

    # -- reading through the overlay ------------------------------------------------------------------------------

    def get(self, family: Family, key: bytes) -> bytes | None:
        pending = self._pending.writes[family]
        if key in pending:
            return pending[key]
        batch = self.writes[family]
        if key in batch:
            return batch[key]
        sealed = self._sealed
        if sealed is not None and key in sealed.writes[family]:
            return sealed.writes[family][key]
        return self.store.get(family, key)

    def _load(self, ns: str, wf: str) -> Workflow:
        key = (ns, wf)
        workflow = self._working.get(key)
        if workflow is not None:
            return workflow
        self._loaded.add(key)
        # A workflow the sealed batch changed is not in the cache until that batch lands: it is decoded through
        # the overlays here, never shared, so a rejection in this batch reloads it as the sealed batch left it.
        workflow = self._cache.pop(key, None)
        if workflow is not None:
            self._working[key] = workflow
            return workflow
        workflow = Workflow(ns, wf)
        pointer = self.get(Family.STATE, workflow_key(ns, wf).encode())
        if pointer is not None:
            workflow.current = decode_current(pointer)
        prefix = (workflow_key(ns, wf) + "/").encode()
        keys = set(self.store.keys(Family.STATE, prefix))
        keys.update(self._written_runs.get(key, ()))
        if self._sealed is not None:
            keys.update(self._sealed.written_runs.get(key, ()))
        for k in sorted(keys):
            data = self.get(Family.STATE, k)
            if data is not None:
                run = decode_run(data)
                workflow.runs[run.run_id] = run
        self._working[key] = workflow
        return workflow

    def event(self, ns: str, wf: str, run_id: str, event_id: int) -> Record | None:
        key = history_key(ns, wf, run_id, event_id).encode()
        found = self._pending.events.get(key) or self._events.get(key)
        if found is None and self._sealed is not None:
            found = self._sealed.events.get(key)
        if found is not None:
            return found
        data = self.get(Family.HISTORY, key)
        if data is None:
            return None
        name, record = codec.decode(data)
        return codec.spliceable(name, record, data)

    # -- commands -------------------------------------------------------------------------------------------------

    def process(self, data: bytes | None, offset: int, now_ms: int) -> None:
        """Decide one record of the shard's commands partition; never raises for bad input or a core bug."""
        self.commands += 1
        try:
            name, command = codec.decode(data or b"")
        except codec.DecodeError as exc:
            self._reject(None, "MALFORMED", f"offset {offset}: {exc}")
            self._merge()
            return
        if name != wire.COMMAND:
            self._reject(None, "MALFORMED", f"offset {offset}: expected a {wire.COMMAND}, found {name}")
            self._merge()
            return
        ns, wf = command["namespace"], command["workflow_id"]
        owner = _partition(workflow_key(ns, wf), self.topology.shards)
        if owner != self.index:
            self._reject(command, "WRONG_SHARD", f"{ns}/{wf} belongs to shard {owner}, not {self.index}")
            self._merge()
            return
        self._decide(command, offset, now_ms)

    def _decide(self, command: Record, offset: int, now_ms: int) -> None:
        key = (command["namespace"], command["workflow_id"])
        try:
            workflow = self._load(*key)
            step = decide(workflow, command, now_ms, self.config_for(key[0]), offset=offset,
                          history=self._outbox.history)
            if step.rejection is not None:
                self.rejections.append(Rejection(step.rejection["code"], step.rejection["message"], command))
                self._working.pop(key, None)  # a rejection changes nothing: reload rather than trust the object
            else:
                self._write_step(workflow, step.events, step.changed_runs, step.pointer_changed)
            for action in step.actions:
                perform(workflow, action, self._outbox)
        except RecordTooLarge as exc:
            self._fail(command, offset, now_ms, "TOO_LARGE", type(exc).__name__, str(exc))
        except EgressRefused as exc:
            self._fail(command, offset, now_ms, "EGRESS_REFUSED", type(exc).__name__, str(exc))
        except Exception as exc:  # a bug in the core must not stop the shard: reject the command, keep going
            log.exception("shard %d: command %s failed", self.index, command["body"][0])
            self._fail(command, offset, now_ms, "INTERNAL", type(exc).__name__, f"{type(exc).__name__}: {exc}")
        else:
            self._merge()

    def _fail(self, command: Record, offset: int, now_ms: int, code: str, error_type: str, message: str) -> None:
        self._pending = _Pending()
        self._working.pop((command["namespace"], command["workflow_id"]), None)  # reloaded as the overlay has it
        run_id = self._quarantine(command, offset, now_ms, code, error_type, message)
        if run_id is not None:
            message = quarantined_message(message, run_id)
        self._reject(command, code, message)
        self._merge()

    def _quarantine(self, command: Record, offset: int, now_ms: int, code: str, error_type: str, message: str,
                    ) -> str | None:
        """Keep the failed command in its run's state, in the pending writes; the run's id, or None when it is not
        kept (its sender was told, or there is no run). A failure to keep it leaves the rejection alone."""
        if not quarantinable(command, code):
            return None
        key = (command["namespace"], command["workflow_id"])
        try:
            workflow = self._load(*key)
            step = quarantine(workflow, command, offset, code, error_type, message, now_ms, self.config_for(key[0]))
            if step is None:
                return None
            self._write_step(workflow, step.events, step.changed_runs, step.pointer_changed)
            for action in step.actions:
                perform(workflow, action, self._outbox)
        except Exception:  # e.g. the state record would be too large: the rejection still stands
            log.exception("shard %d: could not quarantine %s", self.index, command["body"][0])
            self._pending = _Pending()
            self._working.pop(key, None)
            return None
        run_id = step.changed_runs[0]
        self.quarantined.append(Quarantined(code, wire.short_name(command["body"][0]), run_id))
        log.error("shard %d: %s %s/%s quarantined in run %s: %s", self.index, wire.short_name(command["body"][0]),
                  key[0], key[1], run_id, message)
        return run_id

    def _reject(self, command: Record | None, code: str, message: str) -> None:
        self.rejections.append(Rejection(code, message, command))
        if command is not None and command.get("reply_partition") is not None:
            self._reply(command["reply_partition"], command["request_id"],
                        wire.reply(command["request_id"], command["namespace"], command["workflow_id"],
                                   wire.rejected(code, message[:2000])))

    def _merge(self) -> None:
        p = self._pending
        if p.writes[Family.TIMERS]:
            self._moments_cache = None
        writes = self.writes
        for family, items in p.writes.items():
            if items:
                writes[family].update(items)
        for workflow, key in p.runs:
            self._written_runs.setdefault(workflow, set()).add(key)
        self.outputs.extend(p.outputs)
        self._events.update(p.events)
        p.clear()

    # -- timers ---------------------------------------------------------------------------------------------------

    def due_timers(self, now_ms: int, limit: int) -> list[bytes]:
        """Keys of deadlines due by `now_ms`, oldest first: the store's, minus those the batch removed, plus those
        it added."""
        moments = self._moments()
        overlay = moments.overlay
        due: list[bytes] = []
        for key in self._timers.walk():
            if fire_at_of(key) > now_ms or len(due) >= limit:
                break
            if overlay.get(key, b"") is not None:
                due.append(key)
        added = moments.added[:bisect.bisect_right(moments.added, now_ms, key=_FIRE_AT)]
        if added:
            found = set(due)
            due.extend(k for _, k in added if k not in found)
        return sorted(due)[:limit]

    def next_timer_ms(self, after_ms: int = -1) -> int | None:
        """The earliest deadline in the index (store and batch) later than `after_ms` (by default, any)."""
        moments = self._moments()
        overlay = moments.overlay
        first = next((fire_at_of(k) for k in self._timers.walk(timers_from(after_ms + 1))
                      if overlay.get(k, b"") is not None), None)
        i = bisect.bisect_right(moments.added, after_ms, key=_FIRE_AT)
        added = moments.added[i][0] if i < len(moments.added) else None
        candidates = [t for t in (first, added) if t is not None]
        return min(candidates) if candidates else None

    def _moments(self) -> _Moments:
        """The overlays' deadlines, kept until they change: the processor looks for due and next deadlines several
        times a transaction (every 5 ms while a commit is in flight), and each look merged and parsed them all."""
        moments = self._moments_cache
        if moments is None:
            overlay = self._timer_overlay()
            added = sorted((fire_at_of(k), k) for k, v in overlay.items() if v is not None)
            moments = self._moments_cache = _Moments(overlay, added)
        return moments

    def _timer_overlay(self) -> dict[bytes, bytes | None]:
        """The deadlines the open and the sealed batch added (b"") and removed (None), the open one's last."""
        batch = self.writes[Family.TIMERS]
        sealed = self._sealed
        if sealed is None or not sealed.writes[Family.TIMERS]:
            return batch
        return {**sealed.writes[Family.TIMERS], **batch}

    def fire(self, key: bytes, offset: int, now_ms: int) -> None:
        """Process a due deadline as a FireTimer command, inside the batch, so it lands in history once."""
        ns, wf, deadline = parse_timer_key(key)
        self.writes[Family.TIMERS][key] = None  # out of the index whatever happens: a deadline fires once
        self._moments_cache = None
        self.timers_fired.append(now_ms - deadline.fire_at_ms)
        self._decide(timer_command(ns, wf, deadline, now_ms, TIMER_IDENTITY), offset, now_ms)

    # -- turning a step into records ------------------------------------------------------------------------------

    def _out(self, topic: str, partition: int, key: str | bytes, value: bytes | None) -> None:
        if value is not None and len(value) > MAX_RECORD_BYTES:
            raise RecordTooLarge(topic, len(value), MAX_RECORD_BYTES)
        raw = key if isinstance(key, bytes) else key.encode()
        self._pending.outputs.append(Output(topic, partition, raw, value))

    def _write_step(self, workflow: Workflow, events: list[tuple[str, Record]], changed_runs: list[str],
                    pointer_changed: bool) -> None:
        # The hot path of every step (a few records a command): run keys are made once a step, and history
        # records go to the outputs directly rather than through `_out`, with the same size check.
        ns, wf = workflow.namespace, workflow.workflow_id
        p = self._pending
        outputs, index = p.outputs, self.index
        history_writes, pending_events = p.writes[Family.HISTORY], p.events
        history = self.topology.topic(Topic.HISTORY)
        runs: dict[str, str] = {}  # run id -> its run key
        grown: dict[str, int] = {}  # run id -> bytes of history this step adds: one size write per run
        started: set[str] = set()  # runs whose history starts in this step: there is no size to read
        for run_id, event in events:
            run = runs.get(run_id)
            if run is None:
                run = runs[run_id] = run_key(ns, wf, run_id)
            event_id = event["event_id"]
            key = history_key_in(run, event_id).encode()
            data = codec.encode(wire.HISTORY_EVENT, event)
            if len(data) > MAX_RECORD_BYTES:
                raise RecordTooLarge(history, len(data), MAX_RECORD_BYTES)
            outputs.append(Output(history, index, key, data))
            history_writes[key] = data
            pending_events[key] = codec.spliceable(wire.HISTORY_EVENT, event, data)  # a task copies `data`
            grown[run_id] = grown.get(run_id, 0) + len(data)
            if event_id == 1:
                started.add(run_id)
        sizes = p.writes[Family.SIZES]
        for run_id, added in grown.items():
            size_key = runs[run_id].encode()
            before = 0 if run_id in started else unpack_int(self.get(Family.SIZES, size_key))
            sizes[size_key] = pack_int(before + added)
        state = self.topology.topic(Topic.STATE)
        state_writes = p.writes[Family.STATE]
        for run_id in changed_runs:
            run_state = workflow.runs.get(run_id)
            key = (runs.get(run_id) or run_key(ns, wf, run_id)).encode()
            value = None if run_state is None else encode_run(run_state)
            self._out(state, index, key, value)
            state_writes[key] = value
            p.runs.append(((ns, wf), key))
        if pointer_changed:
            key = workflow_key(ns, wf).encode()
            value = None if workflow.current is None else encode_current(workflow.current)
            self._out(state, index, key, value)
            state_writes[key] = value

    def _reply(self, partition: int, request_id: str, reply: Record) -> None:
        t = self.topology
        if not 0 <= partition < t.reply_partitions:
            self.rejections.append(Rejection("INVALID_ARGUMENT", f"reply partition {partition} is not "
                                             f"in [0, {t.reply_partitions})", None))
            return
        self._out(t.topic(Topic.REPLIES), partition, request_id, codec.encode(wire.REPLY, reply))

    def _delete_run(self, namespace: str, workflow_id: str, run_id: str) -> None:
        """Tombstone every history key of the run, and its visibility record (its state goes with the step)."""
        prefix = (run_key(namespace, workflow_id, run_id) + "/").encode()
        history = self.topology.topic(Topic.HISTORY)
        keys = {k for k, _ in self.store.scan(Family.HISTORY, prefix=prefix)}
        keys.update(k for k in self.writes[Family.HISTORY] if k.startswith(prefix))
        if self._sealed is not None:
            keys.update(k for k in self._sealed.writes[Family.HISTORY] if k.startswith(prefix))
        p = self._pending
        for key in sorted(keys):
            self._out(history, self.index, key, None)
            p.writes[Family.HISTORY][key] = None
        run = prefix[:-1]
        p.writes[Family.SIZES][run] = None
        self._out(self.topology.topic(Topic.VISIBILITY), self.index, run, None)

    # -- the end of a batch ---------------------------------------------------------------------------------------

    def seal(self) -> Sealed:
        """Hand the open batch to its transaction and open the next one above it (DESIGN.md §4: the next batch is
        decided while this one's commit is in flight). One batch at a time may be sealed."""
        if self._sealed is not None:
            raise RuntimeError(f"shard {self.index}: a batch is already sealed (its commit has not landed)")
        sealed = Sealed(self.writes, self.outputs, self.rejections, self.quarantined, self.timers_fired,
                        self._events, self._written_runs, self._working)
        self._sealed = sealed
        self._forget_open()
        return sealed

    def land(self, sealed: Sealed, checkpoint: dict[bytes, bytes]) -> None:
        """The sealed batch's transaction is committed: write it and the checkpoint to the store, in one batch."""
        if sealed is not self._sealed:
            raise RuntimeError(f"shard {self.index}: landing a batch that is not the sealed one")
        writes: dict[Family, dict[bytes, bytes | None]] = {f: dict(items) for f, items in sealed.writes.items()}
        writes[Family.META].update(checkpoint)
        self.store.write(writes)
        self._timers.apply(writes[Family.TIMERS])
        self._moments_cache = None
        for key, workflow in sealed.working.items():
            # The open batch loaded its own copy of a workflow it touched (from the overlays): the sealed object is
            # older than that batch's writes, so it is not cached; the open batch's copy is, when it lands.
            if (workflow.runs or workflow.current is not None) and key not in self._loaded:
                self._cache[key] = workflow
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        self._sealed = None

    def committed(self, checkpoint: dict[bytes, bytes]) -> None:
        """The open batch's transaction is committed (no batch sealed): seal and land it at once."""
        self.land(self.seal(), checkpoint)

    def reset(self) -> None:
        """Forget the open batch and the sealed one (after an abort: neither is committed)."""
        self._sealed = None
        self._forget_open()

    def _forget_open(self) -> None:
        self.writes = empty_writes()
        self.outputs = []
        self.rejections = []
        self.quarantined = []
        self.commands = 0
        self.timers_fired = []
        self._events = {}
        self._working = {}  # after an abort: possibly changed by what was rolled back, so not cached
        self._written_runs = {}
        self._loaded = set()
        self._pending = _Pending()
        self._moments_cache = None


class _ShardOutbox:
    """The Kafka shell's `Outbox`: records addressed to topics and partitions of the batch's transaction, timer
    and deleted-run changes into the overlay."""

    def __init__(self, shard: Shard) -> None:
        self._shard = shard

    def config(self, namespace: str) -> Config:
        return self._shard.config_for(namespace)

    def history(self, run: RunState) -> Sequence[Record]:
        return HistoryView(self._shard, run)

    def history_size(self, run: RunState) -> int:
        return unpack_int(self._shard.get(Family.SIZES, run_key(run.namespace, run.workflow_id, run.run_id).encode()))

    def command(self, command: Record) -> None:
        t = self._shard.topology
        key = workflow_key(command["namespace"], command["workflow_id"])
        self._shard._out(t.topic(Topic.COMMANDS), _partition(key, t.shards), key,
                         codec.encode(wire.COMMAND, command))

    def reply(self, reply_partition: int, request_id: str, reply: Record) -> None:
        self._shard._reply(reply_partition, request_id, reply)

    def workflow_task(self, task_queue: str, namespace: str, workflow_id: str, type_name: str, task: Record) -> None:
        self._task(task_queue, TaskKind.WORKFLOW, workflow_key(namespace, workflow_id), type_name, task)

    def activity_task(self, task_queue: str, namespace: str, workflow_id: str, activity_id: str,
                      task: Record) -> None:
        key = activity_task_key(namespace, workflow_id, activity_id)
        limited = self.config(namespace).rate_limited_queues
        if task_queue in limited or (limited and unversioned_queue(task_queue) in limited):
            # Held for the servers' rate limiter, which releases it into the task topic at the queue's rate in a
            # transaction of its own (services/ratelimit): no worker reads the held topic.
            t = self._shard.topology
            topic = held_topic_name(t.prefix, task_queue)
            self._shard._out(topic, _partition(key, t.task_partitions(topic)), key,
                             codec.encode(wire.ACTIVITY_TASK, task))
            return
        self._task(task_queue, TaskKind.ACTIVITY, key, wire.ACTIVITY_TASK, task)

    def _task(self, task_queue: str, kind: TaskKind, key: str, type_name: str, task: Record) -> None:
        t = self._shard.topology
        topic = task_topic_name(t.prefix, task_queue, kind)
        self._shard._out(topic, _partition(key, t.task_partitions(topic)), key, codec.encode(type_name, task))

    def visibility(self, run: RunState, record: Record) -> None:
        shard = self._shard
        shard._out(shard.topology.topic(Topic.VISIBILITY), shard.index,
                   run_key(run.namespace, run.workflow_id, run.run_id), codec.encode(wire.VISIBILITY, record))

    def timer(self, namespace: str, workflow_id: str, deadline: Deadline, scheduled: bool) -> None:
        self._shard._pending.writes[Family.TIMERS][timer_key(namespace, workflow_id, deadline)] = (
            b"" if scheduled else None)

    def delete_run(self, namespace: str, workflow_id: str, run_id: str) -> None:
        self._shard._delete_run(namespace, workflow_id, run_id)

    def publish(self, action: Publish) -> None:
        """To the topic's partition of the record's key (Kafka's Java partitioner), or of the workflow when it has no
        key: a workflow's keyless records stay in order on one partition."""
        topology = self._shard.topology
        if action.topic.startswith(f"{topology.prefix}."):
            raise EgressRefused(f"{action.topic!r} is one of this cluster's own topics")
        partitions = topology.egress_partitions(action.topic)
        if not partitions:
            raise EgressRefused(f"topic {action.topic!r} does not exist: create it, then redrive the run")
        key = action.key if action.key is not None else workflow_key(action.namespace, action.workflow_id).encode()
        value = action.value
        size = len(value or b"") + len(action.key or b"") + sum(len(k) + len(v) for k, v in action.headers)
        if size > MAX_RECORD_BYTES:
            raise RecordTooLarge(action.topic, size, MAX_RECORD_BYTES)
        self._shard._pending.outputs.append(
            Output(action.topic, (murmur2(key) & 0x7FFFFFFF) % partitions, action.key, value, action.headers))

    def archive(self, namespace: str, workflow_id: str, run_id: str) -> None:
        # The archiver (services/admin/archival.py) finds closed runs on the visibility topic, not through this
        # action: nothing to write here.
        log.debug("shard %d: %s/%s/%s is due for archival", self._shard.index, namespace, workflow_id, run_id)


class HistoryView(HistorySequence):
    """A run's history read lazily through the overlay. Events read are kept for the view's life (one action): a
    workflow task reads its previous task's STARTED to learn where its events begin, then that event again among
    them, and each store read is an Avro decode on the processor's thread."""

    def __init__(self, shard: Shard, run: RunState) -> None:
        self._shard = shard
        self._run = run
        self._read: dict[int, Record] = {}

    def __len__(self) -> int:
        return self._run.history_length

    def event_at(self, index: int) -> Record:
        event = self._read.get(index)
        if event is None:
            event = self._shard.event(self._run.namespace, self._run.workflow_id, self._run.run_id, index + 1)
            if event is None:
                raise IndexError(f"event {index + 1} of run {self._run.run_id} is not in the store")
            self._read[index] = event
        return event
