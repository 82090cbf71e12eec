"""The owner's read API: describe, paged history and pending work, served from the shard's store.

Only the owning process has the shard's store, and the store holds only committed data, so these reads never
show something a later abort takes back. A request that reaches another process is redirected to the owner's
read endpoint (published in `<prefix>.cluster`), once: a second hop means ownership is moving, and the caller
gets a clear 503 with `Retry-After`. A shard can also move while a request holds its store (a long-poll waits
across commits): the processor thread then closes the store, the read raises `StoreClosed`, and `owner_read`
answers as a request arriving now would (a redirect to the new owner, or the 503), never a 500.

Reads see their own writes: a client told a command was done (the reply is read committed, so the commit has
happened) may ask the owner before its processor thread has written that commit to the store, and more so with
pipelined transactions, where the thread may be deciding the next batch when the commit returns. So a read first
waits until every transaction the owner began before the read arrived has landed in its store (`caught_up`).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import time
from collections.abc import Collection
from typing import Any, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler

from ostinato.schemas import codec
from ostinato.schemas.keys import history_key, run_key, shard_for, workflow_key
from ostinato.services.frontend.http import RETRY_AFTER_S, error, jsonable
from ostinato.services.history.store import Family, ShardStore, StoreClosed
from ostinato.services.history.waiters import LANDED, HistoryWaiters, closed_key
from ostinato.streams.model import RunState, decode_current, decode_run, to_record

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
HOP = "owner_hop"
LANDED_WAIT_S = 5.0  # a read waits at most this long for the transactions begun before it to land in the stores
MAX_WAIT_S = 60.0  # history long-polls (`wait_ms`) hold a request at most this long
AVRO = "avro"  # ?format=avro: the records as stored (single-object Avro), for SDKs; the default is JSON
STATE_CONTENT_TYPE = "application/vnd.ostinato.state+avro"
FILTERS = ("all", "close", "children")
# `filter=children`: the events that tell a run's children, started or not, open or closed.
CHILD_EVENTS = frozenset({
    "START_CHILD_WORKFLOW_EXECUTION_INITIATED", "START_CHILD_WORKFLOW_EXECUTION_FAILED",
    "CHILD_WORKFLOW_EXECUTION_STARTED", "CHILD_WORKFLOW_EXECUTION_COMPLETED", "CHILD_WORKFLOW_EXECUTION_FAILED",
    "CHILD_WORKFLOW_EXECUTION_CANCELED", "CHILD_WORKFLOW_EXECUTION_TIMED_OUT", "CHILD_WORKFLOW_EXECUTION_TERMINATED"})


class StoreSource(Protocol):
    def store_of(self, shard: int) -> ShardStore | None: ...

    def settled(self) -> bool:
        """False while this process's stores may lag Kafka (`Processor.settled`): "not found" is then a 503."""
        ...

    def mark(self) -> tuple[int, ...]:
        """The transactions begun so far (`Processor.mark`)."""
        ...

    def landed(self, mark: tuple[int, ...]) -> bool:
        """Whether every transaction counted in `mark` is in the stores (or was aborted)."""
        ...


class OwnerTable(Protocol):
    """Who owns each shard and where it serves reads (`services/admin/ownership.py:OwnershipTable`)."""

    def owner(self, shard: int) -> dict[str, object] | None: ...

    def owners(self) -> dict[int, dict[str, object]]: ...


class Relay(Protocol):
    """The owner reads of this server's processor processes (`services/frontend/relay.py:ProcessRelay`)."""

    def __contains__(self, owner_id: object) -> bool: ...

    async def forward(self, request: web.Request, owner_id: str) -> web.Response: ...


class ReadContext:
    def __init__(self, shards: int, source: StoreSource | None, ownership: OwnerTable | None,
                 owner_ids: Collection[str], waiters: HistoryWaiters | None = None, relay: Relay | None = None) -> None:
        self.shards = shards
        self.source = source
        self.ownership = ownership
        self.owner_ids = frozenset(owner_ids)  # this server's processors (`--processors N`): never redirect to them
        self.waiters = waiters  # woken by this process's processor after each commit (long-polls)
        self.relay = relay  # processors in processes of their own: their shards' reads are relayed to them


READS = web.AppKey("reads", ReadContext)


def store_or_redirect(request: web.Request) -> ShardStore | web.Response:
    """The store of the shard the request names when this process owns it; else a redirect to the owner (raised)
    or a 503 to answer."""
    ctx = request.app[READS]
    ns, wf = request.match_info["namespace"], request.match_info["workflow_id"]
    shard = shard_for(ns, wf, ctx.shards)
    store = ctx.source.store_of(shard) if ctx.source is not None else None
    if store is not None:
        return store
    return owner_elsewhere(request, shard)


