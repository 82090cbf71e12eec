"""`ostinato workflow ...`: drive workflows through the JSON API, readable tables by default, `-o json` for
scripts. Exit status 1 on an API error (its code and message printed), 2 when the server cannot be reached or an
option is invalid (e.g. `--input '{bad'`, which looks like JSON but does not parse).

Reads survive ownership changes: redirects are followed by hand, and a redirect to an owner that does not answer or
a 503 (its `Retry-After` honoured) is retried by asking `--server` again, which redirects to the new owner once
there is one, for up to `RETRY_S`. Commands are not retried (a refused one may still have been applied)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from email.message import Message
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
RETRY_S = 60.0  # how long a read retries while no server can serve it (an owner died, a shard moves)
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
RETRY_AFTER_MAX_S = 10.0
MAX_REDIRECTS = 3  # the API needs one (to the shard's owner)
REDIRECTS = frozenset({301, 302, 303, 307, 308})


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{body.get('code', status)}: {body.get('message', '')}")
        self.status = status
        self.body = body


class _Unavailable(Exception):
    """An attempt a later one may answer: a 503 (`error`), or an owner that did not answer (the message)."""

    def __init__(self, why: str, *, error: ApiError | None = None, retry_after: float = 0.0) -> None:
        super().__init__(why)
        self.error = error
        self.retry_after = retry_after


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx arrives as an HTTPError and is followed by hand, so a failure names the right host


_OPENER = urllib.request.build_opener(_NoRedirect)


def _call(server: str, method: str, path: str, body: Any = None, timeout: float = 70.0) -> Any:
    """One API call: the JSON answer; ApiError for an error answer; exit 2 when `server` cannot be reached. A GET
    (a read) that no server can serve right now is retried for up to `RETRY_S` from the first failure."""
    data = None if body is None else json.dumps(body).encode()
    deadline = 0.0
    pause = RETRY_FIRST_S
    while True:
        try:
            return _attempt(server, method, path, data, timeout)
        except _Unavailable as why:
            now = time.monotonic()
            deadline = deadline or now + RETRY_S
            if method == "GET" and now < deadline:
                time.sleep(min(deadline - now, max(pause, why.retry_after)))
                pause = min(RETRY_MAX_S, pause * 2)
                continue
            if why.error is not None:
                raise why.error from None
            err_console.print(f"[red]error:[/red] {why}; retried for {RETRY_S:.0f}s", highlight=False)
            raise typer.Exit(2) from None


def _attempt(server: str, method: str, path: str, data: bytes | None, timeout: float) -> Any:
    url, by = server.rstrip("/") + path, ""  # `by`: the server that redirected to `url`
    for _ in range(MAX_REDIRECTS + 1):
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with _OPENER.open(request, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            location = exc.headers.get("Location", "")
            if exc.code in REDIRECTS and location and method == "GET":
                by, url = _origin(url), urllib.parse.urljoin(url, location)
                continue
            try:
                detail = json.loads(exc.read())
            except ValueError:
                detail = {"code": str(exc.code), "message": exc.reason}
            error = ApiError(exc.code, detail if isinstance(detail, dict) else {"message": str(detail)})
            if exc.code == 503:
                raise _Unavailable(str(error), error=error, retry_after=_retry_after(exc.headers)) from None
            raise error from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            if not by:  # the server the user named: say so at once
                err_console.print(f"[red]error:[/red] cannot reach the Ostinato API at {server}: {reason}. Is "
                                  "`ostinato dev` or `ostinato server` running? (--server or OSTINATO_SERVER)",
                                  highlight=False)
                raise typer.Exit(2) from None
            raise _Unavailable(f"the shard's owner at {_origin(url)} (where {by} redirected the request) did not "
                               f"answer: {reason}") from None
    raise _Unavailable(f"more than {MAX_REDIRECTS} redirects from {server}, the last to {_origin(url)}")


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _retry_after(headers: Message) -> float:
    try:
        return min(RETRY_AFTER_MAX_S, max(0.0, float(headers.get("Retry-After", ""))))
    except ValueError:
        return 0.0


def _run(fn: Any) -> Any:
    try:
        return fn()
    except ApiError as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None


def _value(text: str) -> Any:
    """An option's value as JSON. Text that is not JSON is a string (`--input Ada` means "Ada"), unless it looks
    like JSON (it starts with `{`, `[` or `"`): then it must parse, so a typo is refused instead of sent as text."""
    try:
        return json.loads(text)
    except ValueError as exc:
        if text.lstrip()[:1] in ("{", "[", '"'):
            raise ValueError(f"{text!r} looks like JSON but is not valid JSON ({exc}); to send it as a string, "
                             f"pass it as a JSON string: {json.dumps(text)}") from None
        return text


def _values(raw: list[str]) -> list[Any]:
    return [_value(text) for text in raw]


def _check_json(raw: list[str] | None) -> list[str] | None:
    """Option callback: refuse invalid JSON before anything is sent (exit 2, like any bad option)."""
    for text in raw or []:
        try:
            _value(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return raw


JsonInputs = Annotated[list[str] | None, typer.Option("--input", "-i", callback=_check_json,
                                                      help="An argument, as JSON (repeat); a bare word is a string.")]
JsonArgs = Annotated[list[str] | None, typer.Option("--arg", "-a", callback=_check_json,
                                                  help="An argument, as JSON (repeat); a bare word is a string.")]


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
    inputs: JsonInputs = None,
    wait: Annotated[bool, typer.Option("--wait", help="Show progress until the result.")] = False,
    search_attributes: Annotated[list[str] | None, typer.Option(
        "--search-attribute", help="NAME=VALUE (VALUE as JSON, else a string) of a custom search attribute "
                                   "registered in the namespace (`ostinato operator search-attribute create`); "
                                   "repeatable.")] = None,
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Start a workflow; with --wait, stream its history until it closes and print the result."""
    attributes: dict[str, Any] = {}
    for item in search_attributes or []:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"--search-attribute takes NAME=VALUE, not {item!r}")
        attributes[name] = _value(text)
    started = _run(lambda: _call(server, "POST", f"/api/v1/namespaces/{namespace}/workflows", {
        "workflow_id": workflow_id, "workflow_type": workflow_type, "task_queue": task_queue,
        "input": _values(inputs or []), "search_attributes": attributes}))
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
    inputs: JsonInputs = None,
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Send a signal to a running workflow."""
    _show(_run(lambda: _call(server, "POST", _wf_path(namespace, workflow_id, "/signal"),
                             {"signal_name": name, "input": _values(inputs or [])})), output)


@app.command()
def update(
    workflow_id: Annotated[str, typer.Argument()], name: Annotated[str, typer.Argument(help="The update name.")],
    inputs: JsonInputs = None,
    wait_for_stage: Annotated[str, typer.Option("--wait-for-stage", help="accepted or completed.")] = "completed",
    update_id: Annotated[str, typer.Option("--update-id", help="De-duplicates: the same id joins the first "
                                           "update. Default: a new one.")] = "",
    run_id: RunOpt = "",
    timeout_s: Annotated[float, typer.Option("--timeout", help="Give up waiting after this many seconds (the "
                                             "update goes on).")] = 300.0,
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Call an update handler of a running workflow and wait for it to be accepted or completed. Exits 1 when the
    workflow rejects the update or its handler fails."""
    stage = wait_for_stage.upper()
    if stage not in ("ACCEPTED", "COMPLETED"):
        err_console.print("[red]error:[/red] --wait-for-stage must be accepted or completed", highlight=False)
        raise typer.Exit(2)
    path = _wf_path(namespace, workflow_id, f"/updates/{urllib.parse.quote(name, safe='')}")
    request = {"input": _values(inputs or []), "update_id": update_id, "run_id": run_id, "wait_stage": "ADMITTED"}
    admitted = _run(lambda: _call(server, "POST", path, request))
    sent_id = urllib.parse.quote(admitted["update_id"], safe="")
    status_path = _wf_path(namespace, workflow_id, f"/updates/{sent_id}")
    deadline = time.monotonic() + timeout_s
    while True:
        wait_ms = max(1, min(50_000, int((deadline - time.monotonic()) * 1000)))
        query_string = urllib.parse.urlencode({"run_id": admitted["run_id"], "wait_stage": stage, "wait_ms": wait_ms})
        status = _run(lambda: _call(server, "GET", f"{status_path}?{query_string}"))  # noqa: B023
        reached = ("ACCEPTED", "COMPLETED").index(status["stage"]) >= ("ACCEPTED", "COMPLETED").index(stage) \
            if status["stage"] != "ADMITTED" else False
        if reached or status["run_closed"] or time.monotonic() >= deadline:
            break
    _show(status, output)
    outcome = status.get("outcome") or {}
    if "failure" in outcome or status["run_closed"]:
        raise typer.Exit(1)
    if not reached:
        err_console.print(f"[yellow]still {status['stage']} after {timeout_s:.0f}s[/yellow]", highlight=False)
        raise typer.Exit(1)


