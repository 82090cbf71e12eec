"""The worker's Kafka side: consume a task queue's topics, answer on the commands topic (DESIGN.md §5).

- Workflow tasks: the handler decides; the completion is produced to the workflow's shard of the commands topic;
  the task counts as done once Kafka acknowledged the completion.
- Activity tasks: `RecordActivityTaskStarted` is sent and its reply awaited before the task counts as done, so a
  task is never lost between Kafka and a worker; from then on the engine's timeouts and retries protect it.
  Heartbeats wait for their reply too: it says whether the workflow asked the activity to stop.
- Query tasks are answered directly on the replies topic, where the asking frontend waits.
- Every task of a fetched batch runs concurrently (each waits on Kafka round trips, not on the CPU), and a
  partition's offset is committed up to its first task not yet done (`OffsetTracker`), so a crash re-reads
  whatever was unfinished and nothing before it.
- Backpressure: the activity partitions are paused while `max_concurrent_activities` run, and the activity tasks of
  a fetched batch beyond the free slots wait (not started) for a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from ostinato.kafka.clients import STEADY_FETCH_WAIT_MS, base_config, describe_security, security_config
from ostinato.kafka.replies import ReplyReader
from ostinato.kafka.task_topics import TaskTopics, TopicCreationForbidden, worker_group
from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import workflow_key
from ostinato.schemas.topics import MAX_RECORD_BYTES, TaskKind, Topic, task_topic_name, topic_name
from ostinato.sdk._transport import ServedWorker, WorkerTransport
from ostinato.sdk._workflow_worker import HistoryBehind, history_needed_through
from ostinato.sdk.exceptions import RPCError
from ostinato.streams.rate import TokenBucket

Record = dict[str, Any]
HistoryReader = Callable[[str, str, str], Awaitable[list[Record]]]  # (namespace, workflow id, run id) -> events
REPLY_TIMEOUT_S = 30.0
# How long a heartbeat waits for its answer (which says whether cancellation was asked) before the attempt goes on
# without it: the answer comes on a replies partition that a dead server's open transaction can hold back for
# seconds, and while a heartbeat waits, the next is not sent and the answer to the activity waits too, so the
# engine would time the attempt out for want of heartbeats it was sent in time. A lost answer costs nothing: the
# next heartbeat's answer says the same. At most a quarter of the heartbeat timeout.
HEARTBEAT_ANSWER_WAIT_S = 0.25
# An attempt the engine marked started for us (eagerly, or on RecordActivityTaskStarted) is not run when the answer
# that hands it over took longer than this share of its shortest timeout: the engine's clock started no earlier
# than our request, so by the time the activity heartbeats the engine may have timed it out and retried it
# elsewhere, and the work would run twice. Not running it costs a retry after the timeout, not a double effect.
LATE_FRACTION = 0.75  # 0.5 skipped hand-overs 1 s late under load (a 2 s heartbeat timeout), costing a full timeout
POLL_S = 0.05
TOPICS_WAIT_S = 2.0  # how often a worker that may not create its task topics looks for them
FETCH_MAX = 100  # tasks taken from Kafka at once
# Finished tasks' offsets are committed at most this often (Kafka Streams' interval under exactly-once): one
# commit after every fetch was as many __consumer_offsets writes as the processor's transactions. A crash re-reads
# at most this much more, and a re-read task is stale to the engine (a completed task, a started activity).
COMMIT_INTERVAL_S = 0.1
HISTORY_TRIES = 6  # reads of a history that lags the task (0.02 s doubling: about 1.3 s in all)
EAGER_MAX = 3  # activities one completion may take eagerly (Temporal's limit)
EAGER_MAX_INPUT_BYTES = 1 << 20  # their inputs together: larger ones go through the activity topic
WORKER_EAGER_FAULT = "worker-after-eager-reply"
log = logging.getLogger("ostinato.worker")


class OffsetTracker:
    """Per partition, the offsets handed to tasks and not yet done; what may be committed is the first of them
    (or past the last seen when none is pending). Only the event loop's thread touches it."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, int], set[int]] = {}
        self._next: dict[tuple[str, int], int] = {}
        self._committed: dict[tuple[str, int], int] = {}

    def begin(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        self._pending.setdefault(key, set()).add(offset)
        self._next[key] = max(self._next.get(key, 0), offset + 1)

    def done(self, topic: str, partition: int, offset: int) -> None:
        self._pending.get((topic, partition), set()).discard(offset)

    def committable(self) -> list[TopicPartition]:
        """Offsets that moved forward since the last call."""
        out = []
        for key, nxt in self._next.items():
            pending = self._pending.get(key)
            upto = min(pending) if pending else nxt
            if upto > self._committed.get(key, -1):
                self._committed[key] = upto
                out.append(TopicPartition(key[0], key[1], upto))
        return out

    def forget(self, partitions: list[TopicPartition]) -> None:
        """Revoked partitions: their tasks may finish, but the next owner commits them."""
        for tp in partitions:
            for table in (self._pending, self._next, self._committed):
                table.pop((tp.topic, tp.partition), None)


class KafkaWorkerTransport(WorkerTransport):
    """Workers served from a cluster's Kafka task topics (`cluster` is the server's `GET /api/v1/cluster` answer); a
    worker whose cache lacks a workflow reads its history with `history` (the client's API)."""

    def __init__(self, cluster: Record, history: HistoryReader) -> None:
        self.cluster = cluster
        self.history = history

    async def run_worker(self, worker: ServedWorker, stopping: asyncio.Event) -> None:
        codec.settings_from_environment(os.environ)  # the test suite's check of the compiled Avro writers
        async def fetch_history(task: Record) -> list[Record]:
            return await self.history(task["namespace"], task["workflow_id"], task["run_id"])

        loop = KafkaWorkerLoop(worker, self.cluster, fetch_history)
        await loop.run(stopping, int(self.cluster.get("replication_factor", 1)))


class NotTaken(Exception):
    """A task this worker leaves for another (shutting down before its rate allowed it to start)."""


class KafkaWorkerLoop:
    def __init__(self, worker: ServedWorker, cluster: Record,
                 fetch_history: Callable[[Record], Awaitable[list[Record]]]):
        self.worker = worker
        self.bootstrap = cluster["kafka_bootstrap"]
        self.prefix = cluster["topic_prefix"]
        self.shards = cluster["shards"]
        self.reply_partitions = cluster["reply_partitions"]
        self.server_security: Record = cluster.get("kafka_security") or {}  # protocol and mechanism, never secrets
        self.fetch_history = fetch_history
        # Request ids: a random 64-bit prefix per worker, then a counter; as unique as uuid4 and without its
        # system call per command (3% of a worker's time in a ten-activity workflow).
        self._request_prefix = secrets.token_hex(8)
        self._requests = itertools.count()
        queue = worker.routed_queue  # a versioned worker reads its build's topics (worker versioning)
        self.workflow_topic = task_topic_name(self.prefix, queue, TaskKind.WORKFLOW)
        self.activity_topic = task_topic_name(self.prefix, queue, TaskKind.ACTIVITY)
        self.commands_topic = topic_name(self.prefix, Topic.COMMANDS)
        self.replies_topic = topic_name(self.prefix, Topic.REPLIES)
        self.running: set[asyncio.Task[None]] = set()  # activities executing
        self.tasks: set[asyncio.Task[None]] = set()  # every task being handled (workflow, query, activity start)
        self.offsets = OffsetTracker()
        self._committed_at = 0.0  # monotonic time of the last offset commit (`COMMIT_INTERVAL_S`)
        self.starting = 0  # activity tasks waiting for the engine to confirm their start
        self.slot_freed = asyncio.Event()  # an activity finished: a task waiting for a slot may start
        # Eager activity dispatch (on unless OSTINATO_EAGER_ACTIVITIES=0): activities this worker schedules on its
        # own queue come back in the completion's reply, already started for it.
        self.eager_activities = os.environ.get("OSTINATO_EAGER_ACTIVITIES", "1") != "0"
        self.eager_started = 0
        self.eager_workflow_tasks = 0
        self.paused = False
        # Worker(max_activities_per_second=): a start takes a token first (tasks waiting for one hold their slot)
        rate = worker.max_activities_per_second
        self.rate = TokenBucket.per_second(rate, time.monotonic()) if rate else None
        self.stopping = asyncio.Event()  # the worker's, once running

    # -- set-up ---------------------------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event, replication_factor: int) -> None:
        loop = asyncio.get_running_loop()
        self.stopping = stopping
        security = self.worker.kafka_config  # over the process's settings (OSTINATO_KAFKA_CONFIG, OSTINATO_KAFKA_*)
        self._check_security(security_config(security))
        if not await self._ensure_task_topics(replication_factor, stopping):
            return
        self.producer = Producer({**base_config(self.bootstrap, self.worker.identity, security),
                                  "enable.idempotence": True, "acks": "all", "linger.ms": 0,
                                  "message.max.bytes": MAX_RECORD_BYTES})
        self.reply_partition = random.randrange(self.reply_partitions)  # the partition our answers come back on
        group = worker_group(self.prefix, self.worker.routed_queue)
        self.replies = ReplyReader(self.bootstrap, self.replies_topic, [self.reply_partition], group, security)
        await loop.run_in_executor(None, self.replies.start)
        settings: dict[str, Any] = {
            **base_config(self.bootstrap, self.worker.identity, security),
            "group.id": group,
            "enable.auto.commit": False, "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky", "fetch.wait.max.ms": STEADY_FETCH_WAIT_MS,
            # A dead worker's partitions move on after 10 s (librdkafka's default is 45 s of stranded tasks).
            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 2_000,
            "fetch.max.bytes": MAX_RECORD_BYTES * 2}
        consumer = Consumer(settings)
        topics = [task_topic_name(self.prefix, self.worker.routed_queue, kind) for kind in self._kinds()]
        revoked: list[TopicPartition] = []  # filled on the consumer's thread, read on the loop's
        consumer.subscribe(topics, on_revoke=lambda _c, parts: revoked.extend(parts))
        self.consumer = consumer
        log.info("worker %s serving %s", self.worker.identity, ", ".join(topics))
        try:
            while not stopping.is_set():
                messages = await loop.run_in_executor(None, self._fetch)
                if revoked:
                    self.offsets.forget(revoked[:])
                    revoked.clear()
                for msg in messages:
                    self._spawn(self._dispatch(msg))
                await asyncio.sleep(0)  # let the new tasks send what they send before the producer is polled
                self.producer.poll(0)  # delivery reports: completions acknowledged by Kafka
                self._commit_done()
                self._backpressure()
            await self._drain()
        finally:
            await loop.run_in_executor(None, self.producer.flush, 10)
            self.producer.poll(0)
            self._commit_done(asynchronous=False)
            consumer.close()
            self.replies.close()

    def _check_security(self, mine: dict[str, str]) -> None:
        log.info("worker %s: Kafka %s, %s", self.worker.identity, self.bootstrap, describe_security(mine))
        theirs = self.server_security.get("security.protocol", "PLAINTEXT")
        if theirs.upper() != mine.get("security.protocol", "PLAINTEXT").upper():
            log.warning("the server reaches Kafka with security.protocol=%s but this worker with %s: set "
                        "OSTINATO_KAFKA_CONFIG, OSTINATO_KAFKA_* or Worker(kafka_config=...) (docs/security.md)",
                        theirs, mine.get("security.protocol", "PLAINTEXT"))

    def _kinds(self) -> list[TaskKind]:
        """The task topics this worker reads: workflow tasks if it has workflows, activity tasks if activities."""
        return ([TaskKind.WORKFLOW] if self.worker.workflow_handler is not None else []) + \
               ([TaskKind.ACTIVITY] if self.worker.activity_executor is not None else [])

    async def _ensure_task_topics(self, replication_factor: int, stopping: asyncio.Event) -> bool:
        """Task topics are created on first use, by the processor or by the first worker, whichever comes first. A
        worker that may not create them waits until one of its topics exists (the processor creates both of a queue
        together); False if it was stopped meanwhile."""
        loop = asyncio.get_running_loop()
        task_topics = TaskTopics(self.bootstrap, self.prefix, replication_factor, self.worker.kafka_config)
        wanted = [task_topic_name(self.prefix, self.worker.routed_queue, kind) for kind in self._kinds()]
        waiting = False
        while not stopping.is_set():
            missing = []
            for name in wanted:
                try:
                    await loop.run_in_executor(None, task_topics.partitions, name)
                except TopicCreationForbidden:
                    missing.append(name)
            if len(missing) < len(wanted):
                if missing:  # a queue half made by an older version: subscribed anyway, read once it exists
                    log.warning("worker %s: %s does not exist and this worker may not create it; it is read once "
                                "the server creates it", self.worker.identity, ", ".join(missing))
                return True
            if not waiting:
                log.warning("worker %s: the task topics of queue %r do not exist yet and this worker may not create "
                            "them; waiting until the server does (when a workflow first names the queue)",
                            self.worker.identity, self.worker.routed_queue)
                waiting = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), TOPICS_WAIT_S)
        return False

    def _fetch(self) -> list[Message]:
        """Wait for the first task only, then take what else is ready: `consume(n, t)` would hold every batch
        for its whole timeout unless n tasks arrived, adding that wait to each hop of every workflow."""
        first = self.consumer.poll(POLL_S)
        if first is None:
            return []
        return [first, *self.consumer.consume(FETCH_MAX - 1, 0)]

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a task failed in the worker", exc_info=task.exception())

    # -- tasks ----------------------------------------------------------------------------------------------------

    async def _dispatch(self, msg: Message) -> None:
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("consuming %s: %s", msg.topic(), err.str())
            return
        where = (msg.topic() or "", int(msg.partition() or 0), int(msg.offset() or 0))
        self.offsets.begin(*where)
        try:
            name, task = codec.decode(msg.value() or b"")
        except codec.DecodeError as exc:
            log.error("skipping an unreadable task at %s[%d]@%d: %s", *where, exc)
            self.offsets.done(*where)
            return
        try:
            if name == wire.WORKFLOW_TASK:
                if await self._workflow_task(task, lambda: self.offsets.done(*where)):
                    return  # done when Kafka acknowledges the completion
            elif name == wire.QUERY_TASK:
                await self._query(task)
            elif name == wire.ACTIVITY_TASK:
                await self._activity_task(task)
            else:
                log.error("skipping a %s on %s", name, msg.topic())
        except NotTaken:
            return  # never started: not done, so the offset stays before it and the next owner reads it again
        except Exception:
            log.exception("handling the task at %s[%d]@%d failed; the engine's timeout will retry it", *where)
        self.offsets.done(*where)

    def _commit_done(self, asynchronous: bool = True) -> None:
        now = time.monotonic()
        if asynchronous and now - self._committed_at < COMMIT_INTERVAL_S:
            return
        self._committed_at = now
        offsets = self.offsets.committable()
        if not offsets:
            return
        try:
            if asynchronous:
                self.consumer.commit(offsets=offsets, asynchronous=True)
            else:
                self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:  # e.g. a partition revoked meanwhile: its next owner re-reads from before
            log.warning("commit of %d offsets failed: %s", len(offsets), exc)

    async def _history_through(self, task: Record, last_event_id: int) -> list[Record]:
        """The run's history, read again (briefly) while it ends before `last_event_id`: the owner writes its store
        just after the transaction that dispatched the task commits, so a fast worker can be a moment ahead."""
        for attempt in range(HISTORY_TRIES):
            history = await self.fetch_history(task)
            if (history[-1]["event_id"] if history else 0) >= last_event_id:
                return history
            await asyncio.sleep(0.02 * 2**attempt)
        raise HistoryBehind(f"the history of {task['workflow_id']}/{task['run_id']} does not reach event "
                            f"{last_event_id} yet")

    async def _workflow_task(self, task: Record, acknowledged: Callable[[], None]) -> bool:
        """Decide the task and answer it; True when the offset waits for Kafka's acknowledgement of the
        completion (then `acknowledged` runs on delivery), False when the task is done on return."""
        handler = self.worker.workflow_handler
        assert handler is not None
        taken_ms = time.time_ns() // 1_000_000  # the task's start, as history will record it
        history: list[Record] = []
        cached = handler.cache.get(task["run_id"])
        sticky = cached is not None and cached.last_started_event_id == task["previous_started_event_id"]
        # A cache miss replays the full history; a task whose events did not fit its record has them read from it.
        if task.get("events_omitted") or (not sticky and task["previous_started_event_id"] > 0):
            try:
                history = await self._history_through(task, history_needed_through(task))
            except (RPCError, HistoryBehind) as exc:
                # The server is away (restarting): leave the task unanswered; its timeout schedules it again.
                log.warning("cannot fetch the history of %s/%s (%s); the task will be retried", task["workflow_id"],
                            task["run_id"], exc)
                return False
        try:
            command, body = await handler.handle(task, lambda: history, taken_ms)
        except HistoryBehind as exc:
            log.warning("%s; the task will be retried", exc)
            return False
        eager = self._ask_eager(command, body)
        if eager:
            await self._complete_eagerly(task, command, body, eager)
            return False  # done: the reply came (or the wait ended), so the offset may move on

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:  # the engine's task timeout retries it; the offset may move on
                log.warning("completion of %s/%s not delivered: %s", task["workflow_id"], task["run_id"], err.str())
            acknowledged()

        self._send(task, command, body, on_delivery=delivered)
        return True

    def _ask_eager(self, command: str, body: Record) -> int:
        """Eager activity dispatch: mark up to EAGER_MAX of the completion's new activities on this worker's own
        queue for this worker to run (while it has free slots); how many were marked. The engine starts them for
        this worker and hands their tasks back in its reply, skipping the activity topic and the
        RecordActivityTaskStarted round trip."""
        if command != wire.command_type("RespondWorkflowTaskCompleted") or self.worker.activity_executor is None \
                or not self.eager_activities:
            return 0
        free = self.worker.max_concurrent_activities - len(self.running) - self.starting
        if self.rate is not None:  # eager starts count against this worker's rate too
            free = min(free, self.rate.available(time.monotonic()))
        marked = size = 0
        commands = []
        for name, attrs in body["commands"]:
            inputs = sum(len(p["data"]) for p in attrs.get("input", ())) if isinstance(attrs, dict) else 0
            if (name == wire.command_type("ScheduleActivityTaskCommand") and marked < min(free, EAGER_MAX)
                    and attrs.get("task_queue") in ("", self.worker.task_queue)
                    and size + inputs <= EAGER_MAX_INPUT_BYTES):  # the reply must fit one record
                attrs = {**attrs, "request_eager_execution": True}
                marked += 1
                size += inputs
            commands.append((name, attrs))
        body["commands"] = commands
        if marked and self.rate is not None:
            self.rate.take(time.monotonic(), marked)
        return marked

    async def _complete_eagerly(self, task: Record, command: str, body: Record, slots: int) -> None:
        """Send the completion and wait for its reply; run the activities it hands back, started for us."""
        self.starting += slots  # the slots are ours until the reply says what to run
        asked = time.monotonic()
        try:
            reply = await self.request(task, command, body)
        finally:
            self.starting -= slots
            self.slot_freed.set()
        if reply is None or reply["body"][0] != wire.ACCEPTED:
            return  # no answer (the activities' timeouts retry them) or the completion was refused
        if reply.get("activity_tasks") and os.environ.get("OSTINATO_FAULT_POINT") == WORKER_EAGER_FAULT:
            os.kill(os.getpid(), signal.SIGKILL)  # test-only: die holding started activities (tests/chaos)
        waited = time.monotonic() - asked
        for activity in reply.get("activity_tasks") or []:
            if too_late(activity, waited):
                continue
            self.eager_started += 1
            job = asyncio.ensure_future(self._run_activity(activity))
            self.running.add(job)
            job.add_done_callback(self._activity_done)

    async def _query(self, task: Record) -> None:
        handler = self.worker.workflow_handler
        assert handler is not None
        try:
            history = [] if task["run_id"] in handler.cache else await self.fetch_history(task)
        except RPCError as exc:
            log.warning("cannot answer query %s: %s", task["query_type"], exc)
            return
        result, failure = handler.query(task, lambda: history)
        reply = wire.reply(task["request_id"], task["namespace"], task["workflow_id"],
                           (wire.QUERY_RESULT, {"result": result, "failure": failure}))
        self.producer.produce(self.replies_topic, codec.encode(wire.REPLY, reply),
                              task["request_id"].encode(), partition=task["reply_partition"])
        self.producer.poll(0)

    async def _activity_task(self, task: Record) -> None:
        """Returns once the engine knows the attempt started (from then its timeouts protect it) or refused it. A
        fetched batch holds more tasks than free slots: the others wait here, not started, for a slot."""
        while len(self.running) + self.starting >= self.worker.max_concurrent_activities:
            self.slot_freed.clear()
            await self.slot_freed.wait()
        self.starting += 1
        try:
            await self._rate_token()
            asked = time.monotonic()
            started = await self.request(task, "RecordActivityTaskStarted", {
                "scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"]})
        finally:
            self.starting -= 1
            self.slot_freed.set()
        if started is None or started["body"][0] != wire.ACCEPTED:
            return  # stale (timed out, cancelled, or already started elsewhere)
        if too_late(task, time.monotonic() - asked):
            return
        job = asyncio.ensure_future(self._run_activity(task))
        self.running.add(job)
        job.add_done_callback(self._activity_done)

    async def _rate_token(self) -> None:
        """Wait for this worker's rate (`max_activities_per_second`) to allow one more start.

        Raises:
            NotTaken: the worker is shutting down; the task was not started.
        """
        while self.rate is not None and not self.rate.take(time.monotonic()):
            if self.stopping.is_set():
                raise NotTaken
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.rate.wait(time.monotonic()))

    def _activity_done(self, job: asyncio.Task[None]) -> None:
        self.running.discard(job)
        self.slot_freed.set()

    async def _run_activity(self, task: Record) -> None:
        executor = self.worker.activity_executor
        assert executor is not None

        timeout_ms = task.get("heartbeat_timeout_ms") or 0
        answer_wait = min(HEARTBEAT_ANSWER_WAIT_S, timeout_ms / 4000) if timeout_ms else HEARTBEAT_ANSWER_WAIT_S

        async def heartbeat(task: Record, details: list[Record]) -> bool:
            reply = await self.request(task, "RecordActivityTaskHeartbeat", {
                "scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"], "details": details},
                timeout=answer_wait, quiet=True)
            if reply is None:
                return False  # no answer in time: keep going, the next heartbeat asks again
            return reply["body"][0] != wire.ACCEPTED or bool(reply["body"][1]["cancel_requested"])

        answer = await executor.execute(task, heartbeat)
        if answer is None:
            return  # completed asynchronously: whoever holds the task token answers
        name, body = answer
        handler = self.worker.workflow_handler
        if not self.eager_activities or handler is None or task["run_id"] not in handler.cache:
            self._send(task, name, body)
            return
        # Eager workflow task: this worker caches the workflow, so the task this answer causes comes back in the
        # reply rather than through the workflow task topic (its timeout covers a reply that never comes).
        reply = await self.request(task, name, {**body, "request_eager_workflow_task": True,
                                                "build_id": self.worker.routed_build})
        next_task = reply.get("workflow_task") if reply is not None else None
        if next_task is not None:
            self.eager_workflow_tasks += 1
            self._spawn(self._eager_workflow_task(next_task))

    async def _eager_workflow_task(self, task: Record) -> None:
        """A workflow task that came in a reply: no offset to commit; a lost answer is covered by its timeout."""
        try:
            await self._workflow_task(task, lambda: None)
        except Exception:
            log.exception("handling the eager workflow task of %s/%s failed; its timeout will retry it",
                          task["workflow_id"], task["run_id"])

    # -- talking to the engine ------------------------------------------------------------------------------------

    def _send(self, task: Record, name: str, body: Record, reply_partition: int | None = None,
              request_id: str | None = None, on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
              ) -> None:
        command = wire.command(task["namespace"], task["workflow_id"], (name, body), run_id=task["run_id"],
                               request_id=request_id or self._request_id(), identity=self.worker.identity,
                               time_ms=time.time_ns() // 1_000_000, reply_partition=reply_partition)
        key = workflow_key(task["namespace"], task["workflow_id"])
        extra: dict[str, Any] = {} if on_delivery is None else {"on_delivery": on_delivery}
        while True:
            try:
                self.producer.produce(self.commands_topic, codec.encode(wire.COMMAND, command),
                                      key.encode(), partition=partition_for(key, self.shards), **extra)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def _request_id(self) -> str:
        return f"{self._request_prefix}{next(self._requests):016x}"

    async def request(self, task: Record, name: str, body: Record, *, timeout: float = REPLY_TIMEOUT_S,
                      quiet: bool = False) -> Record | None:
        """Send a command (produced before the first await, so in order with what follows) and wait for the
        engine's reply: None if none comes within `timeout` (logged unless `quiet`)."""
        request_id = self._request_id()
        future = self.replies.expect(request_id)  # before producing: the reply may be back before produce returns
        try:
            self._send(task, name, body, self.reply_partition, request_id)
            answer = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            (log.debug if quiet else log.warning)("no reply to %s for %s/%s in %.1fs", name, task["workflow_id"],
                                                  task["run_id"], timeout)
            return None
        finally:
            self.replies.forget(request_id, future)
        try:
            _, reply = codec.decode(answer)
        except codec.DecodeError as exc:
            log.warning("unreadable reply for %s: %s", request_id, exc)
            return None
        return reply

    def _backpressure(self) -> None:
        full = len(self.running) + self.starting >= self.worker.max_concurrent_activities
        if full == self.paused:
            return
        parts = [tp for tp in self.consumer.assignment() if tp.topic == self.activity_topic]
        if full:
            self.consumer.pause(parts)
        else:
            self.consumer.resume(parts)
        self.paused = full

    async def _drain(self) -> None:
        """Finish the tasks being handled, then stop running activities as Temporal does on shutdown: each answers
        a retryable WorkerShutdown failure, so the engine retries it on another worker at once instead of after
        its start-to-close timeout."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=REPLY_TIMEOUT_S)
        grace = self.worker.graceful_shutdown_timeout.total_seconds()
        if self.running and grace > 0:  # they may finish first (Worker(graceful_shutdown_timeout=...))
            await asyncio.wait(set(self.running), timeout=grace)
        if self.running:
            log.info("worker %s: stopping %d running activities", self.worker.identity, len(self.running))
            if self.worker.activity_executor is not None:
                self.worker.activity_executor.cancel_all()
            await asyncio.gather(*self.running, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, self.producer.flush, 10)


def too_late(task: Record, waited_s: float) -> bool:
    """Whether an attempt handed over `waited_s` after we asked for it must not run (see `LATE_FRACTION`)."""
    limits = [ms for ms in (task.get("heartbeat_timeout_ms"), task.get("start_to_close_timeout_ms")) if ms]
    if not limits or waited_s * 1000 <= LATE_FRACTION * min(limits):
        return False
    log.warning("activity %s attempt %d of %s/%s was handed over %.1fs after we asked (answers held back?): not "
                "run, so it cannot run twice; the engine's timeout retries it", task["activity_type"], task["attempt"],
                task["workflow_id"], task["run_id"], waited_s)
    return True