def owner_elsewhere(request: web.Request, shard: int) -> web.Response:
    """For a shard this process does not (or no longer) own: a redirect to the owner the ownership table names
    (raised), on the first hop only; else a 503 with `Retry-After`."""
    ctx = request.app[READS]
    ns, wf = request.match_info["namespace"], request.match_info["workflow_id"]
    owner = ctx.ownership.owner(shard) if ctx.ownership is not None else None
    endpoint = str(owner["read_endpoint"]) if owner else ""
    if owner and endpoint and owner["owner_id"] not in ctx.owner_ids and HOP not in request.query:
        raw = request.raw_path  # still percent-encoded: a '/' inside a workflow id must stay %2F
        target = f"{endpoint.rstrip('/')}{raw}{'&' if '?' in raw else '?'}{HOP}=1"
        raise web.HTTPTemporaryRedirect(target)
    return error(503, "shard_unavailable", f"shard {shard} of {ns}/{wf} has no reachable owner right now; "
                 f"it may be moving between processors, retry in {RETRY_AFTER_S}s", shard=shard)


def not_found(request: web.Request, message: str) -> web.Response:
    """A 404 for a workflow or run the owner's store does not hold; a 503 with `Retry-After` instead while the
    store may lag Kafka (a failed or long-open transaction: this process may have lost the shard unknowingly),
    since the run may well exist."""
    source = request.app[READS].source
    if source is not None and not source.settled():
        return error(503, "shard_unsettled", f"{message} on this owner, whose latest transaction failed or is "
                     f"still open: it may have lost the shard; retry in {RETRY_AFTER_S}s")
    return error(404, "not_found", message)


def owner_read(handler: Handler) -> Handler:
    """Serve a read that holds a shard's store, or relay it to this server's processor process that owns the shard
    (which answers with this same code, a redirect or a 503 included). When the shard moves mid-request (the
    processor thread closes the store on revocation, so the read raises `StoreClosed`), answer as a request arriving
    now would be answered: a redirect to the new owner once the ownership table names it, else a 503 with
    `Retry-After`."""
    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        ctx = request.app[READS]
        ns, wf = request.match_info["namespace"], request.match_info["workflow_id"]
        if ctx.relay is not None and ctx.ownership is not None:  # a processor process of this server may own it
            owner = ctx.ownership.owner(shard_for(ns, wf, ctx.shards))
            if owner is not None and owner["owner_id"] in ctx.relay:
                return await ctx.relay.forward(request, str(owner["owner_id"]))
        if ctx.source is not None:
            await caught_up(ctx.source, ctx.waiters)
        try:
            return await handler(request)
        except StoreClosed:
            return owner_elsewhere(request, shard_for(ns, wf, ctx.shards))

    return wrapped


async def caught_up(source: StoreSource, waiters: HistoryWaiters | None) -> None:
    """Wait until every transaction `source` began before now has landed in its stores, at most `LANDED_WAIT_S`
    (a transaction open that long makes `settled` false, and absence a 503). Costs nothing between transactions,
    at most one commit while one is in flight: the write a client was just told of is in that one or an older
    one. Woken by the processor's notification after each landing (polled without `waiters`, as in tests)."""
    mark = source.mark()
    deadline = time.monotonic() + LANDED_WAIT_S
    while not source.landed(mark):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        if waiters is None:
            await asyncio.sleep(min(0.005, remaining))
            continue
        future = waiters.watch(LANDED)  # before the check: a landing in between still wakes it
        if source.landed(mark):
            waiters.unwatch(LANDED, future)
            return
        await waiters.wait(LANDED, future, remaining)


def run_id_param(store: ShardStore, ns: str, wf: str, request: web.Request) -> str | None:
    """The run the request names (`?run_id=`), else the current run; None when the workflow is unknown."""
    run_id = request.query.get("run_id", "")
    if run_id:
        return run_id
    pointer = store.get(Family.STATE, workflow_key(ns, wf).encode())
    return None if pointer is None else decode_current(pointer).run_id


def _run_state(request: web.Request) -> tuple[ShardStore, str, bytes] | web.Response:
    """The owner's store, the run id (named or current) and its state; or the redirect / 503 / 404 to answer."""
    store = store_or_redirect(request)
    if isinstance(store, web.Response):
        return store
    ns, wf = request.match_info["namespace"], request.match_info["workflow_id"]
    run_id = run_id_param(store, ns, wf, request)
    data = store.get(Family.STATE, run_key(ns, wf, run_id).encode()) if run_id else None
    if run_id is None or data is None:
        named = f" with run {run_id!r}" if run_id else ""
        return not_found(request, f"no workflow {wf!r} in namespace {ns!r}{named}")
    return store, run_id, data


