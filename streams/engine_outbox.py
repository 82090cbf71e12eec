"""The in-memory engine's `Outbox` (streams/perform.py): what a step produces goes into the engine's queues and
dictionaries, staged until the whole step succeeded, as the Kafka shard's goes into its transaction."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ostinato.schemas import codec, wire
from ostinato.schemas.topics import MAX_RECORD_BYTES
from ostinato.streams.actions import Deadline, Publish
from ostinato.streams.config import Config
from ostinato.streams.model import RunState
from ostinato.streams.perform import RecordTooLarge
from ostinato.streams.records import HistorySequence

if TYPE_CHECKING:
    from ostinato.streams.engine import InMemoryEngine

Record = dict[str, Any]
# (fire time, namespace, workflow id, run id, kind, timer id, scheduled event id, attempt): sorting these tuples
# orders the index by fire time, like the big-endian RocksDB index of the Kafka shell, and ties deterministically.
TimerKey = tuple[int, str, str, str, str, str, int, int]


class EngineOutbox:
    """The in-memory engine's `Outbox`: records into its queues and dictionaries.

    Like the Kafka shard's, it stages what a step produces and applies it only when the whole step succeeded
    (`commit`), so a command that fails changes nothing (`discard`). Each record is encoded when staged, so it must
    fit its schema and the record limit as on Kafka; `RecordTooLarge` is raised for one over the limit.
    """

    def __init__(self, engine: InMemoryEngine) -> None:
        self._engine = engine
        self._effects: list[Callable[[], None]] = []
        self._events: dict[tuple[str, str, str], list[Record]] = {}  # the step's events, staged
        self._event_bytes: dict[tuple[str, str, str], int] = {}

    # -- staging ------------------------------------------------------------------------------------------------

    def later(self, effect: Callable[[], None]) -> None:
        self._effects.append(effect)

    def checked(self, topic: str, data: bytes) -> bytes:
        if len(data) > MAX_RECORD_BYTES:
            raise RecordTooLarge(topic, len(data), MAX_RECORD_BYTES)
        return data

    def encoded(self, topic: str, type_name: str, record: Record) -> bytes:
        return self.checked(topic, codec.encode(type_name, record))

    def add_event(self, run: tuple[str, str, str], event: Record, size: int) -> None:
        self._events.setdefault(run, []).append(event)
        self._event_bytes[run] = self._event_bytes.get(run, 0) + size

    def commit(self) -> None:
        engine, effects, events, sizes = self._engine, self._effects, self._events, self._event_bytes
        self.discard()
        for run, added in events.items():
            engine.histories.setdefault(run, []).extend(added)
            engine.history_bytes[run] = engine.history_bytes.get(run, 0) + sizes[run]
        for effect in effects:
            effect()

    def discard(self) -> None:
        self._effects, self._events, self._event_bytes = [], {}, {}

    # -- the Outbox protocol ------------------------------------------------------------------------------------

    def config(self, namespace: str) -> Config:
        return self._engine.config

    def history(self, run: RunState) -> Sequence[Record]:
        key = (run.namespace, run.workflow_id, run.run_id)
        return JoinedHistory(self._engine.histories.get(key, []), self._events.get(key, []))

    def history_size(self, run: RunState) -> int:
        key = (run.namespace, run.workflow_id, run.run_id)
        return self._engine.history_bytes.get(key, 0) + self._event_bytes.get(key, 0)

    def command(self, command: Record) -> None:
        data = self.encoded("commands", wire.COMMAND, command)
        shard = self._engine.shards[self._engine.shard_of(command["namespace"], command["workflow_id"])]
        self.later(lambda: shard.log.append(data))

    def reply(self, reply_partition: int, request_id: str, reply: Record) -> None:
        decoded = codec.decode(self.encoded("replies", wire.REPLY, reply))[1]
        self.later(lambda: self._engine.replies.__setitem__(request_id, decoded))

    def workflow_task(self, task_queue: str, namespace: str, workflow_id: str, type_name: str, task: Record) -> None:
        data = self.encoded(f"tasks.{task_queue}.workflow", type_name, task)
        self.later(lambda: _queue(self._engine.workflow_tasks, task_queue).append(data))

    def activity_task(self, task_queue: str, namespace: str, workflow_id: str, activity_id: str,
                      task: Record) -> None:
        data = self.encoded(f"tasks.{task_queue}.activity", wire.ACTIVITY_TASK, task)
        self.later(lambda: _queue(self._engine.activity_tasks, task_queue).append(data))

    def visibility(self, run: RunState, record: Record) -> None:
        decoded = codec.decode(self.encoded("visibility", wire.VISIBILITY, record))[1]
        key = (run.namespace, run.workflow_id, run.run_id)
        self.later(lambda: self._engine.visibility.__setitem__(key, decoded))

    def timer(self, namespace: str, workflow_id: str, deadline: Deadline, scheduled: bool) -> None:
        engine, key = self._engine, _timer_key(namespace, workflow_id, deadline)

        def index() -> None:
            i = find_timer(engine.timers, key)
            if scheduled and i is None:
                bisect.insort(engine.timers, key)
            elif not scheduled and i is not None:  # a deadline that just fired is already out of the index
                del engine.timers[i]

        self.later(index)

    def delete_run(self, namespace: str, workflow_id: str, run_id: str) -> None:
        run = (namespace, workflow_id, run_id)

        def delete() -> None:
            self._engine.histories.pop(run, None)
            self._engine.history_bytes.pop(run, None)
            self._engine.visibility.pop(run, None)

        self.later(delete)

    def archive(self, namespace: str, workflow_id: str, run_id: str) -> None:
        self.later(lambda: self._engine.archive_requests.append((namespace, workflow_id, run_id)))

    def publish(self, action: Publish) -> None:
        self.later(lambda: self._engine.published.append(action))


class JoinedHistory(HistorySequence):
    """A run's committed history followed by the events of the step being staged, as `Outbox.history` gives it."""

    def __init__(self, committed: list[Record], staged: list[Record]) -> None:
        self._committed = committed
        self._staged = staged

    def __len__(self) -> int:
        return len(self._committed) + len(self._staged)

    def event_at(self, index: int) -> Record:
        n = len(self._committed)
        return self._committed[index] if index < n else self._staged[index - n]

    def __iter__(self) -> Iterator[Record]:
        yield from self._committed
        yield from self._staged


def _timer_key(namespace: str, workflow_id: str, d: Deadline) -> TimerKey:
    return (d.fire_at_ms, namespace, workflow_id, d.run_id, d.kind, d.timer_id, d.scheduled_event_id, d.attempt)


def _queue(queues: dict[str, deque[bytes]], name: str) -> deque[bytes]:
    return queues.setdefault(name, deque())


def find_timer(timers: list[TimerKey], key: TimerKey) -> int | None:
    """Where `key` is in the sorted timer index, or None."""
    i = bisect.bisect_left(timers, key)
    return i if i < len(timers) and timers[i] == key else None
