"""Archival inside `ostinato server`: the S3 connector wired to this server's read API, the archived-history
endpoint, and the settings that turn it on (`--archive-uri s3://bucket/prefix`).

The archiver reads closed histories through the server's own HTTP API rather than from a local store: a run's
shard may be owned by another process, and the API already routes a read to the owner (307) wherever it is.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from ostinato.connectors.archive import ArchiveError, ArchiveNotFoundError, S3Archive
from ostinato.connectors.archiver import Archiver, NotReady
from ostinato.services.frontend.http import error, jsonable

log = logging.getLogger("ostinato.archival")
ARCHIVE = web.AppKey("archive", S3Archive)
PAGE = 1000


class HistoryOverApi:
    """`HistorySource` for the archiver: pages of `GET .../history?format=avro` from a server of the cluster."""

    def __init__(self, base_url: str, token: str = "", timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        # The server calls itself on its advertised address; with TLS that certificate may not name loopback.
        self._ssl = ssl._create_unverified_context() if base_url.startswith("https") else None

    def __call__(self, namespace: str, workflow_id: str, run_id: str) -> list[bytes] | None:
        events: list[bytes] = []
        token = "1"
        while token:
            query = urlencode({"run_id": run_id, "format": "avro", "page_size": PAGE, "next_page_token": token})
            url = (f"{self.base_url}/api/v1/namespaces/{quote(namespace, safe='')}/workflows/"
                   f"{quote(workflow_id, safe='')}/history?{query}")
            page = self._get(url)
            if page is None:
                return None
            events.extend(base64.b64decode(e) for e in page["events"])
            token = page["next_page_token"]
        return events

    def _get(self, url: str) -> dict[str, Any] | None:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"} if self.token else {})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._ssl) as response:
                body: dict[str, Any] = json.loads(response.read())
                return body
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code == 503:  # the shard is moving between owners
                raise NotReady(f"history of {url} unavailable for now") from None
            raise OSError(f"GET {url}: HTTP {exc.code} {exc.read()[:300]!r}") from None


class OutcomeOverApi(HistoryOverApi):
    """`OutcomeSource` of the outcomes streams (`connectors/outcomes.py`): `GET .../result?follow=false` of a closed
    run from a server of the cluster (redirects to the owner followed); None when the run no longer exists."""

    def __call__(self, namespace: str, workflow_id: str, run_id: str) -> dict[str, Any] | None:  # type: ignore[override]
        query = urlencode({"run_id": run_id, "follow": "false", "timeout_ms": 10_000})
        return self._get(f"{self.base_url}/api/v1/namespaces/{quote(namespace, safe='')}/workflows/"
                         f"{quote(workflow_id, safe='')}/result?{query}")


async def archived_history(request: web.Request) -> web.Response:
    """A run's history from its archive (after retention deleted it from the cluster): the JSON of `/history`."""
    archive = request.app.get(ARCHIVE)
    if archive is None:
        return error(404, "archival_not_configured", "this server does not archive: start it with --archive-uri "
                     "s3://bucket[/prefix] (and the same S3 settings as the archiver) to read archived runs")
    ns, wid = request.match_info["namespace"], request.match_info["workflow_id"]
    run_id = request.query.get("run_id", "")
    loop = asyncio.get_running_loop()
    try:
        found = await loop.run_in_executor(None, archive.find, ns, wid, run_id)
        if not found:
            return error(404, "not_found", f"no archived run of workflow {wid!r} in namespace {ns!r}"
                         + (f" with run {run_id!r}" if run_id else ""))
        entry = found[0]
        run = await loop.run_in_executor(None, archive.read, entry.uri)
    except ArchiveNotFoundError as exc:
        return error(404, "not_found", str(exc))
    except ArchiveError as exc:
        return error(502, "archive_unavailable", str(exc))
    return web.json_response({"run_id": run.run_id, "uri": entry.uri, "workflow_type": run.workflow_type,
                              "status": run.status, "close_time_ms": run.close_time_ms,
                              "events": jsonable(run.events), "next_page_token": ""})


def add_routes(app: web.Application) -> None:
    """The archived-history route; it answers from the archive once `install` gave the app one."""
    app.router.add_get("/api/v1/namespaces/{namespace}/workflows/{workflow_id}/archived-history", archived_history)


def install(app: web.Application, archiver: Archiver, archive: S3Archive,
            registry: CollectorRegistry = REGISTRY) -> None:
    """Serve archived histories and run `archiver` with the app."""
    app[ARCHIVE] = archive
    gauge = Gauge("ostinato_archiver_archived_runs", "Closed runs this server archived since it started",
                  registry=registry)
    gauge.set_function(lambda: archiver.archived)
    retries = Gauge("ostinato_archiver_retries", "Archive attempts that failed and were retried", registry=registry)
    retries.set_function(lambda: archiver.retries)

    async def started(app: web.Application) -> None:
        archiver.start()
        log.info("archiving closed runs to %s", archive.uri)

    async def stopped(app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, archiver.stop)
        for g in (gauge, retries):
            registry.unregister(g)

    app.on_startup.append(started)
    app.on_cleanup.append(stopped)
