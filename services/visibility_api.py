"""List and count workflows (`GET .../workflows?query=`, `GET .../workflow-count?query=`) from the embedded
visibility store, which a feeder keeps in step with `<prefix>.visibility` (DESIGN.md §7)."""

from __future__ import annotations

import asyncio
import base64
import binascii
from pathlib import Path

from aiohttp import web

from ostinato.connectors.query import QueryError
from ostinato.connectors.visibility_sqlite import InvalidPageTokenError, SqliteVisibilityFeeder, SqliteVisibilityStore
from ostinato.services.reads import error, jsonable

STORE = web.AppKey("visibility", SqliteVisibilityStore)
DEFAULT_PAGE_SIZE = 100


def _query_error(exc: QueryError) -> web.Response:
    return error(400, "invalid_query", str(exc), position=exc.position, token=exc.token)


async def list_workflows(request: web.Request) -> web.Response:
    store = request.app[STORE]
    query = request.query.get("query", "")
    try:
        page_size = int(request.query.get("page_size", DEFAULT_PAGE_SIZE))
        raw = request.query.get("next_page_token", "")
        token = base64.urlsafe_b64decode(raw.encode()) if raw else None
    except (ValueError, binascii.Error):
        return error(400, "invalid_argument", "page_size must be a whole number and next_page_token a token from a "
                     "previous page")
    try:
        rows, next_token = await asyncio.get_running_loop().run_in_executor(
            None, lambda: store.list(request.match_info["namespace"], query, page_size, token))
    except QueryError as exc:
        return _query_error(exc)
    except (InvalidPageTokenError, ValueError) as exc:
        return error(400, "invalid_argument", str(exc))
    return web.json_response({
        "executions": jsonable(rows),
        "next_page_token": "" if next_token is None else base64.urlsafe_b64encode(next_token).decode()})


async def count_workflows(request: web.Request) -> web.Response:
    store = request.app[STORE]
    try:
        count = await asyncio.get_running_loop().run_in_executor(
            None, lambda: store.count(request.match_info["namespace"], request.query.get("query", "")))
    except QueryError as exc:
        return _query_error(exc)
    return web.json_response({"count": count})


def install(app: web.Application, bootstrap: str, prefix: str, path: Path) -> None:
    """The store at `path` (rebuildable: delete it and the feeder replays the topic from offset 0)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    store = SqliteVisibilityStore(path)
    feeder = SqliteVisibilityFeeder(bootstrap, prefix, store)
    app[STORE] = store

    async def started(app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, feeder.start)

    async def stopped(app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, feeder.stop)
        store.close()

    app.on_startup.append(started)
    app.on_cleanup.append(stopped)
    app.router.add_get("/api/v1/namespaces/{namespace}/workflows", list_workflows)
    app.router.add_get("/api/v1/namespaces/{namespace}/workflow-count", count_workflows)
