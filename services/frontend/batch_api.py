"""Batch operations over HTTP (issue 21; Ostinato's own API): start, describe and cancel a job that terminates,
cancels, signals or resets every run a visibility query selects. A job is a run of the engine's
`ostinato.BatchOperation` workflow (`sdk/batch_workflow.py`, run by every server), so these handlers are commands
for that run: a start, a query of its progress, a cancellation."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from aiohttp import web

from ostinato.schemas import codec, wire
from ostinato.sdk.batch import BatchCancel, BatchReset, BatchSignal, BatchTerminate, operation_record
from ostinato.sdk.batch_workflow import BATCH_TASK_QUEUE, BATCH_WORKFLOW_TYPE
from ostinato.services.frontend.api import GATEWAY, payload, value_of
from ostinato.services.frontend.gateway import GatewayError
from ostinato.services.frontend.http import error
from ostinato.services.frontend.namespaces_api import unknown_namespace

Record = dict[str, Any]
TIMEOUT_S = 30.0
STATUS = {"NOT_FOUND": 404, "ALREADY_STARTED": 409, "ALREADY_CLOSED": 409}


def _operation(body: Record) -> Record:
    """The job's operation from `{"operation": "terminate"|"cancel"|"signal"|"reset", ...}`."""
    kind = body.get("operation")
    reason = body.get("reason") or ""
    if not isinstance(reason, str):
        raise ValueError("reason must be a string")
    if kind == "terminate":
        return operation_record(BatchTerminate(reason))
    if kind == "cancel":
        return operation_record(BatchCancel(reason))
    if kind == "signal":
        name, args = body.get("signal_name"), body.get("args") or []
        if not isinstance(name, str) or not name or not isinstance(args, list):
            raise ValueError("a signal operation needs signal_name (a string) and args (a list)")
        return operation_record(BatchSignal(name, args))
    if kind == "reset":
        reset_type = body.get("reset_type") or "LAST_WORKFLOW_TASK"
        if not isinstance(reset_type, str):
            raise ValueError("reset_type must be a string")
        return operation_record(BatchReset(reset_type, reason, body.get("reapply_signals") is not False))
    raise ValueError("operation must be terminate, cancel, signal or reset")


async def _send(request: web.Request, job_id: str, body: tuple[str, Record], timeout_s: float = TIMEOUT_S,
                ) -> tuple[str, Record]:
    command = wire.command(request.match_info["namespace"], job_id, body, request_id=uuid.uuid4().hex,
                           identity=f"api@{request.remote or 'unknown'}", time_ms=time.time_ns() // 1_000_000)
    _, reply = codec.decode(await request.app[GATEWAY].send(command, timeout_s))
    answer: tuple[str, Record] = reply["body"]
    return answer


def _refused(record: Record) -> web.Response:
    return error(STATUS.get(record["code"], 400), record["code"].lower(), record["message"])


async def start(request: web.Request) -> web.Response:
    if (missing := unknown_namespace(request)) is not None:
        return missing
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        query, job_id, rps = body.get("query"), body.get("job_id") or uuid.uuid4().hex, body.get("rps") or 0
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query is required (a visibility query)")
        if not isinstance(job_id, str) or isinstance(rps, bool) or not isinstance(rps, int | float) or rps < 0:
            raise ValueError("job_id must be a string and rps a non-negative number")
        spec = {"namespace": request.match_info["namespace"], "query": query, "operation": _operation(body),
                "job_id": job_id, "rps": rps}
    except (ValueError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        return error(400, "invalid_argument", str(exc))
    kind, record = await _send(request, job_id, (wire.command_type("StartWorkflowExecution"), {
        "workflow_type": BATCH_WORKFLOW_TYPE, "task_queue": BATCH_TASK_QUEUE, "input": [payload(spec)]}))
    if kind == wire.REJECTED:
        return _refused(record)
    return web.json_response({"job_id": job_id, "run_id": record["run_id"]}, status=201)


async def describe(request: web.Request) -> web.Response:
    """The job's progress, answered by its worker (its `progress` query): state, total, done, failed, errors."""
    if (missing := unknown_namespace(request)) is not None:
        return missing
    kind, record = await _send(request, request.match_info["job_id"], (wire.command_type("QueryWorkflow"), {
        "query_type": "progress", "query_args": [], "header": {},
        "deadline_ms": time.time_ns() // 1_000_000 + int(TIMEOUT_S * 1000)}))
    if kind == wire.REJECTED:
        return _refused(record)
    if record.get("failure") or not record.get("result"):
        return error(400, "query_failed", (record.get("failure") or {}).get("message", "no answer"))
    return web.json_response({"job_id": request.match_info["job_id"], **value_of(record["result"][0])})


async def cancel(request: web.Request) -> web.Response:
    if (missing := unknown_namespace(request)) is not None:
        return missing
    kind, record = await _send(request, request.match_info["job_id"], (
        wire.command_type("RequestCancelWorkflowExecution"),
        {"reason": "batch operation canceled", "external": None, "first_execution_run_id": ""}))
    return _refused(record) if kind == wire.REJECTED else web.json_response({"accepted": True})


def _guarded(fn: Any) -> Any:
    """The engine unreachable (503) or slow to answer (504), in the API's one error model."""
    async def wrapped(request: web.Request) -> web.Response:
        try:
            response: web.Response = await fn(request)
            return response
        except TimeoutError:
            return error(504, "timeout", "the engine did not answer in time; retry")
        except GatewayError as exc:
            return error(503, "unavailable", str(exc))

    return wrapped


def install(app: web.Application) -> None:
    base = "/api/v1/namespaces/{namespace}/batch-operations"
    app.router.add_post(base, _guarded(start))
    app.router.add_get(base + "/{job_id}", _guarded(describe))
    app.router.add_post(base + "/{job_id}/cancel", _guarded(cancel))
