"""The topic catalogue of DESIGN.md §3: names, partition counts and configs, as data every process shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

DEFAULT_PREFIX = "ostinato"
DEFAULT_TASK_QUEUE_PARTITIONS = 4
DEFAULT_REPLY_PARTITIONS = 8

_DAY_MS = 24 * 3600 * 1000
# Records carry payloads up to the 256 KiB claim-check threshold plus envelopes; a workflow task completion can
# carry several such payloads. Producers use the same ceiling.
MAX_RECORD_BYTES = 4 * 2**20
# How long tombstones stay readable in compacted topics. A store whose checkpoint is older than this cannot
# catch up from the changelog (it would miss deletions) and restores from scratch instead.
TOMBSTONE_RETENTION_MS = _DAY_MS


class Topic(StrEnum):
    """Topics created by `ostinato cluster init` (task queue topics are created on first use)."""

    COMMANDS = "commands"
    HISTORY = "history"
    STATE = "state"
    VISIBILITY = "visibility"
    REPLIES = "replies"
    CLUSTER = "cluster"
    SCHEMAS = "schemas"


class TaskKind(StrEnum):
    WORKFLOW = "workflow"
    ACTIVITY = "activity"


@dataclass(frozen=True)
class TopicSpec:
    """One topic as it must exist: `name` is complete (prefix included)."""

    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


def topic_name(prefix: str, topic: Topic) -> str:
    return f"{prefix}.{topic.value}"


def task_topic_name(prefix: str, queue: str, kind: TaskKind) -> str:
    return f"{prefix}.tasks.{queue}.{kind.value}"


def min_insync_replicas(replication_factor: int) -> int:
    """Two acknowledgements once there are three copies; one below that (a single broker must still work)."""
    return 2 if replication_factor >= 3 else 1


def _compacted() -> dict[str, str]:
    return {"cleanup.policy": "compact", "delete.retention.ms": str(TOMBSTONE_RETENTION_MS)}


def _deleted(retention_ms: int) -> dict[str, str]:
    return {"cleanup.policy": "delete", "retention.ms": str(retention_ms)}


def catalogue(prefix: str, shards: int, replication_factor: int,
              reply_partitions: int = DEFAULT_REPLY_PARTITIONS) -> list[TopicSpec]:
    """Every topic `cluster init` creates, with the configs it must carry."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    common = {"min.insync.replicas": str(min_insync_replicas(replication_factor))}
    data = {**common, "max.message.bytes": str(MAX_RECORD_BYTES)}
    specs = [
        (Topic.COMMANDS, shards, {**data, **_deleted(7 * _DAY_MS)}),
        (Topic.HISTORY, shards, {**data, **_compacted()}),
        (Topic.STATE, shards, {**data, **_compacted()}),
        (Topic.VISIBILITY, shards, {**data, **_compacted()}),
        (Topic.REPLIES, reply_partitions, {**data, **_deleted(3600 * 1000)}),
        (Topic.CLUSTER, 1, {**common, **_compacted()}),
        (Topic.SCHEMAS, 1, {**common, **_compacted()}),
    ]
    return [TopicSpec(topic_name(prefix, t), n, cfg) for t, n, cfg in specs]


MAX_TASK_QUEUE_LENGTH = 180  # Kafka topic names stop at 249: room for a 50-character prefix and ".tasks.<q>.activity"
_TASK_QUEUE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def task_queue_problem(queue: str) -> str | None:
    """Why `queue` cannot name a task queue (it becomes part of a Kafka topic name), or None."""
    if not queue:
        return "task queue names cannot be empty"
    if len(queue) > MAX_TASK_QUEUE_LENGTH:
        return f"task queue names are at most {MAX_TASK_QUEUE_LENGTH} characters ({len(queue)} given)"
    bad = sorted(set(queue) - _TASK_QUEUE_CHARS)
    if bad:
        return (f"task queue {queue[:60]!r} has characters a Kafka topic name cannot carry ({''.join(bad)[:10]!r}); "
                "use letters, digits, '.', '_' and '-'")
    return None


def task_topic_spec(prefix: str, queue: str, kind: TaskKind, replication_factor: int,
                    partitions: int = DEFAULT_TASK_QUEUE_PARTITIONS) -> TopicSpec:
    """A task queue topic, created idempotently by whoever first produces to or consumes from it."""
    configs = {
        "min.insync.replicas": str(min_insync_replicas(replication_factor)),
        "max.message.bytes": str(MAX_RECORD_BYTES),
        **_deleted(7 * _DAY_MS),
    }
    return TopicSpec(task_topic_name(prefix, queue, kind), partitions, configs)


# A rate-limited queue's activity tasks wait here until the servers' rate limiter releases them into the task topic
# (docs/architecture.md, "Rate limits"). One partition by default: one owner holds the queue's whole budget, so the
# rate is exact; more partitions split the budget by the share each owner holds.
DEFAULT_HELD_PARTITIONS = 1


def held_topic_name(prefix: str, queue: str) -> str:
    """Where a rate-limited queue's activity tasks wait for release. Not under `.tasks.`: no worker reads it."""
    return f"{prefix}.held.{queue}.{TaskKind.ACTIVITY.value}"


def held_topic_pattern(prefix: str) -> str:
    """A librdkafka subscription regex matching every held topic of `prefix`."""
    return "^" + prefix.replace(".", "\\.") + "\\.held\\..+\\." + TaskKind.ACTIVITY.value + "$"


def queue_of_held_topic(prefix: str, topic: str) -> str | None:
    """The task queue a held topic belongs to, or None when `topic` is not one of `prefix`'s held topics."""
    head, tail = f"{prefix}.held.", f".{TaskKind.ACTIVITY.value}"
    if not topic.startswith(head) or not topic.endswith(tail) or len(topic) <= len(head) + len(tail):
        return None
    return topic[len(head):-len(tail)]


def held_topic_spec(prefix: str, queue: str, replication_factor: int,
                    partitions: int = DEFAULT_HELD_PARTITIONS) -> TopicSpec:
    """A held topic: configured as the task topics are (its records are activity tasks)."""
    spec = task_topic_spec(prefix, queue, TaskKind.ACTIVITY, replication_factor, partitions)
    return TopicSpec(held_topic_name(prefix, queue), partitions, spec.configs)