@app.command()
def query(
    workflow_id: Annotated[str, typer.Argument()], name: Annotated[str, typer.Argument(help="The query name.")],
    args: JsonArgs = None,
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
def reset(workflow_id: Annotated[str, typer.Argument()],
          event_id: Annotated[int, typer.Option("--event-id", help="a WORKFLOW_TASK_COMPLETED event id")] = 0,
          reset_type: Annotated[str, typer.Option("--type", help="first or last (workflow task)")] = "",
          reason: Annotated[str, typer.Option()] = "", run_id: Annotated[str, typer.Option("--run-id")] = "",
          no_reapply: Annotated[bool, typer.Option("--no-reapply",
                                                   help="drop signals and updates after the point")] = False,
          server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
          ) -> None:
    """Start a new run from a completed workflow task of this one (its code runs again from there)."""
    body: dict[str, object] = {"reason": reason, "run_id": run_id, "reapply_signals": not no_reapply}
    if event_id:
        body["event_id"] = event_id
    if reset_type:
        body["reset_type"] = reset_type
    _show(_run(lambda: _call(server, "POST", _wf_path(namespace, workflow_id, "/reset"), body)), output)


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
    task = state.get("workflow_task")
    summary["workflow task"] = "none" if task is None else (
        f"{task.get('state', 'SCHEDULED')}, attempt {task['attempt']}, scheduled {_when(task['scheduled_time_ms'])}")
    if task is not None and task.get("last_failure"):
        summary["last task failure"] = f"{task['last_failure_cause']}: {task['last_failure']['message']}"
    if state.get("versioning_behavior") or state.get("build_id"):  # worker versioning
        pinned = f", pinned to {state['pinned_build']}" if state.get("pinned_build") else ""
        summary["versioning"] = (f"{state.get('versioning_behavior') or 'unversioned'}{pinned}, last task by build "
                                 f"{state.get('build_id') or '(none)'}")
    summary["pending activities"] = len(state.get("activities", []))
    summary["timers"] = len(state.get("timers", []))
    summary["children"] = len(state.get("children", []))
    quarantined = state.get("quarantine", [])
    summary["quarantined commands"] = len(quarantined)
    _show(summary, output)
    for kept in quarantined:  # commands the engine failed on: the run may wait for what they would have recorded
        console.print(f"[bold red]quarantined[/bold red] {kept['command_type']} {kept['request_id']} "
                      f"({kept['code']}, {kept['failures']}x, last {_when(kept['last_failed_time_ms'])}): "
                      f"{kept['error_message']}", highlight=False)
    if quarantined:
        console.print(f"once the engine is fixed: ostinato workflow redrive {workflow_id}", highlight=False)


@app.command()
def redrive(workflow_id: Annotated[str, typer.Argument()], run_id: RunOpt = "",
            reason: Annotated[str, typer.Option()] = "",
            server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
            ) -> None:
    """Decide the run's quarantined commands again (after an upgrade that fixed what failed them); those that
    still fail stay quarantined, and the command exits 1."""
    answer = _run(lambda: _call(server, "POST", _wf_path(namespace, workflow_id, "/redrive"),
                                {"reason": reason, "run_id": run_id}))
    if output == "json":
        _show(answer, output)
    else:
        console.print(f"run {answer['run_id']}: {len(answer['outcomes'])} quarantined command(s) decided again",
                      highlight=False)
        for outcome in answer["outcomes"]:
            detail = f": {outcome['message']}" if outcome["message"] else ""
            console.print(f"  {outcome['outcome']:<8} {outcome['command_type']} {outcome['request_id']}{detail}",
                          highlight=False)
    if any(outcome["outcome"] == "FAILED" for outcome in answer["outcomes"]):
        raise typer.Exit(1)


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


task_queue_app = typer.Typer(help="Inspect task queues and limit their activity rate.", no_args_is_help=True)


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
    try:  # worker versioning: where the queue's new work goes (each build has a queue of its own to describe)
        versioning = _call(server, "GET", f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}/task-queues/"
                                          f"{urllib.parse.quote(task_queue, safe='')}/versioning")
    except ApiError:
        return
    if versioning["current_build"] or versioning["ramping_build"]:
        ramp = (f", ramping {versioning['ramping_build']} ({versioning['ramping_percentage']:g}%)"
                if versioning["ramping_build"] else "")
        console.print(f"current build {versioning['current_build'] or '(none)'}{ramp}: its tasks are on queue "
                      f"{versioning['current_queue']} (ostinato task-queue describe {versioning['current_queue']})",
                      highlight=False)


@task_queue_app.command("set-rate-limit")
def set_rate_limit(
    task_queue: Annotated[str, typer.Argument()],
    activities_per_second: Annotated[float, typer.Argument(
        help="Activity tasks released per second across all the queue's workers; 0 lifts the limit.")],
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Limit a task queue's activity rate, enforced by the engine however many workers run (temporalio's
    max_task_queue_activities_per_second); durable in the cluster topic until changed."""
    if activities_per_second < 0:
        raise typer.BadParameter("the rate cannot be negative (0 lifts the limit)")
    _show(_run(lambda: _call(server, "PUT", f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}"
                                            f"/task-queues/{urllib.parse.quote(task_queue, safe='')}/rate-limit",
                             {"activities_per_second": activities_per_second, "set_by": "ostinato task-queue"})),
          output)


@task_queue_app.command("get-rate-limit")
def get_rate_limit(
    task_queue: Annotated[str, typer.Argument()],
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """The task queue's engine-enforced activity rate (null when none is set)."""
    _show(_run(lambda: _call(server, "GET", f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}"
                                            f"/task-queues/{urllib.parse.quote(task_queue, safe='')}/rate-limit")),
          output)


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