def current_state(request: web.Request) -> tuple[ShardStore, str, bytes] | web.Response:
    """The state of the run `request` names (its workflow id and `?run_id=`, else the current run), as the owner
    stores it; or the redirect, 503 or 404 to answer. For other owner reads (the schedules API)."""
    return _run_state(request)


@owner_read
async def describe(request: web.Request) -> web.Response:
    found = _run_state(request)
    if isinstance(found, web.Response):
        return found
    _, _, data = found
    if request.query.get("format") == AVRO:
        return web.Response(body=data, content_type=STATE_CONTENT_TYPE)
    return web.json_response(jsonable(_with_task_state(to_record(decode_run(data)))))


@owner_read
async def history(request: web.Request) -> web.Response:
    ns, wf = request.match_info["namespace"], request.match_info["workflow_id"]
    try:
        size = int(request.query.get("page_size", DEFAULT_PAGE_SIZE))
        first = int(request.query.get("next_page_token", "1") or "1")
        wait_s = int(request.query.get("wait_ms", "0")) / 1000
    except ValueError:
        return error(400, "invalid_argument", "page_size, next_page_token and wait_ms must be whole numbers")
    if not 1 <= size <= MAX_PAGE_SIZE or first < 1 or not 0 <= wait_s <= MAX_WAIT_S:
        return error(400, "invalid_argument", f"page_size must be in [1, {MAX_PAGE_SIZE}], the token positive and "
                     f"wait_ms in [0, {int(MAX_WAIT_S * 1000)}]")
    event_filter = request.query.get("filter", "all")
    if event_filter not in FILTERS:
        return error(400, "invalid_argument", f"filter must be one of {', '.join(FILTERS)}, not {event_filter!r}")
    found = _run_state(request)
    if isinstance(found, web.Response):
        return found
    store, run_id, state = found
    waiters = request.app[READS].waiters
    run: RunState | None = None
    if wait_s and waiters is not None:
        waited = await _wait_for_event(request, waiters, store, ns, wf, run_id, state, first, wait_s,
                                       until_closed=event_filter == "close")
        if isinstance(waited, web.Response):
            return waited
        store, state, run = waited
    raw = request.query.get("format") == AVRO  # events as base64 single-object Avro instead of JSON
    if event_filter == "close":
        closing = closing_event(store, ns, wf, run_id, state, run)  # Temporal's CLOSE_EVENT filter
        return web.json_response({"run_id": run_id, "events": [] if closing is None else [_event_out(closing, raw)],
                                  "next_page_token": ""})
    if event_filter == "children":
        events, token = _child_events(store, ns, wf, run_id, first, size, raw)
        return web.json_response({"run_id": run_id, "events": events, "next_page_token": token})
    prefix = (run_key(ns, wf, run_id) + "/").encode()
    start = history_key(ns, wf, run_id, first).encode()
    events = []
    token = ""
    for _, value in store.scan(Family.HISTORY, start=start, prefix=prefix):
        if len(events) == size:
            token = str(first + size)
            break
        events.append(_event_out(value, raw))
    return web.json_response({"run_id": run_id, "events": events, "next_page_token": token})


def _child_events(store: ShardStore, ns: str, wf: str, run_id: str, first: int, size: int,
                  raw: bool) -> tuple[list[Any], str]:
    """Up to `size` of the run's child workflow events from event `first` on, and the token of the next one (the
    scan decodes every event on its way: a 10,000-event history takes a few tens of milliseconds)."""
    prefix = (run_key(ns, wf, run_id) + "/").encode()
    events: list[Any] = []
    for _, value in store.scan(Family.HISTORY, start=history_key(ns, wf, run_id, first).encode(), prefix=prefix):
        event = codec.decode(value)[1]
        if event["event_type"] not in CHILD_EVENTS:
            continue
        if len(events) == size:
            return events, str(event["event_id"])
        events.append(_event_out(value, raw) if raw else jsonable(event))
    return events, ""


def _still_here(request: web.Request, store: ShardStore) -> bool:
    """Whether this process still serves the request's shard from `store` (no store read, no decoding)."""
    ctx = request.app[READS]
    ns, wf = request.match_info["namespace"], request.match_info["workflow_id"]
    return ctx.source is not None and ctx.source.store_of(shard_for(ns, wf, ctx.shards)) is store


async def wait_for_commit(request: web.Request, waiters: HistoryWaiters, key: bytes, future: asyncio.Future[None],
                          store: ShardStore, deadline: float) -> bool:
    """Wait for the commit that grows run `key` (`future`, from `waiters.watch`) or for the request's shard to leave
    `store`: True then (read again), False once `deadline` (monotonic) passes. Nothing is read while it waits, and
    it does not wake to look for a move either: a processor that gives shards up wakes every waiter
    (`HistoryWaiters.release`). The one look here, after `future` was watched, catches a move that came before it.
    Thousands of idle long-polls (S4 holds 3,000) each decoding their run, or each waking once a second, took the
    interpreter from the processor beside them."""
    if not _still_here(request, store):
        waiters.unwatch(key, future)
        return True
    return await waiters.wait(key, future, deadline - time.monotonic())


