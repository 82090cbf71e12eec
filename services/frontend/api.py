"""The JSON API for people and scripts (DESIGN.md §9): start, signal, signal-with-start, query, cancel, terminate
and result of workflows, over the command gateway. Inputs and results are plain JSON values (carried as
`json/plain` payloads, what the SDK's default converter writes); other payloads are shown as base64.

One error model everywhere: `{"code", "message", "details"}` with 400 (bad request), 404, 409 (already started),
413, 503 and 504. A malformed body is a 400, never a 500. Size refusals are 413 `too_large` stating the limit: a
body over `MAX_BODY_BYTES` (`services/frontend/http.py`), a value over the payload hard limit (2 MiB, as the SDK
refuses it), a command over the Kafka record limit.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web
from confluent_kafka import KafkaException

from ostinato.schemas import codec, wire
from ostinato.schemas.keys import history_key, run_key
from ostinato.schemas.payloads import DEFAULT_HARD_LIMIT, Payload, payload_size
from ostinato.schemas.topics import MAX_RECORD_BYTES
from ostinato.services.frontend.gateway import CommandGateway, GatewayError
from ostinato.services.frontend.http import error, jsonable
from ostinato.services.frontend.namespaces_api import unknown_namespace
from ostinato.services.frontend.reads import (
    READS,
    closing_event,
    not_found,
    owner_read,
    run_id_param,
    store_or_redirect,
    wait_for_commit,
)
from ostinato.services.history.store import Family, ShardStore, StoreClosed
from ostinato.services.history.waiters import closed_key, state_key
from ostinato.streams.model import decode_run
from ostinato.streams.update_status import STAGES, reached, update_status

Record = dict[str, Any]
JSON_ENCODING = b"json/plain"
DEFAULT_TIMEOUT_S = 30.0
MAX_RESULT_WAIT_S = 60.0
UNKNOWN_GRACE_S = 5.0  # how long an update not found yet is looked for (the SDK's read-your-writes window)
GATEWAY = web.AppKey("gateway", CommandGateway)


class BadRequest(Exception):
    status = 400
    code = "invalid_argument"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class TooLarge(BadRequest):
    status = 413
    code = "too_large"


def payload(value: Any) -> Record:
    return {"metadata": {"encoding": JSON_ENCODING}, "data": json.dumps(value, separators=(",", ":")).encode()}


def value_of(record: Record) -> Any:
    if record["metadata"].get("encoding") == JSON_ENCODING:
        return json.loads(record["data"])
    return {"encoding": record["metadata"].get("encoding", b"").decode(errors="replace"),
            "data_base64": base64.b64encode(record["data"]).decode()}


async def _body(request: web.Request, *, allow_empty: bool = False) -> Record:
    """The request's JSON object; `allow_empty`: no body at all is `{}` (actions whose fields are all optional)."""
    try:
        body = await request.json() if request.can_read_body or not allow_empty else {}
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _field(body: Record, name: str, kind: type | tuple[type, ...], default: Any = ..., *, required: bool = False,
           ) -> Any:
    if name not in body or body[name] is None:
        if required:
            raise BadRequest(f"{name} is required", field=name)
        return None if default is ... else default
    value = body[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BadRequest(f"{name} must be {getattr(kind, '__name__', kind)}", field=name)
    return value


def _checked(value: Any, where: str) -> Record:
    """The value as a JSON payload, refused above the payload hard limit the SDK applies too."""
    record = payload(value)
    size = payload_size(Payload({k: v for k, v in record["metadata"].items()}, record["data"]))
    if size > DEFAULT_HARD_LIMIT:
        raise TooLarge(f"{where} is {size:,} bytes as a payload, above the {DEFAULT_HARD_LIMIT:,}-byte limit; store "
                       "large data elsewhere and pass a reference to it", field=where, size_bytes=size,
                       limit_bytes=DEFAULT_HARD_LIMIT)
    return record


def _args(body: Record, name: str) -> list[Record]:
    values = _field(body, name, list, [])
    return [_checked(v, f"{name}[{i}]") for i, v in enumerate(values)]


def _payload_map(body: Record, name: str) -> dict[str, Record]:
    values = _field(body, name, dict, {})
    return {str(k): _checked(v, f"{name}.{k}") for k, v in values.items()}


def _positive(body: Record, name: str) -> int | None:
    value = _field(body, name, int)
    if value is not None and value <= 0:
        raise BadRequest(f"{name} must be positive", field=name)
    return value  # type: ignore[no-any-return]


def _start_body(body: Record) -> Record:
    return {
        "workflow_type": _field(body, "workflow_type", str, required=True),
        "task_queue": _field(body, "task_queue", str, required=True),
        "input": _args(body, "input"),
        "execution_timeout_ms": _positive(body, "execution_timeout_ms"),
        "run_timeout_ms": _positive(body, "run_timeout_ms"),
        "task_timeout_ms": _positive(body, "task_timeout_ms") or 0,
        "id_reuse_policy": _field(body, "id_reuse_policy", str, "UNSPECIFIED"),
        "id_conflict_policy": _field(body, "id_conflict_policy", str, "UNSPECIFIED"),
        "retry_policy": None, "memo": _payload_map(body, "memo"),
        "search_attributes": _payload_map(body, "search_attributes"), "header": {}, "parent": None,
        "cron_schedule": _field(body, "cron_schedule", str, ""),
    }


async def _send(request: web.Request, workflow_id: str, name: str, body: Record, *, run_id: str = "",
                request_id: str = "", timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[str, Record]:
    gateway = request.app[GATEWAY]
    command = _command(request, workflow_id, name, body, run_id, request_id or uuid.uuid4().hex)
    reply = await gateway.send(command, timeout_s)
    _, record = codec.decode(reply)
    branch: tuple[str, Record] = record["body"]
    return branch


def _command(request: web.Request, workflow_id: str, name: str, body: Record, run_id: str, request_id: str,
             ) -> Record:
    command = wire.command(request.match_info["namespace"], workflow_id, (name, body), run_id=run_id,
                           request_id=request_id, identity=f"api@{request.remote or 'unknown'}",
                           time_ms=time.time_ns() // 1_000_000)
    try:
        size = len(codec.encode(wire.COMMAND, command))
    except ValueError as exc:
        raise BadRequest(f"the request does not make a valid {name}: {exc}") from None
    if size > MAX_RECORD_BYTES:
        raise TooLarge(f"the {name} command would be {size:,} bytes, above the {MAX_RECORD_BYTES:,}-byte record "
                       "limit", size_bytes=size, limit_bytes=MAX_RECORD_BYTES)
    return command


def _rejected(record: Record) -> web.Response:
    code = record["code"]
    status = {"NOT_FOUND": 404, "ALREADY_STARTED": 409, "ALREADY_CLOSED": 409, "DUPLICATE_REQUEST": 409,
              "LIMIT_EXCEEDED": 429, "TOO_LARGE": 413}.get(code, 400)
    details = {"existing_run_id": record["existing_run_id"]} if record.get("existing_run_id") else {}
    return error(status, code.lower(), record["message"], **details)


def _handler(fn: Any) -> Any:
    """Turn the request-level exceptions into the one error model."""
    async def wrapped(request: web.Request) -> web.StreamResponse:
        missing = unknown_namespace(request)
        if missing is not None:
            return missing
        try:
            response: web.StreamResponse = await fn(request)
            return response
        except BadRequest as exc:
            return error(exc.status, exc.code, str(exc), **exc.details)
        except TimeoutError:
            return error(504, "timeout", "the engine did not answer in time; retrying with the same request_id is "
                         "safe")
        except GatewayError as exc:
            return error(503, "unavailable", str(exc))

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


@_handler
async def start(request: web.Request) -> web.Response:
    """Start a workflow; 201 with its run id, 409 when the id is taken (per the reuse and conflict policies)."""
    body = await _body(request)
    workflow_id = _field(body, "workflow_id", str, required=True)
    if not _field(body, "wait", bool, True):  # fire and forget: 202 once Kafka has the command
        request_id = _field(body, "request_id", str, "") or uuid.uuid4().hex
        command = _command(request, workflow_id, "StartWorkflowExecution", _start_body(body), "", request_id)
        await request.app[GATEWAY].post(command, DEFAULT_TIMEOUT_S)
        return web.json_response({"workflow_id": workflow_id, "request_id": request_id, "accepted": True},
                                 status=202)
    kind, record = await _send(request, workflow_id, "StartWorkflowExecution", _start_body(body),
                               request_id=_field(body, "request_id", str, ""))
    if kind.endswith("Rejected"):
        return _rejected(record)
    return web.json_response({"workflow_id": workflow_id, "run_id": record["run_id"], "started": record["started"]},
                             status=201 if record["started"] else 200)


@_handler
async def signal(request: web.Request) -> web.Response:
    body = await _body(request)
    kind, record = await _send(request, request.match_info["workflow_id"], "SignalWorkflowExecution", {
        "signal_name": _field(body, "signal_name", str, required=True), "input": _args(body, "input"),
        "header": {}, "external": None}, run_id=_field(body, "run_id", str, ""),
        request_id=_field(body, "request_id", str, ""))
    return _rejected(record) if kind.endswith("Rejected") else web.json_response({"accepted": True})


@_handler
async def signal_with_start(request: web.Request) -> web.Response:
    body = await _body(request)
    kind, record = await _send(request, request.match_info["workflow_id"], "SignalWithStartWorkflowExecution", {
        "start": _start_body(body), "signal_name": _field(body, "signal_name", str, required=True),
        "signal_input": _args(body, "signal_input"), "signal_header": {}},
        request_id=_field(body, "request_id", str, ""))
    if kind.endswith("Rejected"):
        return _rejected(record)
    return web.json_response({"workflow_id": request.match_info["workflow_id"], "run_id": record.get("run_id", "")})


@_handler
async def query(request: web.Request) -> web.Response:
    """Ask a running workflow (a worker answers); 504 when no worker answers within `timeout_ms`."""
    body = await _body(request)
    timeout_ms = _positive(body, "timeout_ms") or 10_000
    kind, record = await _send(request, request.match_info["workflow_id"], "QueryWorkflow", {
        "query_type": _field(body, "query_type", str, required=True), "query_args": _args(body, "args"),
        "header": {}, "deadline_ms": time.time_ns() // 1_000_000 + timeout_ms},
        run_id=_field(body, "run_id", str, ""), timeout_s=timeout_ms / 1000)
    if kind.endswith("Rejected"):
        return _rejected(record)
    if record.get("failure"):
        return error(400, "query_failed", record["failure"]["message"])
    return web.json_response({"result": value_of(record["result"][0]) if record["result"] else None})


@_handler
async def cancel(request: web.Request) -> web.Response:
    body = await _body(request) if request.can_read_body else {}
    kind, record = await _send(request, request.match_info["workflow_id"], "RequestCancelWorkflowExecution", {
        "reason": _field(body, "reason", str, ""), "external": None, "first_execution_run_id": ""},
        run_id=_field(body, "run_id", str, ""))
    return _rejected(record) if kind.endswith("Rejected") else web.json_response({"accepted": True})


@_handler
async def terminate(request: web.Request) -> web.Response:
    body = await _body(request) if request.can_read_body else {}
    kind, record = await _send(request, request.match_info["workflow_id"], "TerminateWorkflowExecution", {
        "reason": _field(body, "reason", str, ""), "details": [], "first_execution_run_id": ""},
        run_id=_field(body, "run_id", str, ""))
    return _rejected(record) if kind.endswith("Rejected") else web.json_response({"accepted": True})


@_handler
async def reset(request: web.Request) -> web.Response:
    """Start a new run from a completed workflow task of the run (`event_id`, or `reset_type` FIRST or LAST): 200
    with the new run's id. Retrying with the same `request_id` resets once."""
    body = await _body(request) if request.can_read_body else {}
    reset_type = _field(body, "reset_type", str, "").upper()
    if reset_type in ("FIRST", "LAST"):
        reset_type += "_WORKFLOW_TASK"
    if reset_type not in ("", "FIRST_WORKFLOW_TASK", "LAST_WORKFLOW_TASK"):
        raise BadRequest("reset_type must be FIRST_WORKFLOW_TASK or LAST_WORKFLOW_TASK", field="reset_type")
    event_id = _field(body, "event_id", int, 0)
    if event_id < 0 or (bool(event_id) == bool(reset_type)):
        raise BadRequest("give exactly one of event_id (a WORKFLOW_TASK_COMPLETED event) and reset_type",
                         field="event_id")
    kind, record = await _send(request, request.match_info["workflow_id"], "ResetWorkflowExecution", {
        "event_id": event_id, "reset_type": reset_type or "UNSPECIFIED", "reason": _field(body, "reason", str, ""),
        "reapply_signals": _field(body, "reapply_signals", bool, True)}, run_id=_field(body, "run_id", str, ""),
        request_id=_field(body, "request_id", str, ""))
    return _rejected(record) if kind.endswith("Rejected") else web.json_response({"run_id": record["run_id"]})


@_handler
async def redrive(request: web.Request) -> web.Response:
    """Decide the run's quarantined commands again (describe lists them under `quarantine`), after an upgrade that
    fixed what failed them: 200 with one outcome per command (APPLIED, REJECTED or FAILED: FAILED ones stay)."""
    body = await _body(request) if request.can_read_body else {}
    kind, record = await _send(request, request.match_info["workflow_id"], "RedriveWorkflowExecution", {
        "reason": _field(body, "reason", str, "")}, run_id=_field(body, "run_id", str, ""),
        request_id=_field(body, "request_id", str, ""))
    if kind.endswith("Rejected"):
        return _rejected(record)
    return web.json_response({"run_id": record["run_id"], "outcomes": record["outcomes"]})


def _update_body(body: Record) -> Record:
    """An update's id, when the caller gives none, is its request id if it gave one: a retried request joins the
    update it made the first time instead of running the handler again."""
    return {"update_id": _field(body, "update_id", str, "") or _field(body, "request_id", str, "")
            or uuid.uuid4().hex, "name": "",
            "input": _args(body, "input"), "header": {}, "first_execution_run_id": ""}


def _wait_stage(value: str) -> str:
    stage = value.upper()
    if stage not in STAGES:
        raise BadRequest(f"wait_stage must be one of {', '.join(STAGES)}, not {value!r}", field="wait_stage")
    return stage


def _see_update(request: web.Request, workflow_id: str, update_id: str, run_id: str, stage: str,
                timeout_ms: int) -> web.Response:
    """POST-redirect-GET: the update was admitted; its stage and outcome are an owner read, which this server may
    not hold. 303 sends the client (curl -L, browsers, aiohttp, the SDK) to it, with what it needs to wait."""
    ns = request.match_info["namespace"]
    path = f"/api/v1/namespaces/{quote(ns, safe='')}/workflows/{quote(workflow_id, safe='')}/updates/" \
           f"{quote(update_id, safe='')}"
    location = f"{path}?{urlencode({'run_id': run_id, 'wait_stage': stage, 'wait_ms': timeout_ms})}"
    return web.json_response({"update_id": update_id, "run_id": run_id, "stage": "ADMITTED", "location": location},
                             status=303, headers={"Location": location})


@_handler
async def update(request: web.Request) -> web.Response:
    """Send an update (Temporal's UpdateWorkflowExecution). wait_stage ADMITTED answers once the engine has it;
    ACCEPTED (the default) or COMPLETED answer 303 to the update's owner read, which waits for that stage."""
    body = await _body(request)
    workflow_id = request.match_info["workflow_id"]
    update_body = {**_update_body(body), "name": request.match_info["name"]}
    stage = _wait_stage(_field(body, "wait_stage", str, "ACCEPTED"))
    timeout_ms = _positive(body, "timeout_ms") or int(MAX_RESULT_WAIT_S * 1000)
    kind, record = await _send(request, workflow_id, "UpdateWorkflowExecution", update_body,
                               run_id=_field(body, "run_id", str, ""), request_id=_field(body, "request_id", str, ""))
    if kind.endswith("Rejected"):
        return _rejected(record)
    if stage == "ADMITTED":
        return web.json_response({"update_id": update_body["update_id"], "run_id": record["run_id"],
                                  "stage": "ADMITTED"})
    return _see_update(request, workflow_id, update_body["update_id"], record["run_id"], stage, timeout_ms)


@_handler
async def update_with_start(request: web.Request) -> web.Response:
    """Start the workflow if it is not running (id_conflict_policy USE_EXISTING, the default here, or FAIL) and
    update it, in one command; then as `update`."""
    body = await _body(request)
    workflow_id = request.match_info["workflow_id"]
    start_body = _start_body({"id_conflict_policy": "USE_EXISTING", **body})
    requested = _field(body, "update", dict, required=True)
    update_body = {**_update_body({"request_id": _field(body, "request_id", str, ""), **requested}),
                   "name": _field(requested, "name", str, required=True)}
    stage = _wait_stage(_field(body, "wait_stage", str, "ACCEPTED"))
    timeout_ms = _positive(body, "timeout_ms") or int(MAX_RESULT_WAIT_S * 1000)
    kind, record = await _send(request, workflow_id, "UpdateWithStartWorkflowExecution",
                               {"start": start_body, "update": update_body},
                               request_id=_field(body, "request_id", str, ""))
    if kind.endswith("Rejected"):
        return _rejected(record)
    if stage == "ADMITTED":
        return web.json_response({"update_id": update_body["update_id"], "run_id": record["run_id"],
                                  "started": record["started"], "stage": "ADMITTED"})
    return _see_update(request, workflow_id, update_body["update_id"], record["run_id"], stage, timeout_ms)


@_handler
@owner_read
async def update_outcome(request: web.Request) -> web.Response:
    """Long-poll an update until it reaches `wait_stage` (ACCEPTED by default), `wait_ms` passes (max 60 s: the
    stage reached so far), or it cannot get there (run_closed). 404 for an update the run does not know: never
    sent, or admitted before the run's state was rebuilt from history (send it again with the same id)."""
    store = store_or_redirect(request)
    if isinstance(store, web.Response):
        return store
    ns, wf = request.match_info["namespace"], request.match_info["workflow_id"]
    update_id = request.match_info["update_id"]
    stage = _wait_stage(request.query.get("wait_stage", "ACCEPTED"))
    try:
        wait_s = min(MAX_RESULT_WAIT_S, int(request.query.get("wait_ms", "0")) / 1000)
    except ValueError:
        raise BadRequest("wait_ms must be a whole number") from None
    run_id = run_id_param(store, ns, wf, request)
    if not run_id:
        return not_found(request, f"no workflow {wf!r} in namespace {ns!r}")
    deadline = time.monotonic() + wait_s
    # The caller was just told the update was admitted, but the owner writes its store right after the commit
    # that told it: an update (or, for update-with-start, a run) not found yet is looked for a moment longer.
    unknown_until = time.monotonic() + min(wait_s, UNKNOWN_GRACE_S)
    key = run_key(ns, wf, run_id).encode()
    watched = state_key(key)
    waiters = request.app[READS].waiters
    while True:
        future = waiters.watch(watched) if waiters is not None else None  # before the read: no lost wake-up
        try:
            data = store.get(Family.STATE, key)
            status = None if data is None else update_status(
                decode_run(data), update_id,
                lambda n: _stored_event(store, ns, wf, run_id, n))  # noqa: B023 - used at once, in this pass
        except StoreClosed:
            if waiters is not None and future is not None:
                waiters.unwatch(watched, future)
            raise
        now = time.monotonic()
        done = (status is None and now >= unknown_until) or (status is not None and reached(status, stage)) \
            or now >= deadline
        if done:
            if waiters is not None and future is not None:
                waiters.unwatch(watched, future)
            if data is None:
                return not_found(request, f"no run {run_id!r} of workflow {wf!r} in namespace {ns!r}")
            if status is None:
                return not_found(request, f"run {run_id} of {wf!r} has no update {update_id!r}")
            return web.json_response(_update_out(status, raw=request.query.get("format") == "avro"))
        if waiters is not None and future is not None:
            await wait_for_commit(request, waiters, watched, future, store,
                                  unknown_until if status is None else deadline)
        else:
            await asyncio.sleep(0.05)
        store = store_or_redirect(request)  # never read on from the store of a shard that moved away
        if isinstance(store, web.Response):
            return store


def _stored_event(store: ShardStore, ns: str, wf: str, run_id: str, event_id: int) -> Record | None:
    data = store.get(Family.HISTORY, history_key(ns, wf, run_id, event_id).encode())
    return None if data is None else codec.decode(data)[1]


def _update_out(status: Record, raw: bool) -> Record:
    """The status as JSON: the result as a value (a JSON payload) and the failure as a record; with
    `format=avro` (SDKs) the outcome as a base64 single-object `ostinato.command.CompleteUpdateCommand` instead."""
    out = dict(status)
    outcome = status["outcome"]
    if raw:
        out["outcome"] = None if outcome is None else base64.b64encode(codec.encode(
            "ostinato.command.CompleteUpdateCommand", {"update_id": status["update_id"],
                                                       "result": outcome.get("result", []),
                                                       "failure": outcome.get("failure")})).decode()
    elif outcome is not None and "result" in outcome:
        out["outcome"] = {"result": value_of(outcome["result"][0]) if outcome["result"] else None,
                          "payloads": jsonable(outcome["result"])}
    elif outcome is not None:
        out["outcome"] = {"failure": jsonable(outcome["failure"])}
    return out


@_handler
@owner_read
async def result(request: web.Request) -> web.Response:
    """Long-poll until the run closes (served by the shard's owner; others redirect), following continue-as-new
    unless `follow=false`. 200 with the status and the result or failure; 504 after `timeout_ms` (max 60 s). A
    shard that moves meanwhile answers a redirect to its new owner or a 503 with Retry-After."""
    store = store_or_redirect(request)
    if isinstance(store, web.Response):
        return store
    ns, wf = request.match_info["namespace"], request.match_info["workflow_id"]
    try:
        wait_s = min(MAX_RESULT_WAIT_S, int(request.query.get("timeout_ms", "30000")) / 1000)
    except ValueError:
        raise BadRequest("timeout_ms must be a whole number") from None
    follow = request.query.get("follow", "true") != "false"
    run_id = run_id_param(store, ns, wf, request)
    if not run_id:
        return not_found(request, f"no workflow {wf!r} in namespace {ns!r}")
    if store.get(Family.STATE, run_key(ns, wf, run_id).encode()) is None:  # a named run never started, or deleted
        return not_found(request, f"no run {run_id!r} of workflow {wf!r} in namespace {ns!r}")
    deadline = time.monotonic() + wait_s
    waiters = request.app[READS].waiters
    delay = 0.02
    while True:
        key = closed_key(run_key(ns, wf, run_id).encode())  # woken by the commit that closes the run, not each step
        future = waiters.watch(key) if waiters is not None else None  # before the check: no lost wake-up
        try:
            closing = _closing_event(store, ns, wf, run_id)
        except StoreClosed:  # the shard moved mid-wait: `owner_read` answers the redirect or the 503
            if waiters is not None and future is not None:
                waiters.unwatch(key, future)
            raise
        if closing is not None:
            if waiters is not None and future is not None:
                waiters.unwatch(key, future)
            kind, attrs = closing["event_type"], closing["attributes"][1]
            if kind == "WORKFLOW_EXECUTION_CONTINUED_AS_NEW" and follow:
                run_id = attrs["new_execution_run_id"]
                continue
            return web.json_response(_outcome(run_id, kind, attrs))
        if time.monotonic() > deadline:
            if waiters is not None and future is not None:
                waiters.unwatch(key, future)
            return error(504, "timeout", f"workflow {wf!r} is still running after {wait_s:.0f}s; ask again",
                         run_id=run_id)
        if waiters is not None and future is not None:
            await wait_for_commit(request, waiters, key, future, store, deadline)  # a timeout answers 504 above
        else:
            await asyncio.sleep(delay)
            delay = min(0.5, delay * 1.5)
        store = store_or_redirect(request)  # never read on from the store of a shard that moved away
        if isinstance(store, web.Response):
            return store


def _closing_event(store: ShardStore, ns: str, wf: str, run_id: str) -> Record | None:
    data = closing_event(store, ns, wf, run_id)
    return None if data is None else codec.decode(data)[1]


def _outcome(run_id: str, kind: str, attrs: Record) -> Record:
    status = kind.removeprefix("WORKFLOW_EXECUTION_")
    out: Record = {"run_id": run_id, "status": status}
    if kind == "WORKFLOW_EXECUTION_COMPLETED":
        out["result"] = value_of(attrs["result"][0]) if attrs["result"] else None
    elif kind == "WORKFLOW_EXECUTION_FAILED":
        out["failure"] = {"message": attrs["failure"]["message"], "type": attrs["failure"]["type"]}
    elif kind == "WORKFLOW_EXECUTION_TERMINATED":
        out["reason"] = attrs["reason"]
    elif kind == "WORKFLOW_EXECUTION_CONTINUED_AS_NEW":
        out["new_run_id"] = attrs["new_execution_run_id"]
    return out


@_handler
async def describe_task_queue(request: web.Request) -> web.Response:
    """Backlog (consumer lag) and the oldest waiting task's age per kind, and the workers in the queue's group."""
    from ostinato.services.admin.task_queues import describe_task_queue as describe

    gateway = request.app[GATEWAY]
    try:
        found = await asyncio.get_running_loop().run_in_executor(
            None, describe, gateway.bootstrap, gateway.settings.topic_prefix, request.match_info["task_queue"])
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    except KafkaException as exc:  # e.g. a task topic created a moment ago has no partition leader yet
        return error(503, "unavailable", f"the task queue's topics cannot be read right now: {exc}; retry shortly")
    return web.json_response(found)


def install(app: web.Application, gateway: CommandGateway) -> None:
    app[GATEWAY] = gateway
    base = "/api/v1/namespaces/{namespace}/workflows"
    app.router.add_post(base, start)
    app.router.add_post(base + "/{workflow_id}/signal", signal)
    app.router.add_post(base + "/{workflow_id}/signal-with-start", signal_with_start)
    app.router.add_post(base + "/{workflow_id}/query", query)
    app.router.add_post(base + "/{workflow_id}/cancel", cancel)
    app.router.add_post(base + "/{workflow_id}/terminate", terminate)
    app.router.add_post(base + "/{workflow_id}/redrive", redrive)
    app.router.add_post(base + "/{workflow_id}/reset", reset)
    app.router.add_post(base + "/{workflow_id}/updates/{name}", update)
    app.router.add_post(base + "/{workflow_id}/update-with-start", update_with_start)
    install_owner_reads(app)
    app.router.add_get("/api/v1/namespaces/{namespace}/task-queues/{task_queue}", describe_task_queue)


def install_owner_reads(app: web.Application) -> None:
    """The routes of this API that read a shard's store: also served by a processor process of its own
    (`services/processor_process.py`), which has no gateway."""
    app.router.add_get("/api/v1/namespaces/{namespace}/workflows/{workflow_id}/result", result)
    app.router.add_get("/api/v1/namespaces/{namespace}/workflows/{workflow_id}/updates/{update_id}", update_outcome)


# What sibling JSON APIs (schedules_api) build on: one error model, one command path, one payload rule.
handler = _handler
json_body = _body
send_command = _send
field = _field
rejected = _rejected
json_payload = _checked
