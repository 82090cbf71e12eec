"""`ostinato workflow ...`: drive workflows through the JSON API, readable tables by default, `-o json` for
scripts. Exit status 1 on an API error (its code and message printed), 2 when the server cannot be reached."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)
app = typer.Typer(help="Start, signal, query, cancel, terminate and inspect workflows.", no_args_is_help=True)

ServerOpt = Annotated[str, typer.Option("--server", envvar="OSTINATO_SERVER", help="The Ostinato API.")]
NamespaceOpt = Annotated[str, typer.Option("--namespace", "-n", envvar="OSTINATO_NAMESPACE")]
OutputOpt = Annotated[str, typer.Option("--output", "-o", help="table or json.")]
RunOpt = Annotated[str, typer.Option("--run-id", help="A specific run (default: the current one).")]
DEFAULT_SERVER = "http://127.0.0.1:7243"


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{body.get('code', status)}: {body.get('message', '')}")
        self.status = status
        self.body = body


def _call(server: str, method: str, path: str, body: Any = None, timeout: float = 70.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.rstrip("/") + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read())
        except ValueError:
            detail = {"code": str(exc.code), "message": exc.reason}
        raise ApiError(exc.code, detail) from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        err_console.print(f"[red]error:[/red] cannot reach the Ostinato API at {server}: {exc}. Is `ostinato dev` "
                          "or `ostinato server` running? (--server or OSTINATO_SERVER)", highlight=False)
        raise typer.Exit(2) from None


def _run(fn: Any) -> Any:
    try:
        return fn()
    except ApiError as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None


def _values(raw: list[str]) -> list[Any]:
    out = []
    for text in raw:
        try:
            out.append(json.loads(text))
        except ValueError:
            out.append(text)  # a bare word is a string: `--input Ada` means "Ada"
    return out


def _wf_path(namespace: str, workflow_id: str, suffix: str = "") -> str:
    return (f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}/workflows/"
            f"{urllib.parse.quote(workflow_id, safe='')}{suffix}")


def _show(value: Any, output: str) -> None:
    if output == "json":
        print(json.dumps(value, indent=2, default=str))
    elif isinstance(value, dict):
        table = Table(show_header=False, box=None)
        for key, item in value.items():
            table.add_row(f"[bold]{key}[/bold]", json.dumps(item, default=str) if isinstance(item, dict | list)
                          else str(item))
        console.print(table)
    else:
        console.print(value)


@app.command()
def start(
    workflow_type: Annotated[str, typer.Argument(help="The workflow type (its class name by default).")],
    workflow_id: Annotated[str, typer.Option("--id", help="The workflow id.")],
    task_queue: Annotated[str, typer.Option("--task-queue", "-q")],
    inputs: Annotated[list[str] | None, typer.Option("--input", "-i", help="An argument, as JSON (repeat).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Show progress until the result.")] = False,
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Start a workflow; with --wait, stream its history until it closes and print the result."""
    started = _run(lambda: _call(server, "POST", f"/api/v1/namespaces/{namespace}/workflows", {
        "workflow_id": workflow_id, "workflow_type": workflow_type, "task_queue": task_queue,
        "input": _values(inputs or [])}))
    if not wait:
        _show(started, output)
        return
    if output != "json":
        console.print(f"started {workflow_id} (run {started['run_id']})")
    seen = 0
    while True:
        path = _wf_path(namespace, workflow_id, f"/history?run_id={started['run_id']}&page_size=1000"
                                                f"&next_page_token={seen + 1}")
        page = _run(lambda path=path: _call(server, "GET", path))
        for event in page["events"]:
            seen = event["event_id"]
            if output != "json":
                console.print(f"  {_event_line(event)}", highlight=False)
        outcome = _run(lambda: _call(server, "GET", _wf_path(namespace, workflow_id, "/result?timeout_ms=1000")))\
            if _closed(page) else None
        if outcome is not None:
            _show(outcome, output)
            if outcome["status"] != "COMPLETED":
                raise typer.Exit(1)
            return
        time.sleep(0.3)


def _closed(page: dict[str, Any]) -> bool:
    return bool(page["events"]) and page["events"][-1]["event_type"].startswith("WORKFLOW_EXECUTION_") and \
        page["events"][-1]["event_type"] not in ("WORKFLOW_EXECUTION_STARTED", "WORKFLOW_EXECUTION_SIGNALED",
                                                 "WORKFLOW_EXECUTION_CANCEL_REQUESTED")