def closing_event(store: ShardStore, ns: str, wf: str, run_id: str, state: bytes | None = None,
                  run: RunState | None = None) -> bytes | None:
    """The run's closing event as stored (always its last event), or None while the run is open or unknown; `state`
    when the caller has just read the run's state, `run` when it has decoded it too (a result long-poll decoded it
    to see that the run closed: decoding it again was a tenth of the owner's loop in S4)."""
    if run is None:
        if state is None:
            state = store.get(Family.STATE, run_key(ns, wf, run_id).encode())
            if state is None:
                return None
        run = decode_run(state)
    return None if run.open else store.get(Family.HISTORY, history_key(ns, wf, run_id, run.history_length).encode())


def _event_out(data: bytes, raw: bool) -> Any:
    """A stored event as a page carries it: base64 single-object Avro (`format=avro`), else JSON."""
    return base64.b64encode(data).decode() if raw else jsonable(codec.decode(data)[1])


async def _wait_for_event(request: web.Request, waiters: HistoryWaiters, store: ShardStore, ns: str, wf: str,
                          run_id: str, state: bytes, first: int, wait_s: float, until_closed: bool = False,
                          ) -> tuple[ShardStore, bytes, RunState | None] | web.Response:
    """Long-poll: hold the request until event `first` exists (unless `until_closed`), the run closes, or `wait_s`
    passes; then the store to read the page from and the run's state, as stored and decoded (None when the event
    asked for arrived: nothing decoded it). Only this process's commits wake it, which is right: the request was
    routed to the shard's owner. A shard that moved meanwhile answers what `_run_state` answers now (a redirect, a
    503). Waiting for the close alone spares a client a request and a page per step of the run (a result waits for
    a whole run)."""
    key = run_key(ns, wf, run_id).encode()
    if until_closed:
        key = closed_key(key)  # only the closing commit wakes it, not each step of the run
    wanted = history_key(ns, wf, run_id, first).encode()
    deadline = time.monotonic() + wait_s
    while True:
        future = waiters.watch(key)  # before the check, so a commit in between still wakes us
        try:
            arrived = not until_closed and store.get(Family.HISTORY, wanted) is not None
        except StoreClosed:
            waiters.unwatch(key, future)
            raise
        run = None if arrived else decode_run(state)
        if run is None or not run.open:
            waiters.unwatch(key, future)
            return store, state, run
        if not await wait_for_commit(request, waiters, key, future, store, deadline):
            return store, state, run
        found = _run_state(request)  # the shard may have moved: never read on from the old store
        if isinstance(found, web.Response):
            return found
        store, _, state = found


def _with_task_state(record: dict[str, Any]) -> dict[str, Any]:
    """The run's workflow task in flight with its `state`, as Temporal's pending workflow task has it. The engine
    hears of a task's start only with its answer, so a task in flight is SCHEDULED, its start unknown (0); a task
    dispatched by an engine from before that shows STARTED (at dispatch) until it is answered."""
    task = record.get("workflow_task")
    if task is not None:
        started = bool(task["started_time_ms"]) and not task.get("transient")
        record["workflow_task"] = {**task, "state": "STARTED" if started else "SCHEDULED",
                                   **({} if started else {"started_event_id": 0, "started_time_ms": 0})}
    return record


@owner_read
async def pending(request: web.Request) -> web.Response:
    """What the run waits for: activities, timers, children, external requests and its workflow task."""
    found = _run_state(request)
    if isinstance(found, web.Response):
        return found
    _, run_id, data = found
    record = _with_task_state(to_record(decode_run(data)))
    keys = ("status", "workflow_task", "activities", "timers", "children", "external_requests")
    return web.json_response(jsonable({"run_id": run_id, **{k: record[k] for k in keys}}))


async def owners(request: web.Request) -> web.Response:
    ctx = request.app[READS]
    table = ctx.ownership.owners() if ctx.ownership is not None else {}
    return web.json_response({"shards": ctx.shards, "owners": [table[s] for s in sorted(table)]})


def add_routes(app: web.Application, ctx: ReadContext) -> None:
    app[READS] = ctx
    base = "/api/v1/namespaces/{namespace}/workflows/{workflow_id}"
    app.router.add_get(base, describe)
    app.router.add_get(base + "/history", history)
    app.router.add_get(base + "/pending", pending)
    app.router.add_get("/api/v1/cluster/owners", owners)
