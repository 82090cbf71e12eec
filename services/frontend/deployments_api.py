"""Worker versioning's deployments: a task queue's current and ramping build, described and changed over HTTP.

Each change is a `TaskQueueVersioning` record in `<prefix>.cluster` keyed `deployment/<namespace>/<queue>`, with the
next revision: durable in Kafka, read back by every frontend and processor (`OwnershipTable`), which route each
task by it at dispatch (`streams/versioning.py`). A change never moves a task already dispatched: it waits in the
topic it went to, so nothing is lost or doubled when the current build changes mid-flight.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from aiohttp import web

from ostinato.schemas import codec, wire
from ostinato.schemas.keys import join_key
from ostinato.schemas.topics import Topic, task_queue_problem, topic_name
from ostinato.services.frontend.http import error
from ostinato.services.frontend.namespaces_api import NAMESPACES, Namespaces, unknown_namespace
from ostinato.streams.versioning import QueueVersioning, build_id_problem, versioned_queue

READ_BACK_S = 10.0


def describe(versioning: QueueVersioning | None, namespace: str, queue: str) -> dict[str, Any]:
    found = versioning or QueueVersioning()
    return {"namespace": namespace, "task_queue": queue, "current_build": found.current_build,
            "ramping_build": found.ramping_build, "ramping_percentage": found.ramping_percentage,
            "revision": found.revision,
            "current_queue": versioned_queue(queue, found.current_build),
            "ramping_queue": versioned_queue(queue, found.ramping_build) if found.ramping_build else ""}


def _changed(known: QueueVersioning, body: dict[str, Any]) -> QueueVersioning | str:
    """The queue's versioning after the change `body` asks for, or why it cannot be made."""
    current = body.get("current_build", known.current_build)
    ramping = body.get("ramping_build", known.ramping_build)
    percentage = body.get("ramping_percentage", known.ramping_percentage if "ramping_build" not in body else 0.0)
    if not isinstance(current, str) or not isinstance(ramping, str):
        return "current_build and ramping_build are strings (empty: none)"
    for build in (current, ramping):
        if build and (problem := build_id_problem(build)) is not None:
            return problem
    if isinstance(percentage, bool) or not isinstance(percentage, int | float) or not math.isfinite(percentage) \
            or not 0 <= percentage <= 100:
        return f"ramping_percentage is a number from 0 to 100, not {percentage!r}"
    if "current_build" in body and current == ramping:
        ramping, percentage = "", 0.0  # the ramping build promoted to current: the ramp is over (Temporal's rule)
    if ramping and ramping == current:
        return f"build {ramping!r} is already current; it cannot also ramp"
    if not ramping:
        percentage = 0.0
    return QueueVersioning(current, ramping, float(percentage), known.revision + 1)


async def get_versioning(request: web.Request) -> web.Response:
    missing = unknown_namespace(request)
    if missing is not None:
        return missing
    spaces, namespace = request.app[NAMESPACES], request.match_info["namespace"]
    queue = request.match_info["task_queue"]
    return web.json_response(describe(spaces.table.deployments(namespace).get(queue), namespace, queue))


async def set_versioning(request: web.Request) -> web.Response:
    """Change a queue's builds: `{"current_build": "B"}` (Temporal's set-current-version), `{"ramping_build": "C",
    "ramping_percentage": 10}` (set-ramping-version; `""` or 0 ends the ramp). Fields left out keep their value."""
    missing = unknown_namespace(request)
    if missing is not None:
        return missing
    spaces, namespace = request.app[NAMESPACES], request.match_info["namespace"]
    queue = request.match_info["task_queue"]
    if (problem := task_queue_problem(queue)) is not None:
        return error(400, "invalid_argument", problem, field="task_queue")
    try:
        body = await request.json()
    except ValueError as exc:
        return error(400, "invalid_argument", f"the body is not JSON: {exc}")
    wanted = {"current_build", "ramping_build", "ramping_percentage"}
    if not isinstance(body, dict) or not body or set(body) - wanted:
        return error(400, "invalid_argument", 'the body is {"current_build": "<build id>"} and/or {"ramping_build": '
                     '"<build id>", "ramping_percentage": <0-100>}')
    known = spaces.table.deployments(namespace).get(queue) or QueueVersioning()
    change = _changed(known, body)
    if isinstance(change, str):
        return error(400, "invalid_argument", change)
    await _write(spaces, namespace, queue, change, request.get("identity") or "http")
    return web.json_response(describe(spaces.table.deployments(namespace).get(queue), namespace, queue))


async def _write(spaces: Namespaces, namespace: str, queue: str, change: QueueVersioning, who: str) -> None:
    """Produce the record and read it back, so the answer (and the caller's next request) sees the change."""
    record = {"namespace": namespace, "task_queue": queue, "current_build": change.current_build,
              "ramping_build": change.ramping_build, "ramping_percentage": change.ramping_percentage,
              "revision": change.revision, "updated_at_ms": time.time_ns() // 1_000_000, "updated_by": str(who)}
    producer = spaces.gateway.producer
    producer.produce(topic_name(spaces.prefix, Topic.CLUSTER), codec.encode(wire.TASK_QUEUE_VERSIONING, record),
                     join_key("deployment", namespace, queue).encode(), partition=0)
    await asyncio.get_running_loop().run_in_executor(None, producer.flush, 10)
    deadline = time.monotonic() + READ_BACK_S
    while (found := spaces.table.deployments(namespace).get(queue)) is None or found.revision < change.revision:
        if time.monotonic() > deadline:
            raise web.HTTPServiceUnavailable(text="the change was written but not read back in time")
        await asyncio.sleep(0.02)


def install(app: web.Application) -> None:
    path = "/api/v1/namespaces/{namespace}/task-queues/{task_queue}/versioning"
    app.router.add_get(path, get_versioning)
    app.router.add_post(path, set_versioning)
