"""A task queue's engine-enforced activity rate (`ostinato task-queue set-rate-limit`, temporalio's
`Worker(max_task_queue_activities_per_second=)`): set, lift and read it.

The limit is a `TaskQueueRateLimit` record in `<prefix>.cluster` keyed `task_queue_rate_limit/<queue>`, durable in
Kafka like namespaces and search attributes; every processor and rate limiter reads it back (`OwnershipTable`), and
the latest record wins. Task queues, like their topics, belong to the cluster: the path's namespace only says whose
writers may set it.
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
from ostinato.services.admin.ownership import OwnershipTable
from ostinato.services.frontend.http import error

TABLE = web.AppKey("rate_limit_table", OwnershipTable)
GATEWAY = web.AppKey("rate_limit_gateway", object)
PREFIX = web.AppKey("rate_limit_prefix", str)
MAX_RATE = 1_000_000.0
READ_BACK_S = 10.0


def _answer(queue: str, rate: float | None) -> web.Response:
    return web.json_response({"task_queue": queue, "activities_per_second": rate})


async def set_rate_limit(request: web.Request) -> web.Response:
    """`{"activities_per_second": 5}` sets the limit, `0` or `null` lifts it; answered once read back, so a task
    the next workflow schedules is already held to it."""
    queue = request.match_info["task_queue"]
    if (problem := task_queue_problem(queue)) is not None:
        return error(400, "invalid_argument", problem, field="task_queue")
    try:
        body = await request.json()
    except ValueError as exc:
        return error(400, "invalid_argument", f"the body is not JSON: {exc}")
    raw: Any = body.get("activities_per_second") if isinstance(body, dict) else "missing"
    if raw is None:
        raw = 0
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or not 0 <= raw <= MAX_RATE:
        return error(400, "invalid_argument", 'the body must be {"activities_per_second": <number from 0 to '
                     f'{MAX_RATE:.0f}>}} (0 or null lifts the limit)', field="activities_per_second")
    rate = float(raw)
    set_by = str(body.get("set_by", "")) if isinstance(body, dict) else ""
    table, producer = request.app[TABLE], request.app[GATEWAY].producer  # type: ignore[attr-defined]
    record = {"task_queue": queue, "activities_per_second": rate, "set_by": set_by[:200],
              "updated_at_ms": time.time_ns() // 1_000_000}
    producer.produce(topic_name(request.app[PREFIX], Topic.CLUSTER), codec.encode(wire.TASK_QUEUE_RATE_LIMIT, record),
                     join_key("task_queue_rate_limit", queue).encode(), partition=0)
    await asyncio.get_running_loop().run_in_executor(None, producer.flush, 10)
    deadline = time.monotonic() + READ_BACK_S
    while table.rate_limits().get(queue, 0.0) != rate:  # read back before answering
        if time.monotonic() > deadline:
            return error(503, "unavailable", "the rate limit was written but not read back in time")
        await asyncio.sleep(0.05)
    return _answer(queue, rate or None)


async def get_rate_limit(request: web.Request) -> web.Response:
    """The queue's limit in activities per second, null when none is set."""
    queue = request.match_info["task_queue"]
    return _answer(queue, request.app[TABLE].rate_limits().get(queue))


def install(app: web.Application, table: OwnershipTable, gateway: Any, prefix: str) -> None:
    """`gateway`'s idempotent producer (created when the app starts) writes the settings."""
    app[TABLE], app[GATEWAY], app[PREFIX] = table, gateway, prefix
    path = "/api/v1/namespaces/{namespace}/task-queues/{task_queue}/rate-limit"
    app.router.add_put(path, set_rate_limit)
    app.router.add_get(path, get_rate_limit)
