"""List and count workflows (`GET .../workflows?query=`, `GET .../workflow-count?query=`) from the visibility
store, which a feeder keeps in step with `<prefix>.visibility` (DESIGN.md §7): OpenSearch when the server is given
its URL, else the embedded SQLite store. Both answer the same query language with the same results."""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from ostinato.connectors.query import QueryError
from ostinato.connectors.visibility_opensearch import (
    OpenSearchUnavailableError,
    OpenSearchVisibilityFeeder,
    OpenSearchVisibilityStore,
)
from ostinato.connectors.visibility_sqlite import InvalidPageTokenError, SqliteVisibilityFeeder, SqliteVisibilityStore
from ostinato.services.frontend.http import error, jsonable
from ostinato.services.frontend.search_attributes_api import registry

log = logging.getLogger("ostinato.visibility")
DEFAULT_PAGE_SIZE = 100


class VisibilityStore(Protocol):
    def count(self, namespace: str, query: str = "", search_attributes: Mapping[str, str] | None = None) -> int: ...

    def list(self, namespace: str, query: str = "", page_size: int = 100, next_page_token: bytes | None = None,
             search_attributes: Mapping[str, str] | None = None) -> tuple[list[dict[str, Any]], bytes | None]: ...


class Feeder(Protocol):
    kind: str

    def start(self, timeout: float = 30.0) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...

    def positions(self, timeout: float = 5.0) -> dict[int, int]:
        """The next offset of `<prefix>.visibility` the store will apply, per partition (-1: not known)."""
        ...


STORE = web.AppKey("visibility", VisibilityStore)
FEEDER = web.AppKey("visibility_feeder", Feeder)  # read by the cluster's lag figures (`cluster_api.py`)


def opensearch_index(prefix: str) -> str:
    """One index per cluster; OpenSearch index names are lower case."""
    return f"{prefix.lower()}-visibility"


def _unavailable(exc: OpenSearchUnavailableError) -> web.Response:
    return error(503, "visibility_unavailable", f"the visibility store is unavailable right now: {exc}")


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
        namespace = request.match_info["namespace"]
        types = registry(request.app, namespace)  # the namespace's custom attributes type the query
        rows, next_token = await asyncio.get_running_loop().run_in_executor(
            None, lambda: store.list(namespace, query, page_size, token, types))
    except QueryError as exc:
        return _query_error(exc)
    except OpenSearchUnavailableError as exc:
        return _unavailable(exc)
    except (InvalidPageTokenError, ValueError) as exc:
        return error(400, "invalid_argument", str(exc))
    return web.json_response({
        "executions": jsonable(rows),
        "next_page_token": "" if next_token is None else base64.urlsafe_b64encode(next_token).decode()})


async def count_workflows(request: web.Request) -> web.Response:
    store = request.app[STORE]
    try:
        namespace = request.match_info["namespace"]
        types = registry(request.app, namespace)
        count = await asyncio.get_running_loop().run_in_executor(
            None, lambda: store.count(namespace, request.query.get("query", ""), types))
    except QueryError as exc:
        return _query_error(exc)
    except OpenSearchUnavailableError as exc:
        return _unavailable(exc)
    return web.json_response({"count": count})


def install(app: web.Application, bootstrap: str, prefix: str, path: Path, opensearch_url: str = "",
            registry: CollectorRegistry = REGISTRY) -> None:
    """OpenSearch at `opensearch_url` when given, else the SQLite store at `path` (rebuildable: delete it and the
    feeder replays the topic from offset 0)."""
    store: SqliteVisibilityStore | OpenSearchVisibilityStore
    feeder: Feeder
    gauges: list[Gauge] = []
    if opensearch_url:
        store = OpenSearchVisibilityStore(opensearch_url, opensearch_index(prefix))
        os_feeder = feeder = OpenSearchVisibilityFeeder(bootstrap, prefix, store)
        lag = Gauge("ostinato_visibility_lag_records", "Visibility records not yet indexed in OpenSearch",
                    registry=registry)
        lag.set_function(lambda: _lag(os_feeder))
        down = Gauge("ostinato_visibility_store_unavailable", "1 while OpenSearch refuses writes (backing off)",
                     registry=registry)
        down.set_function(lambda: float(os_feeder.unavailable))
        gauges += [lag, down]
        log.info("visibility in OpenSearch at %s, index %s", opensearch_url, opensearch_index(prefix))
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        store = SqliteVisibilityStore(path)
        feeder = SqliteVisibilityFeeder(bootstrap, prefix, store)
    app[STORE] = store
    app[FEEDER] = feeder

    async def started(app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, feeder.start)

    async def stopped(app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, feeder.stop)
        store.close()
        for gauge in gauges:
            registry.unregister(gauge)

    app.on_startup.append(started)
    app.on_cleanup.append(stopped)
    app.router.add_get("/api/v1/namespaces/{namespace}/workflows", list_workflows)
    app.router.add_get("/api/v1/namespaces/{namespace}/workflow-count", count_workflows)


def _lag(feeder: OpenSearchVisibilityFeeder) -> float:
    try:
        return float(feeder.lag(timeout=2.0))
    except Exception:  # noqa: BLE001 - a scrape must not fail because the broker is slow; NaN says "unknown"
        return float("nan")