@app.command()
def signal(
    workflow_id: Annotated[str, typer.Argument()], name: Annotated[str, typer.Argument(help="The signal name.")],
    inputs: Annotated[list[str] | None, typer.Option("--input", "-i", help="An argument, as JSON (repeat).")] = None,
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Send a signal to a running workflow."""
    _show(_run(lambda: _call(server, "POST", _wf_path(namespace, workflow_id, "/signal"),
                             {"signal_name": name, "input": _values(inputs or [])})), output)


@app.command()
def query(
    workflow_id: Annotated[str, typer.Argument()], name: Annotated[str, typer.Argument(help="The query name.")],
    args: Annotated[list[str] | None, typer.Option("--arg", "-a", help="An argument, as JSON (repeat).")] = None,
    timeout_ms: Annotated[int, typer.Option("--timeout-ms")] = 10_000,
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Ask a running workflow a question (a worker answers)."""
    _show(_run(lambda: _call(server, "POST", _wf_path(namespace, workflow_id, "/query"),
                             {"query_type": name, "args": _values(args or []), "timeout_ms": timeout_ms})), output)


@app.command()
def cancel(workflow_id: Annotated[str, typer.Argument()], reason: Annotated[str, typer.Option()] = "",
           server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
           ) -> None:
    """Ask a workflow to cancel (it decides how)."""
    _show(_run(lambda: _call(server, "POST", _wf_path(namespace, workflow_id, "/cancel"), {"reason": reason})),
          output)


@app.command()
def terminate(workflow_id: Annotated[str, typer.Argument()], reason: Annotated[str, typer.Option()] = "",
              server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
              ) -> None:
    """End a workflow now, without running any more of its code."""
    _show(_run(lambda: _call(server, "POST", _wf_path(namespace, workflow_id, "/terminate"), {"reason": reason})),
          output)


@app.command()
def result(workflow_id: Annotated[str, typer.Argument()],
           timeout_ms: Annotated[int, typer.Option("--timeout-ms")] = 30_000,
           server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
           ) -> None:
    """Wait for the workflow to close (following continue-as-new) and print its outcome."""
    outcome = _run(lambda: _call(server, "GET", _wf_path(namespace, workflow_id, f"/result?timeout_ms={timeout_ms}")))
    _show(outcome, output)
    if outcome["status"] != "COMPLETED":
        raise typer.Exit(1)


@app.command()
def describe(workflow_id: Annotated[str, typer.Argument()], run_id: RunOpt = "",
             server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
             ) -> None:
    """The run's state: status, times, pending activities, timers and children."""
    query_string = f"?run_id={urllib.parse.quote(run_id)}" if run_id else ""
    state = _run(lambda: _call(server, "GET", _wf_path(namespace, workflow_id, query_string)))
    if output == "json":
        _show(state, output)
        return
    keys = ("workflow_id", "run_id", "workflow_type", "task_queue", "status", "start_time_ms", "close_time_ms",
            "next_event_id", "attempt")
    summary = {k: _when(state[k]) if k.endswith("_time_ms") else state[k] for k in keys if k in state}
    summary["pending activities"] = len(state.get("activities", []))
    summary["timers"] = len(state.get("timers", []))
    summary["children"] = len(state.get("children", []))
    _show(summary, output)


@app.command()
def show(workflow_id: Annotated[str, typer.Argument()], run_id: RunOpt = "",
         server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
         archived: Annotated[bool, typer.Option("--archived", help="Read the run from the S3 archive (after "
                                                "retention deleted it); the server needs --archive-uri.")] = False,
         ) -> None:
    """The run's history as a timeline."""
    events: list[dict[str, Any]] = []
    token = "" if archived else "1"
    if archived:
        suffix = "/archived-history" + (f"?run_id={urllib.parse.quote(run_id, safe='')}" if run_id else "")
        page = _run(lambda: _call(server, "GET", _wf_path(namespace, workflow_id, suffix)))
        events = page["events"]
        if output != "json":
            console.print(f"[dim]{page['uri']}[/dim]")
    while token:
        suffix = f"/history?page_size=1000&next_page_token={token}" + (f"&run_id={run_id}" if run_id else "")
        page = _run(lambda suffix=suffix: _call(server, "GET", _wf_path(namespace, workflow_id, suffix)))
        events.extend(page["events"])
        token = page["next_page_token"]
    if output == "json":
        print(json.dumps(events, indent=2, default=str))
        return
    table = Table("#", "time", "event", "details")
    first = events[0]["event_time_ms"] if events else 0
    for event in events:
        table.add_row(str(event["event_id"]), f"+{(event['event_time_ms'] - first) / 1000:.3f}s",
                      event["event_type"], _details(event))
    console.print(table)


def _when(ms: int | None) -> str:
    return "" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _event_line(event: dict[str, Any]) -> str:
    details = _details(event)
    return f"{event['event_id']:>4} {event['event_type']}" + (f"  {details}" if details else "")


def _details(event: dict[str, Any]) -> str:
    attrs = event.get("attributes", {})
    parts = []
    for key in ("workflow_type", "activity_type", "activity_id", "timer_id", "signal_name", "reason", "cause",
                "attempt"):
        value = attrs.get(key)
        if value not in (None, "", 0, 1) or (key == "attempt" and isinstance(value, int) and value > 1):
            parts.append(f"{key}={value}")
    for key in ("result", "input"):
        payloads = attrs.get(key)
        if payloads:
            parts.append(f"{key}={_payloads(payloads)}")
    failure = attrs.get("failure")
    if isinstance(failure, dict) and failure.get("message"):
        parts.append(f"failure={failure['message']!r}")
    return " ".join(parts)


def _payloads(payloads: list[dict[str, Any]]) -> str:
    out = []
    for p in payloads:
        try:
            out.append(base64.b64decode(p["data"]).decode())
        except (KeyError, ValueError, UnicodeDecodeError):
            out.append("<binary>")
    text = ", ".join(out)
    return text if len(text) <= 80 else text[:77] + "..."


@app.command("list")
def list_workflows(
    query: Annotated[str, typer.Argument(help="e.g. \"WorkflowType = 'Order' AND ExecutionStatus = 'Running'\"")] = "",
    limit: Annotated[int, typer.Option("--limit", help="At most this many runs.")] = 100,
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Runs matching a visibility query, newest first unless the query orders them."""
    rows: list[dict[str, Any]] = []
    token = ""
    while len(rows) < limit:
        params = urllib.parse.urlencode({k: v for k, v in {"query": query, "page_size": str(min(1000, limit)),
                                                           "next_page_token": token}.items() if v})
        page = _run(lambda params=params: _call(server, "GET", f"/api/v1/namespaces/"
                                                               f"{urllib.parse.quote(namespace, safe='')}/workflows?"
                                                               f"{params}"))
        rows.extend(page["executions"])
        token = page["next_page_token"]
        if not token:
            break
    rows = rows[:limit]
    if output == "json":
        print(json.dumps(rows, indent=2, default=str))
        return
    table = Table("workflow id", "type", "status", "started", "closed", "events")
    for row in rows:
        table.add_row(row["workflow_id"], row["workflow_type"], row["status"], _when(row["start_time_ms"]),
                      _when(row.get("close_time_ms")), str(row["history_length"]))
    console.print(table)


@app.command()
def count(
    query: Annotated[str, typer.Argument()] = "",
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """How many runs match a visibility query."""
    params = urllib.parse.urlencode({"query": query} if query else {})
    found = _run(lambda: _call(server, "GET", f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}"
                                              f"/workflow-count?{params}"))
    _show(found if output == "json" else found["count"], output)


task_queue_app = typer.Typer(help="Inspect task queues.", no_args_is_help=True)


@task_queue_app.command("describe")
def describe_task_queue(
    task_queue: Annotated[str, typer.Argument()],
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Backlog and the oldest waiting task per kind (from consumer lag), and the workers serving the queue."""
    found = _run(lambda: _call(server, "GET", f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}"
                                              f"/task-queues/{urllib.parse.quote(task_queue, safe='')}"))
    if output == "json":
        _show(found, output)
        return
    table = Table("kind", "partitions", "backlog", "oldest waiting", title=f"task queue {task_queue}")
    for kind in ("workflow", "activity"):
        item = found[kind]
        age = item["oldest_age_ms"]
        table.add_row(kind, str(item["partitions"]), str(item["backlog"]),
                      "" if age is None else f"{age / 1000:.1f}s")
    console.print(table)
    console.print(f"{len(found['workers'])} worker(s): " + ", ".join(w["client_id"] for w in found["workers"]))


namespace_app = typer.Typer(help="Register and inspect namespaces.", no_args_is_help=True)


@namespace_app.command("register")
def register_namespace(
    name: Annotated[str, typer.Argument()],
    retention_days: Annotated[float, typer.Option("--retention-days", help="Keep closed runs this long.")] = 7.0,
    description: Annotated[str, typer.Option()] = "",
    owner_email: Annotated[str, typer.Option("--owner-email")] = "",
    server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = "table",
) -> None:
    """Register a namespace (the first registration of a name wins)."""
    _show(_run(lambda: _call(server, "POST", "/api/v1/namespaces", {
        "name": name, "retention_days": retention_days, "description": description, "owner_email": owner_email})),
        output)


@namespace_app.command("list")
def list_namespaces(server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = "table") -> None:
    """Every namespace, `default` included."""
    found = _run(lambda: _call(server, "GET", "/api/v1/namespaces"))["namespaces"]
    if output == "json":
        print(json.dumps(found, indent=2))
        return
    table = Table("namespace", "retention", "description")
    for item in found:
        table.add_row(item["name"], f"{item['retention_ms'] / 86_400_000:g} days", item["description"])
    console.print(table)


@namespace_app.command("describe")
def describe_namespace(name: Annotated[str, typer.Argument()], server: ServerOpt = DEFAULT_SERVER,
                       output: OutputOpt = "table") -> None:
    """A namespace and its retention."""
    _show(_run(lambda: _call(server, "GET", f"/api/v1/namespaces/{urllib.parse.quote(name, safe='')}")), output)
