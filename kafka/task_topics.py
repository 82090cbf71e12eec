"""Task queue topics, created on first use (DESIGN.md §10), by the processor before it produces a task and by a
worker before it subscribes, whichever comes first: the processor knows a queue exists when a workflow first
names it, and must know its partition count to address records the way every worker expects."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # stubs omit the re-export

from ostinato.kafka.clients import admin_client
from ostinato.schemas.topics import (
    TaskKind,
    TopicSpec,
    held_topic_spec,
    queue_of_held_topic,
    task_topic_name,
    task_topic_spec,
)

log = logging.getLogger("ostinato.kafka")
CREATE_TIMEOUT_S = 30.0
_FORBIDDEN = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED)


def worker_group(prefix: str, queue: str) -> str:
    """The consumer group the workers of `queue` join; their replies reader is named after it too."""
    return f"{prefix}-worker-{queue}"


class TopicCreationForbidden(KafkaException):
    """A task topic does not exist (or cannot be described) and this principal may not create it: a worker with only
    its queue's ACLs waits until the processor creates the topics, when a workflow first names the queue."""


class TaskTopics:
    """Task topics by name, created on first use and their partition counts remembered (thread-safe)."""

    def __init__(self, bootstrap: str, prefix: str, replication_factor: int,
                 security: Mapping[str, str] | None = None) -> None:
        self._admin = admin_client(bootstrap, security)
        self._prefix = prefix
        self._rf = replication_factor
        self._partitions: dict[str, int] = {}
        self._lock = threading.Lock()

    def partitions(self, topic: str) -> int:
        """The topic's partition count, creating the topic first if it does not exist.

        Raises:
            TopicCreationForbidden: it does not exist and this principal may not create it.
        """
        known = self._partitions.get(topic)
        if known is not None:
            return known
        with self._lock:
            if topic not in self._partitions:
                self._partitions[topic] = self._ensure(topic)
            return self._partitions[topic]

    def ensure_queue(self, queue: str) -> list[str]:
        """Both task topics of `queue` (workflow, activity), created unless they exist; their names.

        Raises:
            TopicCreationForbidden: one does not exist and this principal may not create it.
        """
        names = [task_topic_name(self._prefix, queue, kind) for kind in TaskKind]
        for name in names:
            self.partitions(name)
        return names

    def _ensure(self, topic: str) -> int:
        found = self._describe(topic)
        if found:
            return found
        held_queue = queue_of_held_topic(self._prefix, topic)
        specs: list[TopicSpec]
        if held_queue is not None:  # a rate-limited queue's holding topic: read by the servers only
            specs = [held_topic_spec(self._prefix, held_queue, self._rf)]
        else:
            queue, _ = self._parse(topic)
            # Both topics of a queue come into being together, so a worker that may not create topics finds its
            # activity topic as soon as the first workflow task of its queue is dispatched, not only when an
            # activity is.
            specs = [task_topic_spec(self._prefix, queue, kind, self._rf) for kind in TaskKind]
        futures = self._admin.create_topics([NewTopic(s.name, s.partitions, self._rf, config=s.configs) for s in specs],
                                            operation_timeout=CREATE_TIMEOUT_S)
        for spec in specs:
            try:
                futures[spec.name].result(CREATE_TIMEOUT_S)
                log.info("created task topic %s (%d partitions)", spec.name, spec.partitions)
            except KafkaException as exc:
                code = exc.args[0].code()
                if spec.name != topic:  # the sibling: its own first use reports what stands in its way
                    continue
                if code in _FORBIDDEN:
                    found = self._describe(topic)  # created meanwhile by someone who may (Kafka checks rights first)
                    if found:
                        return found
                    raise TopicCreationForbidden(exc.args[0]) from None
                if code != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        deadline = time.monotonic() + CREATE_TIMEOUT_S
        while time.monotonic() < deadline:  # until every partition has a leader, or the first produce stalls
            found = self._describe(topic)
            if found:
                return found
            time.sleep(0.05)
        raise TimeoutError(f"task topic {topic} was created but has no leaders after {CREATE_TIMEOUT_S:.0f}s")

    def _describe(self, topic: str) -> int:
        meta = self._admin.list_topics(topic, timeout=CREATE_TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return 0
        if any(p.leader < 0 for p in meta.partitions.values()):
            return 0
        return len(meta.partitions)

    def _parse(self, topic: str) -> tuple[str, TaskKind]:
        head = f"{self._prefix}.tasks."
        if not topic.startswith(head) or "." not in topic[len(head):]:
            raise ValueError(f"{topic!r} is not a task topic of prefix {self._prefix!r}")
        queue, _, kind = topic[len(head):].rpartition(".")
        return queue, TaskKind(kind)
