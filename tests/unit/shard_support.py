"""Helpers of the shard tests: command bytes, workflow ids per shard, and the in-memory engine with Kafka shards."""

from __future__ import annotations

from collections import deque
from typing import Any

from ostinato.schemas import codec, partition_for
from ostinato.schemas.keys import split_key, workflow_key
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.history.changelog import ChangelogApplier, parse_timer_key
from ostinato.services.history.shard import Output, Shard, Topology
from ostinato.services.history.store import Family, MemoryStore, ShardStore
from ostinato.streams.clock import FakeClock
from ostinato.streams.config import Config
from ostinato.streams.engine import DEFAULT_CONFIG, InMemoryEngine
from ostinato.streams.model import Workflow, decode_current, decode_run

Record = dict[str, Any]
NS = "default"
Q = "orders"
NOW = 1_704_067_200_000
PREFIX = "p"
TASK_PARTITIONS = 4
REPLY_PARTITIONS = 4
MAX_TIMERS = 500  # as the processor's MAX_TIMERS_PER_SHARD


def topology(shards: int) -> Topology:
    return Topology(prefix=PREFIX, shards=shards, reply_partitions=REPLY_PARTITIONS,
                    task_partitions=lambda topic: TASK_PARTITIONS)


def topic(t: Topic) -> str:
    return topic_name(PREFIX, t)


def workflow_on(shard: int, shards: int, stem: str, skip: int = 0) -> str:
    """A workflow id of namespace NS that hashes to `shard` (the `skip`-th such id)."""
    found = (f"{stem}-{i}" for i in range(10_000) if partition_for(workflow_key(NS, f"{stem}-{i}"), shards) == shard)
    for _ in range(skip):
        next(found)
    return next(found)


def command(name: str, body: Record | None = None, *, workflow_id: str, run_id: str = "", request_id: str = "req",
            reply_partition: int | None = 0, identity: str = "tester", time_ms: int = 0, namespace: str = NS,
            ) -> bytes:
    """A command record's bytes, shaped as `InMemoryEngine._send` builds it."""
    return codec.encode("ostinato.command.Command", {
        "namespace": namespace, "workflow_id": workflow_id, "run_id": run_id, "request_id": request_id,
        "identity": identity, "time_ms": time_ms, "reply_partition": reply_partition,
        "body": ("ostinato.command." + name, body or {})})


def start_command(workflow_id: str, request_id: str = "start", **body: Any) -> bytes:
    return command("StartWorkflowExecution", {"workflow_type": "Order", "task_queue": Q, **body},
                   workflow_id=workflow_id, request_id=request_id)


def complete_command(task: Record, *commands: tuple[str, Record], request_id: str = "complete") -> bytes:
    """A worker's RespondWorkflowTaskCompleted for `task`, with commands named without their namespace."""
    return command("RespondWorkflowTaskCompleted", {
        "scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"],
        "commands": [("ostinato.command." + name, body) for name, body in commands]},
        workflow_id=task["workflow_id"], run_id=task["run_id"], request_id=request_id)


def start_timer(timeout_ms: int, timer_id: str = "nap") -> tuple[str, Record]:
    """A StartTimer command for `complete_command`."""
    return ("StartTimerCommand", {"timer_id": timer_id, "start_to_fire_timeout_ms": timeout_ms})


def signal_command(workflow_id: str, name: str, request_id: str = "", **envelope: Any) -> bytes:
    return command("SignalWorkflowExecution", {"signal_name": name}, workflow_id=workflow_id,
                   request_id=request_id or f"signal-{name}", **envelope)


def commit(shard: Shard) -> list[Output]:
    """Play the processor after a successful commit: the batch's outputs, then the overlay written to the store."""
    outputs = list(shard.outputs)
    shard.committed({})
    return outputs


def decoded(outputs: list[Output], t: Topic | str) -> list[tuple[int, bytes, Record | None]]:
    """(partition, key, decoded value) of the outputs to one topic, in order."""
    name = topic(t) if isinstance(t, Topic) else t
    return [(o.partition, o.key, None if o.value is None else codec.decode(o.value)[1])
            for o in outputs if o.topic == name]


def event_types(outputs: list[Output]) -> list[str]:
    return [v["event_type"] for _, _, v in decoded(outputs, Topic.HISTORY) if v is not None]


def workflow_tasks(outputs: list[Output], queue: str = Q) -> list[Record]:
    return [v for _, _, v in decoded(outputs, f"{PREFIX}.tasks.{queue}.workflow") if v is not None]


def replies(outputs: list[Output]) -> list[tuple[str, Record]]:
    """(reply type name without its namespace, body) of every reply in the outputs."""
    return [(v["body"][0].rpartition(".")[2], v["body"][1]) for _, _, v in decoded(outputs, Topic.REPLIES)
            if v is not None]


def payload(text: str) -> Record:
    return {"metadata": {"encoding": b"json/plain"}, "data": f'"{text}"'.encode()}


def task_of(engine: InMemoryEngine, queue: str) -> Record:
    """The next WorkflowTask record on `queue` of an engine (either kind)."""
    polled = engine.poll_workflow_task(queue)
    assert polled is not None and polled[0] == "ostinato.task.WorkflowTask", f"no workflow task on {queue}"
    return polled[1]


def family(store: ShardStore, f: Family) -> dict[bytes, bytes]:
    return dict(store.scan(f))


def rebuilt_from_changelog(store: ShardStore, config: Config) -> dict[Family, dict[bytes, bytes]]:
    """The derived families (timers, sizes) a restore computes from the store's state and history alone."""
    applier = ChangelogApplier(lambda f, k: None, config)
    for key, value in store.scan(Family.STATE):
        applier.state(key, value)
    for key, value in store.scan(Family.HISTORY):
        applier.history(key, value)
    return {f: {k: v for k, v in applier.writes[f].items() if v is not None} for f in (Family.TIMERS, Family.SIZES)}


