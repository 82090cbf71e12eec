"""Namespaces: register, describe, list (DESIGN.md §9). A namespace is a record in `<prefix>.cluster` keyed
`namespace/<name>`; the first registration of a name wins. `default` always exists, with the cluster's default
retention. Retention applies to runs that close after it is set."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ostinato.schemas import codec, wire
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.ownership import DEFAULT_NAMESPACE, OwnershipTable
from ostinato.services.frontend.http import error
from ostinato.streams.config import Config

MIN_RETENTION_MS = 60_000
MAX_RETENTION_MS = 100 * 365 * 86_400_000  # a century: beyond that a deadline adds up past what Avro longs hold
MAX_NAME = 100
DAY_MS = 24 * 3600 * 1000


@dataclass
class Namespaces:
    table: OwnershipTable
    gateway: Any  # its idempotent producer writes registrations (created when the app starts)
    prefix: str
    default_retention_ms: int

    def known(self, name: str) -> bool:
        return name == DEFAULT_NAMESPACE or self.table.namespace(name) is not None

    def search_attributes(self, name: str) -> dict[str, str]:
        """The namespace's registered custom search attributes, name -> type."""
        return self.table.search_attributes(name)

    def describe(self, name: str) -> dict[str, Any] | None:
        if name == DEFAULT_NAMESPACE:
            return {"name": name, "retention_ms": self.default_retention_ms, "description": "the default namespace",
                    "owner_email": "", "created_at_ms": 0}
        return self.table.namespace(name)


NAMESPACES = web.AppKey("namespaces", Namespaces)


def config_for(table: OwnershipTable, base: Config) -> Any:
    """The processor's per-namespace settings: the base config with the namespace's retention, its registered
    search attributes (so the core refuses unregistered ones and wrong types), the cluster's rate-limited task
    queues (whose activity tasks go through the rate limiter) and its task queues' current builds (worker
    versioning: the core routes each task by them at dispatch)."""
    from dataclasses import replace

    cache: dict[tuple[str, int, frozenset[tuple[str, str]], frozenset[str], int], Config] = {}

    def lookup(namespace: str) -> Config:
        record = table.namespace(namespace)
        retention = base.retention_ms if record is None else int(record["retention_ms"])  # type: ignore[call-overload]
        registry = table.search_attributes(namespace)
        limited = table.rate_limited_queues()
        # worker versioning: where each queue's tasks go now (read before the queues, so a change meanwhile misses)
        changes = table.deployment_changes
        key = (namespace, retention, frozenset(registry.items()), limited, changes)
        found = cache.get(key)
        if found is None:
            deployments = table.deployments(namespace)
            found = cache[key] = replace(base, retention_ms=retention, search_attributes=registry,
                                         rate_limited_queues=limited, deployments=deployments or None)
        return found

    return lookup


async def register(request: web.Request) -> web.Response:
    spaces = request.app[NAMESPACES]
    try:
        body = await request.json()
    except ValueError as exc:
        return error(400, "invalid_argument", f"the body is not JSON: {exc}")
    if not isinstance(body, dict):
        return error(400, "invalid_argument", "the body must be a JSON object")
    name = body.get("name")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or "/" in name or name.strip() != name:
        return error(400, "invalid_argument", f"name must be 1-{MAX_NAME} characters without '/' or surrounding "
                     "spaces", field="name")
    days, ms = body.get("retention_days"), body.get("retention_ms")
    retention = ms if isinstance(ms, int) and not isinstance(ms, bool) else (
        days * DAY_MS if isinstance(days, int | float) and not isinstance(days, bool) else None)
    if retention is None or not MIN_RETENTION_MS <= retention <= MAX_RETENTION_MS:  # also NaN and infinity
        return error(400, "invalid_argument", f"retention_days (or retention_ms, {MIN_RETENTION_MS} to "
                     f"{MAX_RETENTION_MS}) is required", field="retention_days")
    retention = int(retention)
    for text in ("description", "owner_email"):
        if not isinstance(body.get(text, ""), str):
            return error(400, "invalid_argument", f"{text} must be a string", field=text)
    if spaces.known(name):
        return error(409, "already_exists", f"namespace {name!r} is already registered")
    record = {"name": name, "retention_ms": retention, "description": body.get("description", ""),
              "owner_email": body.get("owner_email", ""), "created_at_ms": time.time_ns() // 1_000_000}
    producer = spaces.gateway.producer
    producer.produce(topic_name(spaces.prefix, Topic.CLUSTER), codec.encode(wire.NAMESPACE, record),
                     f"namespace/{name}".encode(), partition=0)
    await asyncio.get_running_loop().run_in_executor(None, producer.flush, 10)
    deadline = time.monotonic() + 10
    while spaces.table.namespace(name) is None:  # visible to this process's table before answering
        if time.monotonic() > deadline:
            return error(503, "unavailable", "the registration was written but not read back in time")
        await asyncio.sleep(0.05)
    found = spaces.table.namespace(name)
    status = 201 if found == record else 409  # a racing registration of the same name won
    return web.json_response(found, status=status) if status == 201 else \
        error(409, "already_exists", f"namespace {name!r} was registered concurrently")


async def list_namespaces(request: web.Request) -> web.Response:
    spaces = request.app[NAMESPACES]
    registered = [spaces.describe(DEFAULT_NAMESPACE), *sorted(spaces.table.namespaces().values(),
                                                              key=lambda r: str(r["name"]))]
    return web.json_response({"namespaces": registered})


async def describe(request: web.Request) -> web.Response:
    found = request.app[NAMESPACES].describe(request.match_info["namespace"])
    if found is None:
        return error(404, "namespace_not_found", f"no namespace {request.match_info['namespace']!r}; register it "
                     "with POST /api/v1/namespaces or `ostinato namespace register`")
    return web.json_response(found)


def unknown_namespace(request: web.Request) -> web.Response | None:
    """The 404 for a request naming a namespace nobody registered (None when it is known, or when the app does
    not track namespaces)."""
    spaces = request.app.get(NAMESPACES)
    name = request.match_info.get("namespace")
    if spaces is None or name is None or spaces.known(name):
        return None
    return error(404, "namespace_not_found", f"no namespace {name!r}; register it first (`ostinato namespace "
                 "register`)")


def install(app: web.Application, spaces: Namespaces) -> None:
    app[NAMESPACES] = spaces
    app.router.add_post("/api/v1/namespaces", register)
    app.router.add_get("/api/v1/namespaces", list_namespaces)
    app.router.add_get("/api/v1/namespaces/{namespace}", describe)
    from ostinato.services.frontend import deployments_api, search_attributes_api  # they build on this module

    search_attributes_api.install(app)
    deployments_api.install(app)
