"""The web UI's routes (issue 20): pages under `/ui/` and HTML parts under `/ui-parts/`.

A page is the layout and the parameters its URL names, nothing read from the cluster, so it is served without a
token (a browser cannot send a bearer token on a navigation); htmx then loads its parts with the token the user
gave, and the parts sit behind the API's own auth middleware (their routes name the namespace as the API's do).
Each part is filled from the HTTP API through `ApiClient`, never from the stores.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web

from ostinato.schemas import codec
from ostinato.services.frontend.ui import present
from ostinato.services.frontend.ui.api_client import Answer, ApiClient

HERE = Path(__file__).parent
HTMX = "htmx-2.0.11.min.js"  # npm htmx.org@2.0.11 (0BSD, see static/htmx-LICENSE.txt), vendored: no build step
PAGES, PARTS = "/ui", "/ui-parts"
LIST_PAGE_SIZE = 50
HISTORY_PAGE_SIZE = 200  # rows per page of the history table; the API serves up to 1,000
TIMELINE_BARS = 40  # a compact timeline: a run that fans out to hundreds of timers shows its first 40
DOWNLOAD_PAGE_SIZE = 1000
CHILD_EVENTS_PAGE = 1000  # child events read for the children table (about three per child)
CHAIN_LIMIT = 20  # runs of a continue-as-new chain shown each way from the one on the page
ACTIONS = ("signal", "query", "update", "cancel", "terminate")
UPDATE_WAIT_MS = 10_000  # the page waits this long for an update to complete, then says it is still running

API = web.AppKey("ui_api", ApiClient)
TEMPLATES = web.AppKey("ui_templates", jinja2.Environment)
AUTH_ON = web.AppKey("ui_auth_on", bool)


def q(value: Any) -> str:
    """One path segment: workflow ids may hold '/' and any other character."""
    return quote(str(value), safe="")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(q=q, when=present.when, duration=present.duration, pretty=present.pretty,
                       value=present.payload_value, values=present.payload_values, payload_map=present.payload_map)
    env.globals.update(PAGES=PAGES, PARTS=PARTS, HTMX=HTMX, STATUSES=present.STATUSES)
    return env


def render(request: web.Request, template: str, http_status: int = 200, **context: Any) -> web.Response:
    """`template` with `context` (whose `status` is a run's or a filter's, hence `http_status` for the answer's)."""
    text = request.app[TEMPLATES].get_template(template).render(auth_on=request.app[AUTH_ON], **context)
    response = web.Response(text=text, status=http_status, content_type="text/html")
    if template.startswith("parts/"):
        response.headers["Cache-Control"] = "no-store"  # parts hold cluster data read with the user's token
    return response


def failed(request: web.Request, answer: Answer, what: str) -> web.Response:
    """The API's error, its own message shown as it is, with its status (the page swaps it in all the same). A 503
    is a shard moving between owners or Kafka away for a moment (the API says so with `Retry-After`): the part
    asks again by itself after a second, so a page opened during a rebalance fills in once it is over."""
    return render(request, "parts/error.html", http_status=answer.status, what=what, answer=answer,
                  retry_url=request.path_qs if answer.status == 503 else "")


def _api_base(request: web.Request) -> str:
    return f"/api/v1/namespaces/{q(request.match_info['namespace'])}"


def _run_base(request: web.Request) -> str:
    return f"{_api_base(request)}/workflows/{q(request.match_info['workflow_id'])}"


# -- pages: open, no data -------------------------------------------------------------------------------------------

async def home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound(f"{PAGES}/namespaces/default/workflows")


async def workflows_page(request: web.Request) -> web.Response:
    params = {k: request.query.get(k, "") for k in ("query", "status", "next_page_token")}
    return render(request, "workflows.html", ns=request.match_info["namespace"], section="workflows", **params)


async def run_page(request: web.Request) -> web.Response:
    return render(request, "run.html", ns=request.match_info["namespace"], wf=request.match_info["workflow_id"],
                  run_id=request.query.get("run_id", ""), section="workflows")


async def task_queue_page(request: web.Request) -> web.StreamResponse:
    name = request.match_info.get("task_queue") or request.query.get("task_queue", "").strip()
    ns = request.match_info["namespace"]
    if "task_queue" not in request.match_info:  # the navigation's lookup form
        raise web.HTTPFound(f"{PAGES}/namespaces/{q(ns)}/task-queues/{q(name)}" if name else
                            f"{PAGES}/namespaces/{q(ns)}/workflows")
    return render(request, "task_queue.html", ns=ns, task_queue=name, section="task-queues")


async def namespaces_page(request: web.Request) -> web.Response:
    return render(request, "namespaces.html", ns=request.query.get("ns", "default"), section="namespaces")


async def cluster_page(request: web.Request) -> web.Response:
    return render(request, "cluster.html", ns=request.query.get("ns", "default"), section="cluster")


# -- parts: behind the API's auth, filled from the API ---------------------------------------------------------------

async def workflows_part(request: web.Request) -> web.Response:
    """The list: counts by status for the query, then one page of the runs matching it and the chosen status."""
    api, base = request.app[API], _api_base(request)
    query, status = request.query.get("query", ""), request.query.get("status", "")
    token = request.query.get("next_page_token", "")
    where = present.without_order(query)
    listing = {"query": present.status_query(query, status), "page_size": str(LIST_PAGE_SIZE)}
    if token:
        listing["next_page_token"] = token
    listed, total, *counts = await asyncio.gather(
        api.get(request, f"{base}/workflows", listing),
        api.get(request, f"{base}/workflow-count", {"query": where}),
        *(api.get(request, f"{base}/workflow-count", {"query": present.status_query(where, name)})
          for name, _ in present.STATUSES))
    if not listed.ok:
        return failed(request, listed, "The query was refused" if listed.status == 400 else "Listing failed")
    by_status = {name: c.body["count"] if c.ok else None for (name, _), c in zip(present.STATUSES, counts,
                                                                                 strict=True)}
    return render(request, "parts/workflows.html", ns=request.match_info["namespace"], query=query, status=status,
                  executions=listed.body["executions"], next_page_token=listed.body["next_page_token"],
                  total=total.body["count"] if total.ok else None, counts=by_status, token=token)


async def run_part(request: web.Request) -> web.Response:
    """The run: summary, input, outcome, what it waits for, memo and search attributes."""
    api, base = request.app[API], _run_base(request)
    named = request.query.get("run_id", "")
    state = await api.get(request, base, {"run_id": named} if named else None)
    if not state.ok:
        return failed(request, state, "This run cannot be shown")
    run = state.body
    params = {"run_id": run["run_id"]}
    first, closing = await asyncio.gather(api.get(request, f"{base}/history", {**params, "page_size": "1"}),
                                          api.get(request, f"{base}/history", {**params, "filter": "close"}))
    started = first.body["events"][0]["attributes"] if first.ok and first.body["events"] else {}
    close = closing.body["events"][0] if closing.ok and closing.body["events"] else None
    response = render(request, "parts/run.html", ns=request.match_info["namespace"],
                      wf=request.match_info["workflow_id"], run=run, started=started, close=close,
                      close_attrs=(close or {}).get("attributes") or {},
                      failure_chain=present.failure_chain(((close or {}).get("attributes") or {}).get("failure")),
                      now_ms=time.time_ns() // 1_000_000, named_run=named, pretty=present.pretty,
                      children_mark=present.children_mark(run.get("children")))
    if request.query.get("polling"):  # the page watches a running run: its history table follows what happens
        if close is not None:
            response.headers["HX-Trigger"] = "ostinato-run-changed"
        else:
            grew = request.query.get("events") != str(run["next_event_id"])
            # The children table scans the whole history: reload it at once only when a child started or closed.
            moved = request.query.get("children", "") != present.children_mark(run.get("children"))
            triggers = ["ostinato-history-grew"] * grew + ["ostinato-children-changed"] * moved
            if triggers:
                response.headers["HX-Trigger"] = ", ".join(triggers)
    return response


async def children_part(request: web.Request) -> web.Response:
    """Every child of the run, finished ones too, from its history's child events (state keeps only open ones)."""
    api, base = request.app[API], _run_base(request)
    params = {"filter": "children", "page_size": str(CHILD_EVENTS_PAGE)}
    if request.query.get("run_id"):
        params["run_id"] = request.query["run_id"]
    page = await api.get(request, f"{base}/history", params)
    if not page.ok:
        return failed(request, page, "The children cannot be read")
    return render(request, "parts/children.html", ns=request.match_info["namespace"],
                  children=present.children(page.body["events"]), more=page.body["next_page_token"] != "")


async def chain_part(request: web.Request) -> web.Response:
    """The run's continue-as-new chain: up to CHAIN_LIMIT runs before it (each run's state names the one it
    continued) and after it (each closing CONTINUED_AS_NEW event names the next run)."""
    api, base = request.app[API], _run_base(request)
    named = request.query.get("run_id", "")
    state = await api.get(request, base, {"run_id": named} if named else None)
    if not state.ok:
        return failed(request, state, "The run's chain cannot be read")
    run = state.body
    (before, more_before), (after, more_after) = await asyncio.gather(_runs_before(request, run),
                                                                      _runs_after(request, run))
    return render(request, "parts/chain.html", ns=request.match_info["namespace"],
                  wf=request.match_info["workflow_id"], runs=[*reversed(before), run, *after], current=run["run_id"],
                  more_before=more_before, more_after=more_after, limit=CHAIN_LIMIT)


async def _runs_before(request: web.Request, run: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The runs `run` continued from, nearest first, and why the walk stopped short (more, or gone) if it did."""
    api, base, runs = request.app[API], _run_base(request), []
    while run.get("continued_from_run_id"):
        if len(runs) == CHAIN_LIMIT:
            return runs, "more"
        answer = await api.get(request, base, {"run_id": run["continued_from_run_id"]})
        if not answer.ok:  # deleted after its retention (404), or unreadable now
            return runs, "gone" if answer.status == 404 else answer.message
        run = answer.body
        runs.append(run)
    return runs, ""


async def _runs_after(request: web.Request, run: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The runs that continued `run`, nearest first, and why the walk stopped short if it did."""
    api, base, runs = request.app[API], _run_base(request), []
    while run.get("status") == "CONTINUED_AS_NEW":
        if len(runs) == CHAIN_LIMIT:
            return runs, "more"
        closing = await api.get(request, f"{base}/history", {"run_id": run["run_id"], "filter": "close"})
        events = closing.body.get("events") if closing.ok else None
        following = ((events or [{}])[0].get("attributes") or {}).get("new_execution_run_id")
        if not following:
            return runs, closing.message if not closing.ok else ""
        answer = await api.get(request, base, {"run_id": following})
        if not answer.ok:
            return runs, "gone" if answer.status == 404 else answer.message
        run = answer.body
        runs.append(run)
    return runs, ""


async def history_part(request: web.Request) -> web.Response:
    """A page of the history as table rows (and the timeline of the first page); later pages append rows."""
    api, base = request.app[API], _run_base(request)
    token = request.query.get("next_page_token", "")
    params = {"page_size": str(HISTORY_PAGE_SIZE), **({"next_page_token": token} if token else {})}
    if request.query.get("run_id"):
        params["run_id"] = request.query["run_id"]
    page = await api.get(request, f"{base}/history", params)
    if not page.ok:
        return failed(request, page, "The history cannot be read")
    events = page.body["events"]
    rows = [(e, present.event_summary(e), present.pretty(present.attributes(e))) for e in events]
    bars = [] if token else present.timeline(events, time.time_ns() // 1_000_000)
    return render(request, "parts/history.html", ns=request.match_info["namespace"],
                  wf=request.match_info["workflow_id"], run_id=page.body["run_id"], rows=rows, more=token != "",
                  next_page_token=page.body["next_page_token"],
                  bars=bars[:TIMELINE_BARS], more_bars=max(0, len(bars) - TIMELINE_BARS))


async def history_download(request: web.Request) -> web.Response:
    """The whole history as the JSON file `ostinato replay` reads (`Replayer.replay_file`), written by the SDK's own
    `save_history` from the stored Avro records, so unions and bytes come back exactly."""
    from ostinato.sdk.replayer import save_history

    api, base = request.app[API], _run_base(request)
    run_id, token = request.query.get("run_id", ""), "1"
    events: list[dict[str, Any]] = []
    while token:
        params = {"format": "avro", "page_size": str(DOWNLOAD_PAGE_SIZE), "next_page_token": token,
                  **({"run_id": run_id} if run_id else {})}
        page = await api.get(request, f"{base}/history", params)
        if not page.ok:
            return web.json_response(page.body, status=page.status)
        run_id = page.body["run_id"]
        events.extend(codec.decode(base64.b64decode(e))[1] for e in page.body["events"])
        token = page.body["next_page_token"]
    workflow_id = request.match_info["workflow_id"]

    def written() -> bytes:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "history.json"
            save_history(path, workflow_id, run_id, events)
            return path.read_bytes()

    body = await asyncio.get_running_loop().run_in_executor(None, written)
    filename = f"{workflow_id}-{run_id}.json".replace('"', "_").replace("/", "_")
    return web.Response(body=body, content_type="application/json",
                        headers={"Content-Disposition": f'attachment; filename="{filename}"',
                                 "Cache-Control": "no-store"})


class _BadForm(ValueError):
    pass


def _json_args(text: str) -> list[Any]:
    """Arguments typed as JSON: an array is the argument list, any other value the one argument."""
    if not text.strip():
        return []
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _BadForm(f"the arguments are not JSON: {exc}") from None
    return value if isinstance(value, list) else [value]


async def action_part(request: web.Request) -> web.Response:
    """Signal, query, cancel or terminate the run, as the API does it; the page asked for confirmation first."""
    action = request.match_info["action"]
    form = await request.post()
    run_id = str(form.get("run_id", ""))
    body: dict[str, Any] = {"run_id": run_id} if run_id else {}
    try:
        if action == "signal":
            body.update(signal_name=str(form.get("signal_name", "")).strip(),
                        input=_json_args(str(form.get("args", ""))))
            if not body["signal_name"]:
                raise _BadForm("a signal needs a name")
        elif action == "update":
            name = str(form.get("update_name", "")).strip()
            if not name:
                raise _BadForm("an update needs a name")
            body.update(input=_json_args(str(form.get("args", ""))), wait_stage="COMPLETED",
                        timeout_ms=UPDATE_WAIT_MS)
        elif action == "query":
            body.update(query_type=str(form.get("query_type", "")).strip(), args=_json_args(str(form.get("args", ""))))
            if not body["query_type"]:
                raise _BadForm("a query needs a name")
        else:
            body["reason"] = str(form.get("reason", ""))
    except _BadForm as exc:
        return render(request, "parts/action.html", http_status=400, action=action, error=str(exc), answer=None)
    path = f"updates/{q(form.get('update_name', ''))}" if action == "update" else action
    answer = await request.app[API].post(request, f"{_run_base(request)}/{path}", body)
    result = present.pretty(answer.body.get("result")) if answer.ok and action == "query" else ""
    outcome = answer.body.get("outcome") if answer.ok and action == "update" else None
    if outcome is not None and "result" in outcome:
        result = present.pretty(outcome["result"])
    response = render(request, "parts/action.html", http_status=answer.status, action=action, error="", answer=answer,
                      result=result, outcome=outcome, stage=answer.body.get("stage", ""))
    if answer.ok and action != "query":
        response.headers["HX-Trigger"] = "ostinato-run-changed"  # the run and its history show what happened
    return response


async def task_queue_part(request: web.Request) -> web.Response:
    name = request.match_info["task_queue"]
    answer = await request.app[API].get(request, f"{_api_base(request)}/task-queues/{q(name)}")
    if not answer.ok:
        return failed(request, answer, "The task queue cannot be described")
    # worker versioning: the queue's current and ramping build (absent when the server tracks no namespaces)
    versioning = await request.app[API].get(request, f"{_api_base(request)}/task-queues/{q(name)}/versioning")
    return render(request, "parts/task_queue.html", tq=answer.body, ns=request.match_info["namespace"],
                  versioning=versioning.body if versioning.ok else None)


async def namespaces_part(request: web.Request) -> web.Response:
    answer = await request.app[API].get(request, "/api/v1/namespaces")
    if not answer.ok:
        return failed(request, answer, "The namespaces cannot be listed")
    return render(request, "parts/namespaces.html", namespaces=answer.body["namespaces"])


async def cluster_part(request: web.Request) -> web.Response:
    """Settings, brokers, shards with their owners and processor lag, and the visibility lag. Brokers and lag come
    from Kafka: when it does not answer, their sections say so and the rest still shows."""
    api = request.app[API]
    cluster, owners, brokers, lag = await asyncio.gather(
        api.get(request, "/api/v1/cluster"), api.get(request, "/api/v1/cluster/owners"),
        api.get(request, "/api/v1/cluster/brokers"), api.get(request, "/api/v1/cluster/lag"))
    for answer in (cluster, owners):
        if not answer.ok:
            return failed(request, answer, "The cluster cannot be described")
    by_shard = {o["shard"]: o for o in owners.body["owners"]}
    shard_lag = {s["shard"]: s for s in lag.body["processor"]["shards"]} if lag.ok else {}
    shards = [(shard, by_shard.get(shard), shard_lag.get(shard)) for shard in range(cluster.body["shards"])]
    return render(request, "parts/cluster.html", cluster=cluster.body, shards=shards, brokers=brokers, lag=lag,
                  now_ms=time.time_ns() // 1_000_000)


def install(app: web.Application, api_url: str, *, auth_on: bool) -> None:
    """The UI on `app`: pages, parts and static files; `api_url` is where this server's API answers itself."""
    client = ApiClient(api_url)
    app[API] = client
    app[TEMPLATES] = _environment()
    app[AUTH_ON] = auth_on
    app.on_startup.append(client.start)
    app.on_cleanup.append(client.close)
    router = app.router
    router.add_get("/", home)
    router.add_get(PAGES + "/namespaces", namespaces_page)
    router.add_get(PAGES + "/cluster", cluster_page)
    router.add_get(PAGES + "/namespaces/{namespace}/workflows", workflows_page)
    router.add_get(PAGES + "/namespaces/{namespace}/workflows/{workflow_id}", run_page)
    router.add_get(PAGES + "/namespaces/{namespace}/task-queues", task_queue_page)
    router.add_get(PAGES + "/namespaces/{namespace}/task-queues/{task_queue}", task_queue_page)
    router.add_static(PAGES + "/static", HERE / "static", append_version=False)
    one = PARTS + "/namespaces/{namespace}/workflows/{workflow_id}"
    router.add_get(PARTS + "/namespaces", namespaces_part)
    router.add_get(PARTS + "/cluster", cluster_part)
    router.add_get(PARTS + "/namespaces/{namespace}/workflows", workflows_part)
    router.add_get(one, run_part)
    router.add_get(one + "/children", children_part)
    router.add_get(one + "/chain", chain_part)
    router.add_get(one + "/history", history_part)
    router.add_get(one + "/history.json", history_download)
    router.add_post(one + "/{action:" + "|".join(ACTIONS) + "}", action_part)
    router.add_get(PARTS + "/namespaces/{namespace}/task-queues/{task_queue}", task_queue_part)
