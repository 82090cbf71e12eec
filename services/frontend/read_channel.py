"""Owner reads relayed to a processor process over one WebSocket per process, not one HTTP request each.

A server with processors in processes of their own relays every owner read to the process that owns the shard
(`services/frontend/relay.py`). Most of those reads are held: S4 holds 3,000 result long-polls at once. Relayed
as HTTP requests, each held read needed a connection of its own (HTTP/1.1 cannot interleave answers), and the
process's event loop spent more of its interpreter on accepting connections, parsing requests and writing
responses than on the reads themselves, under the lock its processor thread needs to fire timers on time
(docs/benchmarks.md, "One channel for relayed reads"). Here the server multiplexes every read over one
connection: a read is an entry of a message in, its answer an entry of a message out, and a cancel goes in when
the server gives up on a read.

The process answers a read with the same handler its HTTP route has (looked up by the route's path template), so
a read answers the same over either path; the handler sees only the parts of a request every owner read uses
(`RelayedRequest`). Each end gathers what it has to send in one turn of its event loop into one message: a commit
that closes fifty runs answers their fifty result reads with one write and one wake-up of the server, not fifty.
Messages:
- reads, server -> process (text): a JSON list of `{"id": n, "route": "/api/v1/.../{workflow_id}/history",
  "match": {...}, "query": [[name, value], ...], "path": raw path}`, and of `{"id": n, "cancel": true}` for a
  read the server gave up on.
- answers, process -> server (binary): answers one after another, each `>QHHI` (id, status, the lengths of its
  headers and of its body), then a JSON object of headers (`Content-Type`, `Location`, `Retry-After`), then the
  body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar, cast

import aiohttp
from aiohttp import web
from multidict import MultiDict, MultiDictProxy

from ostinato.services.frontend.http import RETRY_AFTER_S, error

PATH = "/internal/owner-reads"
PASSED_BACK = ("Content-Type", "Location", "Retry-After")
_ANSWER = struct.Struct(">QHHI")
log = logging.getLogger("ostinato.read_channel")
T = TypeVar("T")


class RelayedRequest:
    """What an owner-read handler reads of its request (the app, the path's parts, the query and the raw path),
    rebuilt in the process from a read frame. Owner reads take nothing else from a request: no body, no headers
    (authentication happened in the server)."""

    def __init__(self, app: web.Application, match_info: Mapping[str, str], query: list[list[str]],
                 raw_path: str) -> None:
        self.app = app
        self.match_info = dict(match_info)
        self.query = MultiDictProxy(MultiDict((name, value) for name, value in query))
        self.raw_path = raw_path


def read_of(request: web.Request, read_id: int) -> dict[str, Any]:
    """A request this server relays, as an entry of a reads message."""
    resource = request.match_info.route.resource
    return {"id": read_id, "route": resource.canonical if resource is not None else "",
            "match": dict(request.match_info), "query": list(request.query.items()), "path": request.raw_path}


def answer_of(read_id: int, response: web.Response) -> bytes:
    """`response` as an entry of an answers message."""
    headers = json.dumps({name: response.headers[name] for name in PASSED_BACK if name in response.headers},
                         separators=(",", ":")).encode()
    body = response.body if isinstance(response.body, bytes) else b""
    return _ANSWER.pack(read_id, response.status, len(headers), len(body)) + headers + body


def answers_in(message: bytes) -> Iterator[tuple[int, web.Response]]:
    """The answers of an answers message, with the responses to give the clients."""
    view = memoryview(message)
    at = 0
    while at < len(view):
        read_id, status, headers_size, body_size = _ANSWER.unpack_from(view, at)
        at += _ANSWER.size
        headers = json.loads(view[at:at + headers_size].tobytes())
        at += headers_size
        yield read_id, web.Response(status=status, body=view[at:at + body_size].tobytes(), headers=headers)
        at += body_size


class Batcher(Generic[T]):
    """Items sent during one turn of the event loop, handed to `send` together at the end of that turn (a
    commit's wake-ups, or a burst of starts' result reads, come in one turn)."""

    def __init__(self, send: Callable[[list[T]], Awaitable[None]]) -> None:
        self._send = send
        self._items: list[T] = []
        self._sending: set[asyncio.Task[None]] = set()

    def add(self, item: T) -> None:
        if not self._items:
            asyncio.get_running_loop().call_soon(self._flush)
        self._items.append(item)

    def _flush(self) -> None:
        items, self._items = self._items, []
        task = asyncio.ensure_future(self._send(items))
        self._sending.add(task)  # held until done: the loop keeps only weak references to tasks
        task.add_done_callback(self._sending.discard)


Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(request: web.Request) -> web.WebSocketResponse:
    """The process's end: answer each read frame with the handler of its route, concurrently (a held read does
    not hold the others up), and drop a read the server cancelled."""
    ws = web.WebSocketResponse(max_msg_size=0)
    await ws.prepare(request)
    routes: dict[str, Route] = {route.resource.canonical: route.handler for route in request.app.router.routes()
                                if route.method == "GET" and route.resource is not None
                                and route.resource.canonical != PATH}
    held: dict[int, asyncio.Task[None]] = {}

    async def send(answers: list[bytes]) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):  # the server went away: nobody to answer
            await ws.send_bytes(b"".join(answers))

    outbox = Batcher(send)
    try:
        async for message in ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            for frame in json.loads(message.data):
                read_id = int(frame["id"])
                if frame.get("cancel"):
                    task = held.pop(read_id, None)
                    if task is not None:
                        task.cancel()
                    continue
                task = asyncio.create_task(_answer(outbox, request.app, routes, read_id, frame))
                held[read_id] = task
                task.add_done_callback(lambda _, read_id=read_id: held.pop(read_id, None))  # type: ignore[misc]
    finally:
        for task in list(held.values()):
            task.cancel()
    return ws


async def _answer(outbox: Batcher[bytes], app: web.Application, routes: Mapping[str, Route], read_id: int,
                  frame: dict[str, Any]) -> None:
    handler = routes.get(frame["route"])
    if handler is None:
        response: web.StreamResponse = error(404, "not_found", f"no owner read at {frame['route']!r} here")
    else:
        relayed = RelayedRequest(app, frame["match"], frame["query"], frame["path"])
        try:
            response = await handler(cast(web.Request, relayed))
        except web.HTTPException as exc:  # a redirect to the shard's new owner
            response = exc
        except Exception:
            log.exception("the owner read %s failed", frame["path"])
            response = error(500, "internal", "the owner read failed; see the server's log")
    if isinstance(response, web.Response):
        outbox.add(answer_of(read_id, response))
    else:
        log.error("the owner read %s answered a stream; owner reads answer whole responses", frame["path"])
        outbox.add(answer_of(read_id, error(500, "internal", "the owner read failed; see the server's log")))


class ReadChannel:
    """The server's end, to one process: one WebSocket, (re)opened on first use, and the reads waiting on it."""

    def __init__(self, session: Callable[[], aiohttp.ClientSession], timeout_s: float) -> None:
        self._session = session
        self._timeout_s = timeout_s
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._opening = asyncio.Lock()
        self._waiting: dict[int, asyncio.Future[web.Response]] = {}
        self._next_id = 0
        self._outbox: Batcher[dict[str, Any]] = Batcher(self._send)

    async def read(self, request: web.Request) -> web.Response:
        """The process's answer to `request`; a 503 with `Retry-After` when the process does not answer (it may be
        restarting: the next read opens the channel again)."""
        try:
            waiting = await self._open()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return _unavailable(exc)
        self._next_id += 1
        read_id = self._next_id
        answer: asyncio.Future[web.Response] = asyncio.get_running_loop().create_future()
        waiting[read_id] = answer
        self._outbox.add(read_of(request, read_id))
        try:
            return await asyncio.wait_for(answer, self._timeout_s)
        except (aiohttp.ClientError, ConnectionError, RuntimeError, TimeoutError) as exc:
            return _unavailable(exc)
        finally:
            if waiting.pop(read_id, None) is not None:
                # Not answered (the wait timed out, or the request was cancelled): the process can let go of it.
                self._outbox.add({"id": read_id, "cancel": True})

    async def _open(self) -> dict[int, asyncio.Future[web.Response]]:
        """The reads waiting on the open channel (opened now if it is not): each connection has its own, so a
        connection that closes fails only the reads sent on it."""
        if self._ws is None or self._ws.closed:
            async with self._opening:
                if self._ws is None or self._ws.closed:
                    self._ws = await self._session().ws_connect(f"http://processor{PATH}", max_msg_size=0,
                                                               timeout=aiohttp.ClientWSTimeout(ws_close=5.0))
                    self._waiting = {}
                    self._reader = asyncio.create_task(self._read_answers(self._ws, self._waiting))
        return self._waiting

    async def _send(self, reads: list[dict[str, Any]]) -> None:
        ws, waiting = self._ws, self._waiting
        try:
            if ws is None:
                raise ConnectionError("the owner-read channel is not open")
            await ws.send_str(json.dumps(reads))
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
            for read in reads:  # the channel closed under them: these reads will not be answered
                answer = waiting.pop(read["id"], None)
                if answer is not None and not answer.done():
                    answer.set_exception(exc)

    async def _read_answers(self, ws: aiohttp.ClientWebSocketResponse,
                            waiting: dict[int, asyncio.Future[web.Response]]) -> None:
        try:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.BINARY:
                    continue
                for read_id, response in answers_in(message.data):
                    answer = waiting.pop(read_id, None)
                    if answer is not None and not answer.done():
                        answer.set_result(response)
        finally:
            # The process closed the channel (it stopped, or died): every read still waiting on it gets the 503.
            gone = ConnectionError("the processor process closed its owner-read channel")
            for answer in waiting.values():
                if not answer.done():
                    answer.set_exception(gone)
            waiting.clear()

    async def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


def _unavailable(exc: BaseException) -> web.Response:
    return error(503, "shard_unavailable", f"the processor that owns this workflow's shard did not answer "
                 f"({type(exc).__name__}); it may be restarting, retry in {RETRY_AFTER_S}s")