class ShardEngine(InMemoryEngine):
    """The in-memory engine whose shards are Kafka `Shard`s over MemoryStores, driven as the processor drives them.

    The engine's client and worker helpers build the command records; each round takes every pending command of a
    shard, then its due deadlines, as one batch, and "commits" it: outputs reach their readers (commands logs, task
    queues, replies, history and visibility views) and the overlay is written to the store. Deadlines fire inside
    the batch (no commands-log offset), so a start after a firing gets another offset here than in the engine.
    """

    def __init__(self, shards: int = 4, config: Config = DEFAULT_CONFIG, clock: FakeClock | None = None) -> None:
        super().__init__(shards, config, clock)
        self.owners = [Shard(i, MemoryStore(), topology(shards), config) for i in range(shards)]

    def run_until_idle(self) -> int:
        processed = 0
        while True:
            now = self.clock.now_ms
            for log, owner in zip(self.shards, self.owners, strict=True):
                end = len(log.log)
                while log.offset < end:
                    owner.process(log.log[log.offset], log.offset, now)
                    log.offset += 1
                    processed += 1
                for key in owner.due_timers(now, MAX_TIMERS):
                    owner.fire(key, log.offset, now)
                self._commit(owner)
            self.timers = sorted((d.fire_at_ms, ns, wf, d.run_id, d.kind, d.timer_id, d.scheduled_event_id, d.attempt)
                                 for owner in self.owners for ns, wf, d in map(parse_timer_key, self.timer_keys(owner)))
            if not self.pending_commands and not (self.timers and self.timers[0][0] <= self.clock.now_ms):
                return processed

    @staticmethod
    def timer_keys(owner: Shard) -> list[bytes]:
        return [k for k, _ in owner.store.scan(Family.TIMERS)]

    def _commit(self, owner: Shard) -> None:
        for rejection in owner.rejections:
            self.rejections[rejection.code] += 1
            self.rejected.append((rejection.command, {"code": rejection.code, "message": rejection.message,
                                                      "existing_run_id": ""}))
        self.quarantined.extend((q.code, q.command_type, q.run_id) for q in owner.quarantined)
        for out in owner.outputs:
            self._deliver(out)
        owner.committed({})

    def _deliver(self, out: Output) -> None:
        """Hand one committed record to the view its topic's reader keeps."""
        value = None if out.value is None else codec.decode(out.value)[1]
        if out.topic == topic(Topic.COMMANDS):
            assert out.value is not None and out.partition == partition_for(out.key.decode(), len(self.shards))
            self.shards[out.partition].log.append(out.value)
        elif out.topic == topic(Topic.HISTORY):
            ns, wf, run_id, event_id = split_key(out.key.decode())
            if value is None:
                self.histories.pop((ns, wf, run_id), None)
            else:
                history = self.histories.setdefault((ns, wf, run_id), [])
                assert int(event_id) == value["event_id"] == len(history) + 1, f"{out.key!r} out of order"
                history.append(value)
        elif out.topic == topic(Topic.VISIBILITY):
            ns, wf, run_id = split_key(out.key.decode())
            if value is None:
                self.visibility.pop((ns, wf, run_id), None)
            else:
                self.visibility[(ns, wf, run_id)] = value
        elif out.topic == topic(Topic.REPLIES):
            assert value is not None
            self.replies[out.key.decode()] = value
        elif out.topic.startswith(f"{PREFIX}.tasks."):
            queue, kind = out.topic.removeprefix(f"{PREFIX}.tasks.").rsplit(".", 1)
            queues = self.workflow_tasks if kind == "workflow" else self.activity_tasks
            assert out.value is not None
            queues.setdefault(queue, deque()).append(out.value)
        else:
            assert out.topic == topic(Topic.STATE), out.topic

    def workflow(self, namespace: str, workflow_id: str) -> Workflow | None:
        """The workflow as its owner's store has it."""
        store = self.owners[self.shard_of(namespace, workflow_id)].store
        wf = Workflow(namespace, workflow_id)
        pointer = store.get(Family.STATE, workflow_key(namespace, workflow_id).encode())
        wf.current = None if pointer is None else decode_current(pointer)
        prefix = (workflow_key(namespace, workflow_id) + "/").encode()
        for _, data in store.scan(Family.STATE, prefix=prefix):
            run = decode_run(data)
            wf.runs[run.run_id] = run
        return wf if wf.current is not None or wf.runs else None


def state_records(engine: InMemoryEngine) -> dict[bytes, bytes]:
    """Every state changelog record the engine's shards hold (key -> value), whichever engine it is."""
    if isinstance(engine, ShardEngine):
        return {k: v for owner in engine.owners for k, v in owner.store.scan(Family.STATE)}
    return {k.encode(): v for shard in engine.shards for k, v in shard.state.items()}


def snapshot(engine: InMemoryEngine) -> dict[str, Any]:
    """What a client, a worker and a reader of the changelog topics can see of an engine."""
    return {
        "histories": {k: v for k, v in engine.histories.items() if v},
        "visibility": dict(engine.visibility),
        "replies": dict(engine.replies),
        "rejections": dict(engine.rejections),
        "timers": sorted(engine.timers),
        "state": state_records(engine),
        "workflow_tasks": {q: list(v) for q, v in engine.workflow_tasks.items() if v},
        "activity_tasks": {q: list(v) for q, v in engine.activity_tasks.items() if v},
    }
