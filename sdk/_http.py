"""`HttpService`: the client's transport over a server's HTTP API (what `Client.connect` uses); its workers take
their tasks from the server's Kafka (`_kafka_worker`).

Commands go to `POST /api/v1/commands` as single-object Avro and come back as the `ostinato.reply.Reply` the
owning processor (or, for a query, a worker) wrote; describe and history come from the owner's read API with
`?format=avro`, so the SDK sees exactly the records the in-memory engine gives it. Answers and reads travel
different ways: a reply is visible when its transaction commits, the owner's store a moment later. So reads of a
workflow this service has just written to retry a "not found" for a few seconds (read your own writes).

Owner reads survive ownership changes. Redirects are followed by hand, so a failure names the host that failed.
When the owner a server redirects to does not answer (it died, and Kafka has not yet given its shards to another
server), when a server answers 503 (the shard is moving; its `Retry-After` is honoured), or when the server given
to `connect` does not answer, the read asks that server again with backoff; it redirects to the new owner once
there is one. A read gives up only after `unavailable_timeout` (60 s by default) without an answer. A command is
sent again only while the server refuses the connection (it never arrived), for as long; a command that may have
arrived (a reset, a timeout, a 503) is not, since it may have been applied: its request id makes a deliberate
retry safe.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode, urljoin, urlsplit

import aiohttp

from ostinato.schemas import codec, wire
from ostinato.sdk import _sessions
from ostinato.sdk import exceptions as exc
from ostinato.sdk._transport import CLOSING_EVENTS, Body, ClientTransport, WorkerTransport

__all__ = ["HttpService"]

Record = dict[str, Any]
CONTENT_TYPE = "application/vnd.ostinato.command+avro"
COMMAND_TIMEOUT = timedelta(seconds=30)
HISTORY_PAGE = 1000
POLL_FIRST_S = 0.02
POLL_MAX_S = 0.5
MAX_CONNECTIONS = 1000
LONG_POLL_MS = 10_000  # how long the owner may hold a caught-up history read (the read allows STALL_S more)
READ_YOUR_WRITES_S = 5.0  # how long a read of a workflow this service wrote to retries "not found"
# How long an owner read keeps retrying while no server can serve it: a dead owner's shards move after the
# processors' session timeout (10 s) and a restore; `result()` counts it from its last answer.
UNAVAILABLE_TIMEOUT = timedelta(seconds=60)
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
RETRY_AFTER_MAX_S = 10.0  # a server's Retry-After is honoured up to this
CONNECT_TIMEOUT_S = 5.0
STALL_S = 10.0  # a read that gets no byte for this long (beyond a long-poll's own wait) is retried: a frozen owner
MAX_REDIRECTS = 3  # the API needs one (to the owner); a second hop answers 503
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REMEMBERED = 10_000
SLACK_S = 5.0  # HTTP timeout beyond the server's own wait, so the server's 504 is what the caller sees
# What `GET /api/v1/cluster` must tell a client: where a Kafka worker finds its topics.
CLUSTER_FIELDS = {"kafka_bootstrap": str, "topic_prefix": str, "shards": int, "reply_partitions": int}


class HttpService(ClientTransport):
    """A server's HTTP API as a `ClientTransport`. Make it with `await HttpService.connect(target)`; `close()` it
    (or use `async with`) when done. One never closed is closed once garbage-collected or when its event loop shuts
    down (`_sessions`), quietly."""

    def __init__(self, target: str, session: aiohttp.ClientSession, cluster: Record, *,
                 command_timeout: timedelta = COMMAND_TIMEOUT,
                 unavailable_timeout: timedelta = UNAVAILABLE_TIMEOUT) -> None:
        self.target = target.rstrip("/")
        self.session = session
        self.cluster = cluster  # the server's `GET /api/v1/cluster` answer: kafka_bootstrap, topic_prefix, shards...
        self.command_timeout = command_timeout
        self.unavailable_timeout = unavailable_timeout
        self._written: OrderedDict[tuple[str, str], float] = OrderedDict()

    @classmethod
    async def connect(cls, target: str, *, timeout: timedelta = timedelta(seconds=10),
                      command_timeout: timedelta = COMMAND_TIMEOUT, api_key: str | None = None,
                      unavailable_timeout: timedelta = UNAVAILABLE_TIMEOUT) -> HttpService:
        """Check that an Ostinato server answers at `target` and learn its cluster settings. `api_key` is sent as a
        bearer token (servers started with --auth-config require one). Owner reads (describe, history, the result
        wait) retry for up to `unavailable_timeout` while no server can serve them (an owner died, a shard moves)."""
        if "://" not in target:  # Temporal's spelling, `Client.connect("localhost:7233")`: plain HTTP
            target = f"http://{target}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Result waits are long-polls, each holding a connection: allow many at once (aiohttp's default is 100).
        session = aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS))
        try:
            async with session.get(target.rstrip("/") + "/api/v1/cluster",
                                   timeout=aiohttp.ClientTimeout(total=timeout.total_seconds())) as resp:
                if resp.status != 200:
                    raise await _error(resp, f"GET {target}/api/v1/cluster")
                cluster = await resp.json()
            wrong = [k for k, kind in CLUSTER_FIELDS.items() if not isinstance(cluster.get(k), kind)]
            if wrong:
                raise ValueError(f"GET /api/v1/cluster lacks {', '.join(wrong)}: {cluster}")
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError, TypeError) as e:
            await session.close()
            raise exc.RPCError(f"no Ostinato server answers at {target}: {type(e).__name__}: {e}",
                               code="unavailable") from None
        except BaseException:
            await session.close()
            raise
        service = cls(target, session, cluster, command_timeout=command_timeout,
                      unavailable_timeout=unavailable_timeout)
        await _sessions.keep(service, session)  # closed for it if it never is, as Temporal code never closes clients
        return service

    async def close(self) -> None:
        await _sessions.close(self.session)

    async def __aenter__(self) -> HttpService:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- commands ---------------------------------------------------------------------------------------------

    async def send(self, namespace: str, workflow_id: str, run_id: str, body: Body, request_id: str,
                   identity: str) -> Body:
        command = wire.command(namespace, workflow_id, body, run_id=run_id, request_id=request_id, identity=identity,
                               time_ms=_now_ms())
        try:
            data = codec.encode(wire.COMMAND, command)
        except ValueError as e:  # as the engine does: an unreadable command is a MALFORMED rejection, not a crash
            return wire.rejected("MALFORMED", str(e))
        reply = await self._post(data, self.command_timeout, body[0])
        answer: Body = reply["body"]
        if answer[0] != wire.REJECTED:
            self._remember(namespace, workflow_id)
        return answer

    async def query(self, namespace: str, workflow_id: str, run_id: str, query_type: str, args: list[Record],
                    timeout: timedelta, *, header: Mapping[str, Record] | None = None) -> Body:
        body = (wire.command_type("QueryWorkflow"), {
            "query_type": query_type, "query_args": args, "header": dict(header or {}),
            "deadline_ms": _now_ms() + int(timeout.total_seconds() * 1000)})
        command = wire.command(namespace, workflow_id, body, run_id=run_id, request_id=uuid.uuid4().hex, identity="",
                               time_ms=_now_ms())
        try:
            reply = await self._post(codec.encode(wire.COMMAND, command), timeout, body[0])
        except exc.RPCError as e:
            if e.status != 504:
                raise
            raise exc.RPCError(f"query {query_type!r} of {workflow_id} got no answer in {timeout}: is a worker "
                               "running?", status=504, code=e.code) from None
        answer: Body = reply["body"]
        return answer

    async def _post(self, data: bytes, timeout: timedelta, what: str) -> Record:
        wait_ms = max(1, int(timeout.total_seconds() * 1000))
        url = f"{self.target}/api/v1/commands?timeout_ms={wait_ms}"
        name = what.rsplit(".", 1)[-1]
        deadline = self._deadline()
        pause = RETRY_FIRST_S
        while True:
            try:
                async with self.session.post(url, data=data, headers={"Content-Type": CONTENT_TYPE},
                                             timeout=aiohttp.ClientTimeout(total=wait_ms / 1000 + SLACK_S)) as resp:
                    if resp.status != 200:
                        raise await _error(resp, name)
                    payload = await resp.read()
                break
            except aiohttp.ClientConnectorError as e:
                # Refused or unreachable: the command never left this process, so sending it again cannot apply it
                # twice (a server restarting, say). Anything later (a reset, a timeout) may have been applied.
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise exc.RPCError(f"{name}: the server at {self.target} did not answer for "
                                       f"{self.unavailable_timeout.total_seconds():.0f}s: {type(e).__name__}: {e}",
                                       code="unavailable") from None
                await asyncio.sleep(min(remaining, pause))
                pause = min(RETRY_MAX_S, pause * 2)
            except (aiohttp.ClientError, TimeoutError) as e:
                raise exc.RPCError(f"{name}: the server at {self.target} did not answer: {type(e).__name__}: {e}",
                                   code="unavailable") from None
        try:
            name, reply = codec.decode(payload)
        except codec.DecodeError as e:
            raise exc.RPCError(f"unreadable answer from {self.target}: {e}", status=200, code="malformed") from None
        if name != wire.REPLY:
            raise exc.RPCError(f"expected a {wire.REPLY} from {self.target}, got {name}", status=200,
                               code="malformed")
        return reply

    # -- owner reads ------------------------------------------------------------------------------------------

    async def describe(self, namespace: str, workflow_id: str, run_id: str) -> Record | None:
        data = await self._read(namespace, workflow_id, "", {"run_id": run_id}, deadline=self._deadline())
        if data is None:
            return None
        name, record = _decode(data)
        if name != wire.MUTABLE_STATE:
            raise exc.RPCError(f"expected a {wire.MUTABLE_STATE} from {self.target}, got {name}", status=200,
                               code="malformed")
        return record

    async def history(self, namespace: str, workflow_id: str, run_id: str) -> list[Record]:
        events: list[Record] = []
        deadline = self._deadline()
        while True:
            page = await self._history_page(namespace, workflow_id, run_id, len(events) + 1, deadline=deadline)
            if page is None:
                return events
            run_id = page["run_id"]  # pinned: the current run may change while paging
            events.extend(page["events"])
            if not page["next_page_token"]:
                return events

    async def poll_update(self, namespace: str, workflow_id: str, run_id: str, update_id: str, wait_stage: str,
                          wait: timedelta) -> Record | None:
        wait_s = max(0.0, wait.total_seconds())
        data = await self._read(namespace, workflow_id, f"/updates/{quote(update_id, safe='')}", {
            "run_id": run_id, "wait_stage": wait_stage, "wait_ms": str(int(wait_s * 1000))},
            deadline=self._deadline(), wait_s=wait_s)
        if data is None:
            return None
        status: Record = json.loads(data)
        if status.get("outcome"):
            _, complete = codec.decode(base64.b64decode(status["outcome"]))
            status["outcome"] = {"failure": complete["failure"]} if complete["failure"] is not None else {
                "result": complete["result"]}
        return status

    async def wait_closed(self, namespace: str, workflow_id: str, run_id: str) -> Record:
        """Long-poll the owner for the run's closing event.

        The owner holds the read (`wait_ms`, `filter=close`) until its processor commits the run's close, so a
        result arrives within a commit of the close instead of after a polling interval, with one request per wait
        rather than one per step of the run. The first request already waits: a run that is closed (or missing)
        is answered at once anyway, and a first look without the wait cost every result one more request through
        the server and its processor: one of the three a hello's start and result made. Each page may retry for
        `unavailable_timeout` (an owner died, the shard moves), so the wait survives any ownership change."""
        last: Record | None = None
        first = 1
        wait_ms = LONG_POLL_MS
        while True:
            # Only the closing event, and a wait for the close itself rather than for each step of the run
            # (`filter=close`); a server that does not know the filter pages through history as before.
            page = await self._history_page(namespace, workflow_id, run_id, first, wait_ms=wait_ms,
                                            deadline=self._deadline(), close_only=True)
            if page is None:
                if run_id == "" or last is None:
                    raise exc.RPCError(f"no workflow {workflow_id!r}", status=404, code="not_found")
                raise exc.RPCError(f"run {run_id} of {workflow_id!r} disappeared (deleted after retention?)",
                                   status=404, code="not_found")
            run_id = page["run_id"]
            if page["events"]:
                last = page["events"][-1]
                first += len(page["events"])
                if page["next_page_token"]:
                    continue
            if last is not None and last["event_type"] in CLOSING_EVENTS:
                return last
            if not page["events"]:
                await asyncio.sleep(POLL_FIRST_S)  # the wait ran out (or an older server ignored it): no busy loop

    def _deadline(self) -> float:
        return time.monotonic() + self.unavailable_timeout.total_seconds()

    async def _history_page(self, namespace: str, workflow_id: str, run_id: str, first: int, *, deadline: float,
                            wait_ms: int = 0, close_only: bool = False) -> Record | None:
        data = await self._read(namespace, workflow_id, "/history", {
            "run_id": run_id, "page_size": str(HISTORY_PAGE), "next_page_token": str(first),
            "wait_ms": str(wait_ms) if wait_ms else "", "filter": "close" if close_only else ""},
            deadline=deadline, wait_s=wait_ms / 1000)
        if data is None:
            return None
        page = _json(data)
        page["events"] = [_decode(base64.b64decode(e))[1] for e in page["events"]]
        return page

    async def _read(self, namespace: str, workflow_id: str, suffix: str, params: dict[str, str], *,
                    deadline: float, wait_s: float = 0.0) -> bytes | None:
        """GET an owner read with `?format=avro`: the body, or None for "not found". While no server can serve it
        (see the module's docstring) it retries until `deadline` (`time.monotonic()`), then raises an RPCError
        naming the host that failed last."""
        query = urlencode({"format": "avro", **{k: v for k, v in params.items() if v}})
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}{suffix}"
        started = time.monotonic()
        pause = RETRY_FIRST_S
        while True:
            try:
                return await self._get(f"{path}?{query}", f"GET {path}", wait_s)
            except _Unavailable as why:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    last, spent = why.error, time.monotonic() - started
                    raise exc.RPCError(f"GET {path}: {why}; no server could serve the read for {spent:.0f}s",
                                       status=last.status if last else 0,
                                       code=last.code if last else "unavailable") from None
                await asyncio.sleep(min(remaining, max(pause, why.retry_after)))
                pause = min(RETRY_MAX_S, pause * 2)
            except exc.RPCError as error:
                waited = time.monotonic() - started
                if error.status != 404 or error.code != "not_found":
                    raise
                if waited >= READ_YOUR_WRITES_S or not self._recently_written(namespace, workflow_id):
                    return None
                await asyncio.sleep(pause)
                pause = min(POLL_MAX_S, pause * 2)

    async def _get(self, path_and_query: str, what: str, wait_s: float) -> bytes:
        """One attempt: GET from the server given to `connect`, following its redirects by hand so that a failure
        names the host that failed. The body of a 200; an RPCError for an answer no retry changes; `_Unavailable`
        for a 503 or a host that does not answer (refused, reset, silent for `STALL_S` beyond the wait)."""
        url = self.target + path_and_query  # a '/' inside an id travels as %2F (yarl keeps it so)
        by = ""  # the server that redirected to `url`
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=wait_s + STALL_S)
        for _ in range(MAX_REDIRECTS + 1):
            try:
                async with self.session.get(url, allow_redirects=False, timeout=timeout) as resp:
                    location = resp.headers.get("Location", "")
                    if resp.status in REDIRECTS and location:
                        by, url = _origin(url), urljoin(url, location)
                        continue
                    if resp.status == 200:
                        return await resp.read()
                    error = await _error(resp, what)
                    if resp.status == 503:
                        raise _Unavailable(f"{_who(url, by)} answered: {str(error).removeprefix(what + ': ')}",
                                           retry_after=_retry_after(resp), error=error)
                    raise error
            except (aiohttp.ClientError, TimeoutError) as e:
                raise _Unavailable(f"{_who(url, by)} did not answer ({type(e).__name__}: {e})") from None
        raise _Unavailable(f"more than {MAX_REDIRECTS} redirects from {self.target}, the last to {_origin(url)}")

    def _remember(self, namespace: str, workflow_id: str) -> None:
        key = (namespace, workflow_id)
        self._written[key] = time.monotonic()
        self._written.move_to_end(key)
        while len(self._written) > MAX_REMEMBERED:
            self._written.popitem(last=False)

    def _recently_written(self, namespace: str, workflow_id: str) -> bool:
        at = self._written.get((namespace, workflow_id))
        return at is not None and time.monotonic() - at < READ_YOUR_WRITES_S * 2

    # -- visibility -------------------------------------------------------------------------------------------

    async def list_page(self, namespace: str, query: str, page_size: int, token: str) -> tuple[list[Record], str]:
        """A page of the visibility store's runs matching `query`, and the next page's token ("" at the end)."""
        params = urlencode({k: v for k, v in {"query": query, "page_size": str(page_size),
                                              "next_page_token": token}.items() if v})
        body = await self._get_json(f"/api/v1/namespaces/{quote(namespace, safe='')}/workflows?{params}")
        return body["executions"], body["next_page_token"]

    async def count(self, namespace: str, query: str) -> int:
        params = urlencode({"query": query} if query else {})
        body = await self._get_json(f"/api/v1/namespaces/{quote(namespace, safe='')}/workflow-count?{params}")
        return int(body["count"])

    # -- search attributes ------------------------------------------------------------------------------------

    async def add_search_attributes(self, namespace: str, attributes: dict[str, str]) -> dict[str, str]:
        found = await self._json("POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/search-attributes",
                                 {"search_attributes": attributes})
        return dict(found["custom_attributes"])

    async def set_task_queue_rate_limit(self, namespace: str, task_queue: str, activities_per_second: float,
                                        set_by: str = "") -> None:
        path = (f"/api/v1/namespaces/{quote(namespace, safe='')}/task-queues/{quote(task_queue, safe='')}"
                "/rate-limit")
        await self._json("PUT", path, {"activities_per_second": activities_per_second, "set_by": set_by})

    async def list_search_attributes(self, namespace: str) -> dict[str, str]:
        found = await self._get_json(f"/api/v1/namespaces/{quote(namespace, safe='')}/search-attributes")
        return dict(found["custom_attributes"])

    async def versioning(self, namespace: str, task_queue: str, change: Record | None) -> Record:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/task-queues/{quote(task_queue, safe='')}/versioning"
        return await (self._get_json(path) if change is None else self._json("POST", path, change))

    async def _get_json(self, path: str) -> Record:
        return await self._json("GET", path)

    async def _json(self, method: str, path: str, body: Record | None = None) -> Record:
        """One JSON call of the settings APIs: 200 with an object, or the server's error as an RPCError."""
        try:
            async with self.session.request(method, self.target + path, json=body,
                                            timeout=aiohttp.ClientTimeout(total=30)) as resp:
                if resp.status != 200:
                    raise await _error(resp, f"{method} {path}")
                found: Record = await resp.json()
                return found
        except (aiohttp.ClientError, TimeoutError) as e:
            raise exc.RPCError(f"{method} {path}: the server at {self.target} did not answer: {type(e).__name__}: "
                               f"{e}", code="unavailable") from None

    # -- workers ----------------------------------------------------------------------------------------------

    def worker_transport(self) -> WorkerTransport:
        """Workers take their tasks from the server's Kafka (bootstrap, prefix and shards as the server told us) and
        read the histories they lack through this API."""
        from ostinato.sdk._kafka_worker import KafkaWorkerTransport  # confluent_kafka loads only where workers run

        return KafkaWorkerTransport(self.cluster, self.history)


class _Unavailable(Exception):
    """An attempt that a later one may answer: what failed (naming its host), the wait the server asked for, and
    the server's error when it answered one."""

    def __init__(self, why: str, *, retry_after: float = 0.0, error: exc.RPCError | None = None) -> None:
        super().__init__(why)
        self.retry_after = retry_after
        self.error = error


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _who(url: str, redirected_by: str) -> str:
    if not redirected_by:
        return f"the server at {_origin(url)}"
    return f"the shard's owner at {_origin(url)} (where {redirected_by} redirected the read)"


def _retry_after(resp: aiohttp.ClientResponse) -> float:
    """A 503's `Retry-After` in seconds (delta-seconds only; an HTTP date is ignored), capped."""
    try:
        return min(RETRY_AFTER_MAX_S, max(0.0, float(resp.headers.get("Retry-After", ""))))
    except ValueError:
        return 0.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _decode(data: bytes) -> tuple[str, Record]:
    try:
        return codec.decode(data)
    except codec.DecodeError as e:
        raise exc.RPCError(f"unreadable record from the server: {e}", status=200, code="malformed") from None


def _json(data: bytes) -> Record:
    try:
        value = json.loads(data)
    except ValueError as e:
        raise exc.RPCError(f"unreadable JSON from the server: {e}", status=200, code="malformed") from None
    if not isinstance(value, dict):
        raise exc.RPCError("expected a JSON object from the server", status=200, code="malformed")
    return value


async def _error(resp: aiohttp.ClientResponse, what: str) -> exc.RPCError:
    """The server's `{"code", "message", "details"}` error (or whatever it sent) as an RPCError."""
    text = await resp.text(errors="replace")
    code, message = "", text.strip() or resp.reason or ""
    try:
        body = json.loads(text)
        if isinstance(body, dict):
            code, message = str(body.get("code", "")), str(body.get("message", message))
    except ValueError:
        pass
    return exc.RPCError(f"{what}: {message} (HTTP {resp.status})", status=resp.status, code=code)
