"""The synchronous command path (DESIGN.md §10, "Synchronous API answers"): `POST /api/v1/commands`.

```
  caller ──POST Command──► gateway ──produce (idempotent, partition = shard)──► <prefix>.commands
     ▲                        │ waits on request_id                                  │ owning processor
     └──200 Reply─────────────┴◄── replies reader thread ◄── <prefix>.replies[p] ◄────┘ (same transaction)
```

The body is one single-object-encoded `ostinato.command.Command`. The gateway keeps the caller's `request_id` (the
idempotency key; one is made up when empty), sets `reply_partition` to a partition of `<prefix>.replies` this
process reads, produces the command to its shard and answers with the `ostinato.reply.Reply` bytes as the
processor (or, for a query, a worker) wrote them. Several processes may read the same reply partition: each
completes only the requests it waits for. The reader starts at the partition's end, resolved before the first
request is accepted, so no answer to a request of this process can be missed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import uuid
from typing import Any

from aiohttp import web
from confluent_kafka import KafkaError, KafkaException, Message

from ostinato.kafka.clients import idempotent_producer
from ostinato.kafka.replies import ReplyReader, settle
from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.cluster import ClusterSettings
from ostinato.schemas.keys import workflow_key
from ostinato.schemas.topics import MAX_RECORD_BYTES, Topic, topic_name
from ostinato.services.frontend.http import error
from ostinato.services.frontend.namespaces_api import NAMESPACES

log = logging.getLogger("ostinato.gateway")

CONTENT_TYPE = "application/vnd.ostinato.command+avro"
DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 600_000
POLL_S = 0.1
# Engine-internal commands: only processors (timers, cross-shard notifications) and the archiver produce them,
# straight to Kafka. Accepting them here would let any HTTP caller fire a timer or forge a child's result.
INTERNAL_COMMANDS = frozenset(wire.command_type(n) for n in (
    "FireTimer", "ChildWorkflowExecutionStartedNotification", "StartChildWorkflowExecutionFailedNotification",
    "ChildWorkflowExecutionClosedNotification", "ExternalRequestResultNotification", "ArchivalCompleted"))
_ACCEPTED_TYPES = frozenset({CONTENT_TYPE, "application/octet-stream", ""})


class GatewayError(RuntimeError):
    """The command could not be handed to Kafka (delivery failed, or the gateway is stopping)."""


def internal_origin(body: tuple[str, dict[str, Any]]) -> str | None:
    """Why a command body is one only the engine may send, or None. Besides the internal commands: a start that
    names a parent (a child start, which answers the parent by notification, not by reply) and a signal or cancel
    from another workflow (`external`: the target would notify that workflow of a request it never made)."""
    name, record = body
    if name in INTERNAL_COMMANDS:
        return f"{wire.short_name(name)} is engine-internal"
    signal_with_start = wire.command_type("SignalWithStartWorkflowExecution")
    start = record.get("start") if name == signal_with_start else record
    if name in (wire.command_type("StartWorkflowExecution"), signal_with_start) and start.get("parent"):
        return "a start with `parent` is a child start, made only by the parent's shard"
    if record.get("external") is not None:
        return "`external` marks a request from another workflow, made only by that workflow's shard"
    return None


class CommandGateway:
    """One idempotent producer and one replies reader per process; `install(app)` adds the route and ties the
    gateway's life to the app's (started before the server listens, stopped when it shuts down)."""

    def __init__(self, bootstrap: str, settings: ClusterSettings, *, reply_partitions: int = 1) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self.commands_topic = topic_name(settings.topic_prefix, Topic.COMMANDS)
        self.replies_topic = topic_name(settings.topic_prefix, Topic.REPLIES)
        count = max(1, min(reply_partitions, settings.reply_partitions))
        self.partitions = sorted(random.sample(range(settings.reply_partitions), count))
        self._stop = threading.Event()
        self._deliveries: threading.Thread | None = None
        self.producer: Any = None
        self.replies: Any = None

    # -- life cycle -------------------------------------------------------------------------------------------

    def install(self, app: web.Application) -> None:
        app.router.add_post("/api/v1/commands", self.post_command)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)

    async def _on_startup(self, app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.start)

    async def _on_cleanup(self, app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.stop)

    def start(self) -> None:
        """Open the producer and the replies reader, positioned at the end of its partitions (blocking)."""
        client_id = f"{self.settings.topic_prefix}-gateway-{uuid.uuid4().hex[:8]}"  # within the server's ACLs
        self.producer = idempotent_producer(self.bootstrap, client_id)
        self.replies = ReplyReader(self.bootstrap, self.replies_topic, self.partitions, client_id)
        self.replies.start()
        self._deliveries = threading.Thread(target=self._serve_deliveries, name="ostinato-gateway-deliveries",
                                            daemon=True)
        self._deliveries.start()
        log.info("command gateway: producing to %s, answers on %s partitions %s", self.commands_topic,
                 self.replies_topic, self.partitions)

    def stop(self) -> None:
        self._stop.set()
        if self._deliveries is not None:
            self._deliveries.join(10)
        if self.replies is not None:
            self.replies.fail_all(GatewayError("the server is shutting down"))
            self.replies.close()
        if self.producer is not None:
            self.producer.flush(5)

    def _serve_deliveries(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(POLL_S)

    # -- the request ------------------------------------------------------------------------------------------

    async def post(self, command: dict[str, Any], timeout_s: float) -> None:
        """Produce `command` without waiting for the engine's answer (fire and forget: bulk starts); returns once
        Kafka has it, so it will be processed."""
        command["reply_partition"] = None
        data = codec.encode(wire.COMMAND, command)
        key = workflow_key(command["namespace"], command["workflow_id"])
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            error = None if err is None else GatewayError(f"producing to {self.commands_topic}: {err.str()}")
            settle(future, b"" if err is None else None, error)

        try:
            self.producer.produce(self.commands_topic, data, key.encode(),
                                  partition=partition_for(key, self.settings.shards), on_delivery=delivered)
        except BufferError:
            raise GatewayError("the producer's queue is full; retry shortly") from None
        await asyncio.wait_for(future, timeout_s)

    async def send(self, command: dict[str, Any], timeout_s: float) -> bytes:
        """Produce `command` (its request id set, its reply partition overwritten) and return the Reply bytes.

        Raises:
            asyncio.TimeoutError: no answer within `timeout_s`.
            GatewayError: the command could not be produced.
        """
        request_id = command["request_id"]
        command["reply_partition"] = random.choice(self.partitions)
        data = codec.encode(wire.COMMAND, command)
        key = workflow_key(command["namespace"], command["workflow_id"])
        future = self.replies.expect(request_id)  # before producing: the answer may come back before `produce` returns

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                settle(future, None, GatewayError(f"producing to {self.commands_topic}: {err.str()}"))

        try:
            self.producer.produce(self.commands_topic, data, key.encode(),
                                  partition=partition_for(key, self.settings.shards), on_delivery=delivered)
            return await asyncio.wait_for(future, timeout_s)
        except BufferError:
            raise GatewayError("the producer's queue is full; retry shortly") from None
        except KafkaException as exc:
            raise GatewayError(f"producing to {self.commands_topic}: {exc}") from None
        finally:
            self.replies.forget(request_id, future)

    async def post_command(self, request: web.Request) -> web.Response:
        kind = request.content_type if request.headers.get("Content-Type") else ""
        if kind not in _ACCEPTED_TYPES:
            return error(415, "unsupported_media_type",
                         f"send a single-object-encoded {wire.COMMAND} as {CONTENT_TYPE}", content_type=kind)
        try:
            timeout_ms = int(request.query.get("timeout_ms", DEFAULT_TIMEOUT_MS))
        except ValueError:
            return error(400, "invalid_argument", "timeout_ms must be a whole number of milliseconds")
        if not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
            return error(400, "invalid_argument", f"timeout_ms must be in [1, {MAX_TIMEOUT_MS}]")
        data = await _read_body(request, MAX_RECORD_BYTES)
        if data is None:
            return error(413, "too_large", f"a command is at most {MAX_RECORD_BYTES} bytes")
        try:
            name, command = codec.decode(data)
        except codec.DecodeError as exc:
            return error(400, "malformed", f"the body is not a readable {wire.COMMAND}: {exc}")
        if name != wire.COMMAND:
            return error(400, "malformed", f"expected a {wire.COMMAND}, found {name}")
        spaces = request.app.get(NAMESPACES)
        if spaces is not None and not spaces.known(command["namespace"]):
            return error(404, "namespace_not_found", f"no namespace {command['namespace']!r}; register it first")
        refused = internal_origin(command["body"])
        if refused is not None:
            return error(403, "forbidden", f"{refused}: it cannot be sent through the API",
                         command=command["body"][0])
        command["request_id"] = command["request_id"] or uuid.uuid4().hex
        try:
            reply = await self.send(command, timeout_ms / 1000)
        except TimeoutError:
            return error(504, "timeout", f"no answer to {wire.short_name(command['body'][0])} within {timeout_ms} ms; "
                         "it may still be applied: retry with the same request_id", request_id=command["request_id"])
        except GatewayError as exc:
            return error(503, "unavailable", str(exc), request_id=command["request_id"])
        return web.Response(body=reply, content_type=CONTENT_TYPE)


async def _read_body(request: web.Request, limit: int) -> bytes | None:
    """The whole body, or None if it is longer than `limit` (read in chunks: aiohttp's own limit is 1 MiB)."""
    if (request.content_length or 0) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
