"""The JSON API of schedules (issue 21) under /api/v1/namespaces/{ns}/schedules: create, describe, list, update,
pause, unpause, trigger, backfill and delete. Each is a command to the schedule's own workflow id
(`ostinato-schedule:<id>`, streams/schedules) over the command gateway, or a read of that run's state from its
shard's owner; times are epoch milliseconds and inputs plain JSON values, as in the workflow API."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

from aiohttp import web

from ostinato.services.frontend import api
from ostinato.services.frontend.api import BadRequest, value_of
from ostinato.services.frontend.http import error, jsonable
from ostinato.services.frontend.reads import current_state, owner_read
from ostinato.services.frontend.search_attributes_api import registry
from ostinato.services.frontend.visibility_api import STORE
from ostinato.streams.model import decode_run
from ostinato.streams.schedules import SCHEDULES_QUERY, schedule_id_of, schedule_workflow_id
from ostinato.streams.schedules.timing import upcoming

Record = dict[str, Any]
OVERLAPS = ("UNSPECIFIED", "SKIP", "BUFFER_ONE", "BUFFER_ALL", "CANCEL_OTHER", "TERMINATE_OTHER", "ALLOW_ALL")
_SPEC = {"calendars": [], "intervals": [], "cron_expressions": [], "skip": [], "start_at_ms": None,
         "end_at_ms": None, "jitter_ms": 0, "time_zone_name": ""}
_CALENDAR = {"second": [], "minute": [], "hour": [], "day_of_month": [], "month": [], "year": [], "day_of_week": [],
             "comment": ""}
_POLICY = {"overlap": "UNSPECIFIED", "catchup_window_ms": 365 * 86_400_000, "pause_on_failure": False}
_STATE = {"note": "", "paused": False, "limited_actions": False, "remaining_actions": 0}


def _object(body: Record, name: str) -> Record:
    found: Record = api.field(body, name, dict, {})
    return found


def _overlap(value: Any, where: str) -> str:
    if value is None:
        return "UNSPECIFIED"
    if value not in OVERLAPS:
        raise BadRequest(f"{where} must be one of {', '.join(OVERLAPS)}", field=where)
    return str(value)


def _calendar(value: Any) -> Record:
    if not isinstance(value, dict):
        raise BadRequest("a calendar must be an object")
    out = {**_CALENDAR, **{k: v for k, v in value.items() if k in _CALENDAR}}
    for name in _CALENDAR:
        if name != "comment":
            if not isinstance(out[name], list):
                raise BadRequest(f"calendar {name} must be a list of ranges", field=name)
            out[name] = [{"start": r.get("start"), "end": r.get("end", 0), "step": r.get("step", 0)}
                         if isinstance(r, dict) else {"start": r, "end": 0, "step": 0} for r in out[name]]
    return out


def _definition(body: Record) -> Record:
    """A ScheduleDefinition record from the JSON body (omitted parts take Temporal's defaults); the command's
    encoding checks the types, the engine the meaning."""
    spec = {**_SPEC, **{k: v for k, v in _object(body, "spec").items() if k in _SPEC}}
    for name in ("calendars", "skip", "intervals", "cron_expressions"):
        if not isinstance(spec[name], list):
            raise BadRequest(f"spec.{name} must be a list", field=f"spec.{name}")
    spec["calendars"] = [_calendar(c) for c in spec["calendars"]]
    spec["skip"] = [_calendar(c) for c in spec["skip"]]
    spec["intervals"] = [{"every_ms": i.get("every_ms"), "offset_ms": i.get("offset_ms", 0)}
                         if isinstance(i, dict) else i for i in spec["intervals"]]
    action = _object(body, "action")
    policy = {**_POLICY, **{k: v for k, v in _object(body, "policy").items() if k in _POLICY}}
    policy["overlap"] = _overlap(policy["overlap"], "policy.overlap")
    return {
        "spec": spec, "policy": policy,
        "state": {**_STATE, **{k: v for k, v in _object(body, "state").items() if k in _STATE}},
        "action": {
            "workflow_id": api.field(action, "workflow_id", str, required=True),
            "workflow_type": api.field(action, "workflow_type", str, required=True),
            "task_queue": api.field(action, "task_queue", str, required=True),
            "input": [api.json_payload(v, f"action.input[{i}]")
                      for i, v in enumerate(api.field(action, "input", list, []))],
            "execution_timeout_ms": api.field(action, "execution_timeout_ms", int),
            "run_timeout_ms": api.field(action, "run_timeout_ms", int),
            "task_timeout_ms": api.field(action, "task_timeout_ms", int, 10_000), "retry_policy": None,
            "memo": {str(k): api.json_payload(v, f"action.memo.{k}")
                     for k, v in api.field(action, "memo", dict, {}).items()},
            "search_attributes": {}, "header": {}}}


def _backfills(body: Record) -> list[Record]:
    items = api.field(body, "backfill", list, [])
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadRequest(f"backfill[{i}] must be an object", field=f"backfill[{i}]")
        out.append({"start_at_ms": api.field(item, "start_at_ms", int, required=True),
                    "end_at_ms": api.field(item, "end_at_ms", int, required=True),
                    "overlap": _overlap(item.get("overlap"), f"backfill[{i}].overlap")})
    return out


async def _command(request: web.Request, name: str, body: Record, answer: Record | None = None) -> web.Response:
    schedule_id = request.match_info["schedule_id"]
    kind, record = await api.send_command(request, schedule_workflow_id(schedule_id), name, body)
    if kind.endswith("Rejected"):
        return api.rejected(record)
    return web.json_response(answer or {"schedule_id": schedule_id, "accepted": True})


@api.handler
async def create(request: web.Request) -> web.Response:
    body = await api.json_body(request, allow_empty=True)
    schedule_id = api.field(body, "schedule_id", str, required=True)
    if not schedule_id:
        raise BadRequest("schedule_id must not be empty", field="schedule_id")
    request.match_info["schedule_id"] = schedule_id
    return await _command(request, "CreateSchedule", {
        "schedule_id": schedule_id, "schedule": _definition(body),
        "trigger_immediately": api.field(body, "trigger_immediately", bool, False),
        "backfill": _backfills(body)}, {"schedule_id": schedule_id})


@api.handler
async def update(request: web.Request) -> web.Response:
    body = await api.json_body(request, allow_empty=True)
    return await _command(request, "UpdateSchedule", {"schedule": _definition(body)})


def _patch(**changes: Any) -> Record:
    return {"pause": None, "unpause": None, "trigger_immediately": None, "backfill": [], **changes}


@api.handler
async def pause(request: web.Request) -> web.Response:
    note = api.field(await api.json_body(request, allow_empty=True), "note", str, "") or "Paused via the HTTP API"
    return await _command(request, "PatchSchedule", _patch(pause=note))


@api.handler
async def unpause(request: web.Request) -> web.Response:
    note = api.field(await api.json_body(request, allow_empty=True), "note", str, "") or "Unpaused via the HTTP API"
    return await _command(request, "PatchSchedule", _patch(unpause=note))


@api.handler
async def trigger(request: web.Request) -> web.Response:
    body = await api.json_body(request, allow_empty=True)
    return await _command(request, "PatchSchedule",
                          _patch(trigger_immediately=_overlap(body.get("overlap"), "overlap")))


@api.handler
async def backfill(request: web.Request) -> web.Response:
    backfills = _backfills(await api.json_body(request, allow_empty=True))
    if not backfills:
        raise BadRequest("backfill needs at least one range", field="backfill")
    return await _command(request, "PatchSchedule", _patch(backfill=backfills))


@api.handler
async def delete(request: web.Request) -> web.Response:
    return await _command(request, "DeleteSchedule", {"reason": "schedule deleted via the HTTP API"})


def schedule_view(info: Record, now_ms: int) -> Record:
    """A schedule as JSON: its definition (inputs as JSON values), progress, and the next ten action times."""
    definition = info["definition"]
    action = {**definition["action"], "input": [value_of(p) for p in definition["action"]["input"]],
              "memo": {k: value_of(v) for k, v in definition["action"]["memo"].items()}, "search_attributes": {},
              "header": {}}
    return jsonable({"schedule_id": info["schedule_id"], "spec": definition["spec"], "action": action,
                     "policy": definition["policy"], "state": definition["state"], "info": {
                         **info["progress"], "created_time_ms": info["created_time_ms"],
                         "updated_time_ms": info["updated_time_ms"],
                         "next_action_times_ms": upcoming(info, now_ms)}})


async def describe(request: web.Request) -> web.StreamResponse:
    request.match_info["workflow_id"] = schedule_workflow_id(request.match_info["schedule_id"])
    return await _describe(request)


@owner_read
async def _describe(request: web.Request) -> web.Response:
    found = current_state(request)
    if isinstance(found, web.Response):
        return found
    run = decode_run(found[2])
    if not run.open or run.schedule is None:
        return error(404, "not_found", f"no schedule {request.match_info['schedule_id']!r}")
    return web.json_response(schedule_view(run.schedule, time.time_ns() // 1_000_000))


@api.handler
async def list_schedules(request: web.Request) -> web.Response:
    """The namespace's schedules, from the visibility store (a schedule just created may take a moment)."""
    store = request.app[STORE]
    namespace = request.match_info["namespace"]
    types = registry(request.app, namespace)
    found: list[Record] = []
    token: bytes | None = None
    while True:
        page = functools.partial(store.list, namespace, SCHEDULES_QUERY, 1000, token, types)
        rows, token = await asyncio.get_running_loop().run_in_executor(None, page)
        found += [{"schedule_id": schedule_id_of(row["workflow_id"]), "start_time_ms": row.get("start_time_ms")}
                  for row in rows]
        if token is None:
            return web.json_response({"schedules": jsonable(found)})


def install(app: web.Application) -> None:
    """The routes; the describe route reads a shard's store, so processor processes serve it too."""
    base = "/api/v1/namespaces/{namespace}/schedules"
    app.router.add_post(base, create)
    app.router.add_get(base, list_schedules)
    app.router.add_put(base + "/{schedule_id}", update)
    app.router.add_delete(base + "/{schedule_id}", delete)
    app.router.add_post(base + "/{schedule_id}/pause", pause)
    app.router.add_post(base + "/{schedule_id}/unpause", unpause)
    app.router.add_post(base + "/{schedule_id}/trigger", trigger)
    app.router.add_post(base + "/{schedule_id}/backfill", backfill)
    install_owner_reads(app)


def install_owner_reads(app: web.Application) -> None:
    app.router.add_get("/api/v1/namespaces/{namespace}/schedules/{schedule_id}", describe)
