"""Custom search attributes of a namespace: add and list (Temporal's `operator search-attribute create|list`).

Each attribute is a `SearchAttribute` record in `<prefix>.cluster` keyed `search_attribute/<namespace>/<name>`, as
namespaces are: durable in Kafka, read back by every frontend and processor (`OwnershipTable`), the first
registration of a name wins. Processors pass a namespace's attributes to the core, which refuses unregistered ones
and values of the wrong type; the visibility API types queries with them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from ostinato.connectors.query import ENGINE_ATTRIBUTES, SYSTEM_ATTRIBUTES
from ostinato.schemas import codec, wire
from ostinato.schemas.keys import join_key
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.frontend.http import error
from ostinato.services.frontend.namespaces_api import NAMESPACES, Namespaces, unknown_namespace
from ostinato.streams.search_attributes import name_problem, type_name

MAX_PER_NAMESPACE = 100  # Temporal's default limit is of this order; each one is a column every query may use


def registry(app: web.Application, namespace: str) -> dict[str, str] | None:
    """A namespace's custom attributes for typing queries, or None when the app does not track namespaces."""
    spaces = app.get(NAMESPACES)
    return None if spaces is None else spaces.search_attributes(namespace)


def _listing(spaces: Namespaces, namespace: str) -> dict[str, Any]:
    system = {name: attr.type.value for name, attr in SYSTEM_ATTRIBUTES.items()}
    system.update({name: sa_type.value for name, sa_type in ENGINE_ATTRIBUTES.items()})  # BuildIds
    return {"namespace": namespace, "custom_attributes": dict(sorted(spaces.search_attributes(namespace).items())),
            "system_attributes": system}


async def add(request: web.Request) -> web.Response:
    """Register attributes: `{"search_attributes": {"CustomerId": "Keyword", ...}}`. Adding one again with the same
    type is a no-op; with another type it is a 409."""
    missing = unknown_namespace(request)
    if missing is not None:
        return missing
    spaces, namespace = request.app[NAMESPACES], request.match_info["namespace"]
    try:
        body = await request.json()
    except ValueError as exc:
        return error(400, "invalid_argument", f"the body is not JSON: {exc}")
    wanted = body.get("search_attributes") if isinstance(body, dict) else None
    if not isinstance(wanted, dict) or not wanted:
        return error(400, "invalid_argument", 'the body must be {"search_attributes": {"<name>": "<type>", ...}} '
                     "with types Keyword, Text, Int, Double, Bool, Datetime or KeywordList", field="search_attributes")
    current = spaces.search_attributes(namespace)
    new: dict[str, str] = {}
    for name, raw_type in wanted.items():
        if (problem := name_problem(name)) is not None:
            return error(400, "invalid_argument", problem, field=f"search_attributes.{name}")
        sa_type = type_name(raw_type) if isinstance(raw_type, str) else None
        if sa_type is None:
            return error(400, "invalid_argument", f"search attribute {name!r}: unknown type {raw_type!r}; expected "
                         "Keyword, Text, Int, Double, Bool, Datetime or KeywordList",
                         field=f"search_attributes.{name}")
        if current.get(name, sa_type) != sa_type:
            return error(409, "already_exists", f"search attribute {name!r} is already registered in namespace "
                         f"{namespace!r} as {current[name]}; a type never changes (use another name)")
        if name not in current:
            new[name] = sa_type
    if len(current) + len(new) > MAX_PER_NAMESPACE:
        return error(400, "invalid_argument", f"at most {MAX_PER_NAMESPACE} custom search attributes per namespace")
    if new:
        producer = spaces.gateway.producer
        now_ms = time.time_ns() // 1_000_000
        for name, sa_type in new.items():
            record = {"namespace": namespace, "name": name, "type": sa_type, "created_at_ms": now_ms}
            producer.produce(topic_name(spaces.prefix, Topic.CLUSTER), codec.encode(wire.SEARCH_ATTRIBUTE, record),
                             join_key("search_attribute", namespace, name).encode(), partition=0)
        await asyncio.get_running_loop().run_in_executor(None, producer.flush, 10)
        deadline = time.monotonic() + 10
        while not set(new) <= set(spaces.search_attributes(namespace)):  # read back before answering
            if time.monotonic() > deadline:
                return error(503, "unavailable", "the registration was written but not read back in time")
            await asyncio.sleep(0.05)
    registered = spaces.search_attributes(namespace)
    raced = sorted(name for name, sa_type in new.items() if registered[name] != sa_type)
    if raced:
        return error(409, "already_exists", f"search attributes {', '.join(raced)} were registered concurrently "
                     "with another type")
    return web.json_response(_listing(spaces, namespace))


async def list_attributes(request: web.Request) -> web.Response:
    """The namespace's custom attributes and the built-in ones, name -> type."""
    missing = unknown_namespace(request)
    if missing is not None:
        return missing
    return web.json_response(_listing(request.app[NAMESPACES], request.match_info["namespace"]))


def install(app: web.Application) -> None:
    app.router.add_post("/api/v1/namespaces/{namespace}/search-attributes", add)
    app.router.add_get("/api/v1/namespaces/{namespace}/search-attributes", list_attributes)
