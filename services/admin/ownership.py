"""Who owns which shard, as processors announce it in `<prefix>.cluster` (keys `shard/<n>`), which namespaces
are registered (keys `namespace/<name>`), their custom search attributes (keys `search_attribute/<ns>/<name>`), the
task queues' engine-enforced rate limits (keys `task_queue_rate_limit/<queue>`) and each task queue's current and
ramping build (keys `deployment/<ns>/<queue>`, worker versioning).

Owners write their ShardOwner record inside a processing transaction, so a fenced zombie's claim is never
visible; the latest committed record per shard is the current owner.
"""

from __future__ import annotations

import logging
import threading

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from ostinato.kafka.clients import STEADY_FETCH_WAIT_MS, reader
from ostinato.schemas import codec, wire
from ostinato.schemas.topics import Topic, topic_name
from ostinato.streams.versioning import QueueVersioning

log = logging.getLogger("ostinato.ownership")
DEFAULT_NAMESPACE = "default"
CATCH_UP_FETCH_WAIT_MS = 50


class OwnershipTable:
    """Tails the cluster topic in a daemon thread and keeps the latest owner of every shard."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        # The end of the topic is known from an empty fetch, which the broker holds for fetch.wait.max.ms: a short
        # wait until then, or every server start would wait 500 ms to be caught up. After that a steady one
        # (`_settle`): the broker answers a held fetch as soon as a record is readable, and every server process
        # runs one of these, so 50 ms cost the broker 20 empty fetches a second each for nothing.
        self._bootstrap, self._client_id = bootstrap, f"{prefix}-ownership"
        self._consumer = reader(bootstrap, self._client_id, overrides={"fetch.wait.max.ms": CATCH_UP_FETCH_WAIT_MS})
        self._settled = False
        self._topic = topic_name(prefix, Topic.CLUSTER)
        self._owners: dict[int, dict[str, object]] = {}
        self._namespaces: dict[str, dict[str, object]] = {}
        self._search_attributes: dict[str, dict[str, str]] = {}  # namespace -> name -> type
        self._rate_limits: dict[str, float] = {}  # task queue -> activities per second (only limits in force)
        self._deployments: dict[str, dict[str, QueueVersioning]] = {}  # namespace -> task queue -> versioning
        self.deployment_changes = 0  # grows with every change read: readers cache what they built until it moves
        self.caught_up = threading.Event()  # the topic was read to its end once
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ostinato-ownership", daemon=True)

    def start(self) -> OwnershipTable:
        self._consumer.assign([TopicPartition(self._topic, 0, 0)])
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is None:  # never started
            self._consumer.close()
        else:
            self._thread.join(5)  # the thread closes its consumer, whichever it holds by then

    def owner(self, shard: int) -> dict[str, object] | None:
        with self._lock:
            return self._owners.get(shard)

    def owners(self) -> dict[int, dict[str, object]]:
        with self._lock:
            return dict(self._owners)

    def namespace(self, name: str) -> dict[str, object] | None:
        with self._lock:
            return self._namespaces.get(name)

    def namespaces(self) -> dict[str, dict[str, object]]:
        with self._lock:
            return dict(self._namespaces)

    def search_attributes(self, namespace: str) -> dict[str, str]:
        """The custom search attributes registered in a namespace: name -> type (`Keyword`, `Int`...)."""
        with self._lock:
            return dict(self._search_attributes.get(namespace, {}))

    def rate_limits(self) -> dict[str, float]:
        """Task queues with an engine-enforced activity rate: queue -> activities per second."""
        with self._lock:
            return dict(self._rate_limits)

    def rate_limited_queues(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._rate_limits)

    def deployments(self, namespace: str) -> dict[str, QueueVersioning]:
        """Each task queue's current and ramping build in a namespace (worker versioning), as last set."""
        with self._lock:
            return dict(self._deployments.get(namespace, {}))

    def _run(self) -> None:
        try:
            self._tail()
        finally:
            self._consumer.close()

    def _tail(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("reading %s: %s", self._topic, err.str())
                else:
                    self.caught_up.set()
                    self._settle(msg.offset())
                continue
            key = (msg.key() or b"").decode(errors="replace")
            if not key.startswith(("shard/", "namespace/", "search_attribute/", "task_queue_rate_limit/",
                                   "deployment/")) or msg.value() is None:
                continue
            try:
                name, record = codec.decode(msg.value() or b"")
            except codec.DecodeError as exc:
                log.warning("unreadable ownership record %s: %s", key, exc)
                continue
            if name == wire.SHARD_OWNER:
                with self._lock:
                    self._owners[int(record["shard"])] = record
            elif name == wire.NAMESPACE:
                with self._lock:
                    self._namespaces.setdefault(str(record["name"]), record)  # the first registration wins
            elif name == wire.SEARCH_ATTRIBUTE:
                with self._lock:  # the first registration of a name wins, as for namespaces
                    self._search_attributes.setdefault(str(record["namespace"]), {}).setdefault(
                        str(record["name"]), str(record["type"]))
            elif name == wire.TASK_QUEUE_RATE_LIMIT:
                with self._lock:  # the latest setting wins; zero lifts the limit
                    rate = float(record["activities_per_second"])
                    if rate > 0:
                        self._rate_limits[str(record["task_queue"])] = rate
                    else:
                        self._rate_limits.pop(str(record["task_queue"]), None)
            elif name == wire.TASK_QUEUE_VERSIONING:
                self._deployment(record)

    def _settle(self, end: int | None) -> None:
        """Go on from the end just reached with a consumer that waits as long as the other steady readers."""
        if self._settled:
            return
        self._settled = True
        try:
            if end is None or end < 0:
                end = self._consumer.position([TopicPartition(self._topic, 0)])[0].offset
            steady = reader(self._bootstrap, self._client_id, overrides={"fetch.wait.max.ms": STEADY_FETCH_WAIT_MS})
            steady.assign([TopicPartition(self._topic, 0, end)])
        except KafkaException as exc:  # the short wait costs the broker empty fetches, nothing else: go on with it
            log.warning("reading %s: keeping the catch-up consumer (%s)", self._topic, exc)
            return
        self._consumer.close()
        self._consumer = steady

    def _deployment(self, record: dict[str, object]) -> None:
        """The highest revision of a queue's versioning wins (two frontends racing both read back the winner)."""
        found = QueueVersioning(str(record["current_build"]), str(record["ramping_build"]),
                                float(record["ramping_percentage"]), int(record["revision"]))  # type: ignore[call-overload]
        with self._lock:
            queues = self._deployments.setdefault(str(record["namespace"]), {})
            known = queues.get(str(record["task_queue"]))
            if known is None or known.revision <= found.revision:
                queues[str(record["task_queue"])] = found
                self.deployment_changes += 1
