"""Drive load straight through Kafka: produce StartWorkflowExecution commands, then watch history until the
workflows close. No frontend is involved, so acceptance tests can exercise the processor on its own."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, TopicPartition

from ostinato.kafka.clients import admin_client, idempotent_producer, reader
from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import split_key, workflow_key
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.checker import check_history
from tests.tools.programs import to_payload
from tests.tools.worker import FLUSH_TIMEOUT_S, command_record, produce_command

__all__ = ["TERMINAL_EVENTS", "start_workflows", "wait_closed", "wait_closed_events"]

Record = dict[str, Any]
# The events that close a workflow. CONTINUED_AS_NEW closes a run, not the workflow: its next run goes on.
TERMINAL_EVENTS = frozenset({
    "WORKFLOW_EXECUTION_COMPLETED", "WORKFLOW_EXECUTION_FAILED", "WORKFLOW_EXECUTION_TIMED_OUT",
    "WORKFLOW_EXECUTION_CANCELED", "WORKFLOW_EXECUTION_TERMINATED",
})
_NO_INPUT = object()


def start_workflows(bootstrap: str, prefix: str, shards: int, count: int, workflow_type: str, task_queue: str,
                    namespace: str = "default", id_prefix: str | None = None,
                    input: Any = _NO_INPUT, **options: Any) -> list[str]:
    """Produce `count` StartWorkflowExecution commands (fire and forget: no reply partition) and return the ids.

    Args:
        id_prefix: ids are `<id_prefix>-<i>`; by default a fresh `<workflow_type>-<random>` so runs never clash.
        input: the workflow's single argument as a JSON value (none by default); a callable gets the index `i`
            and returns that workflow's argument.
        options: further StartWorkflowExecution fields, e.g. `run_timeout_ms=...`.

    Raises:
        RuntimeError: a command was not acknowledged by Kafka.
    """
    id_prefix = id_prefix or f"{workflow_type}-{uuid.uuid4().hex[:8]}"
    ids = [f"{id_prefix}-{i}" for i in range(count)]
    producer = idempotent_producer(bootstrap, f"{prefix}-workload")
    failed: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failed.append(err)

    for i, workflow_id in enumerate(ids):
        value = input(i) if callable(input) else input
        args = [] if value is _NO_INPUT else [to_payload(value)]
        body = {"workflow_type": workflow_type, "task_queue": task_queue, "input": args, **options}
        command = command_record(namespace, workflow_id, "StartWorkflowExecution", body, identity="workload")
        produce_command(producer, prefix, shards, command, delivered)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if remaining or failed:
        raise RuntimeError(f"{remaining + len(failed)} of {count} start commands were not delivered: {failed[:3]}")
    return ids


def wait_closed(bootstrap: str, prefix: str, ids: Iterable[str], namespace: str = "default",
                timeout: float = 60.0) -> dict[str, str]:
    """Tail `<prefix>.history` until every listed workflow closed; map each id to its terminal event type.

    Raises:
        TimeoutError: some workflows are still open after `timeout` seconds (the message says how many and names
            a few).
    """
    return {wf: event["event_type"] for wf, event in wait_closed_events(bootstrap, prefix, ids, namespace,
                                                                       timeout).items()}


def wait_closed_events(bootstrap: str, prefix: str, ids: Iterable[str], namespace: str = "default",
                       timeout: float = 60.0) -> dict[str, Record]:
    """Like `wait_closed`, but each id maps to its whole terminal history event (result, failure...)."""
    pending = set(ids)
    closed: dict[str, Record] = {}
    if not pending:
        return closed
    topic = topic_name(prefix, Topic.HISTORY)
    consumer = reader(bootstrap, f"{prefix}-wait-closed")
    try:
        consumer.assign(_partitions_of(bootstrap, topic, namespace, pending, timeout))
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                examples = ", ".join(sorted(pending)[:5])
                raise TimeoutError(f"{len(pending)} of {len(pending) + len(closed)} workflows still open after "
                                   f"{timeout:.0f}s in {topic}, e.g. {examples}")
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                _take(msg, namespace, pending, closed)
    finally:
        consumer.close()
    return closed


def _partitions_of(bootstrap: str, topic: str, namespace: str, ids: set[str], timeout: float,
                   ) -> list[TopicPartition]:
    """From the beginning, only the partitions (shards) that hold the listed workflows."""
    metadata = admin_client(bootstrap).list_topics(topic, timeout=timeout).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise RuntimeError(f"cannot read {topic}: {getattr(metadata, 'error', None)}; did `cluster init` run?")
    shards = len(metadata.partitions)
    wanted = sorted({partition_for(workflow_key(namespace, wf), shards) for wf in ids})
    return [TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted]


def _take(msg: Message, namespace: str, pending: set[str], closed: dict[str, Record]) -> None:
    err, key, value = msg.error(), msg.key(), msg.value()
    if err is not None:
        if err.code() != KafkaError._PARTITION_EOF:
            raise RuntimeError(f"reading history failed: {err}")
        return
    if key is None or value is None:  # a tombstone: a deleted run
        return
    ns, workflow_id, *_ = split_key(key.decode() if isinstance(key, bytes) else key)
    if ns != namespace or workflow_id not in pending:
        return
    name, event = codec.decode(value)
    if name == wire.HISTORY_EVENT and event["event_type"] in TERMINAL_EVENTS:
        pending.discard(workflow_id)
        closed[workflow_id] = event


def wait_for_events(bootstrap: str, prefix: str, workflow_ids: list[str], event_type: str, count: int,
                    timeout: float) -> None:
    """Until each workflow's history holds `count` events of the type."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        histories = {wf: events for (_, wf, _), events in check_history(bootstrap, prefix).histories.items()}
        if all(sum(e["event_type"] == event_type for e in histories.get(wf, [])) >= count for wf in workflow_ids):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{workflow_ids} did not all have {count} {event_type} events in {timeout:.0f} s")


def timer_fired_once(events: list[Record]) -> tuple[int, int]:
    """A one-timer run's TIMER_FIRED time and its deadline (TIMER_STARTED's time plus its timeout), after checking
    that it fired exactly once and never early."""
    assert [e["event_type"] for e in events].count("TIMER_FIRED") == 1
    fired = next(e for e in events if e["event_type"] == "TIMER_FIRED")["event_time_ms"]
    started = next(e for e in events if e["event_type"] == "TIMER_STARTED")
    due = started["event_time_ms"] + started["attributes"][1]["start_to_fire_timeout_ms"]
    assert fired >= due, f"fired at {fired}, {due - fired} ms before its deadline"
    return fired, due
