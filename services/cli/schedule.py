"""`ostinato schedule ...`: create, describe, list, pause, unpause, trigger, backfill and delete schedules through
the JSON API (/api/v1/namespaces/{ns}/schedules), readable tables by default, `-o json` for scripts; exit status as
`ostinato workflow` (1 on an API error, 2 when the server cannot be reached or an option is invalid)."""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from ostinato.services.cli.workflow import (
    DEFAULT_SERVER,
    JsonInputs,
    NamespaceOpt,
    OutputOpt,
    ServerOpt,
    _call,
    _run,
    _show,
    _values,
)

app = typer.Typer(help="Create, inspect, pause, trigger, backfill and delete schedules.", no_args_is_help=True)
OVERLAPS = ("SKIP", "BUFFER_ONE", "BUFFER_ALL", "CANCEL_OTHER", "TERMINATE_OTHER", "ALLOW_ALL")
OverlapOpt = Annotated[str | None, typer.Option("--overlap", help=f"One of {', '.join(OVERLAPS)}.")]
NoteOpt = Annotated[str, typer.Option("--note", help="Why (shown by describe).")]
ScheduleId = Annotated[str, typer.Argument(help="The schedule's id.")]


def _path(namespace: str, schedule_id: str = "", suffix: str = "") -> str:
    base = f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}/schedules"
    return base + (f"/{urllib.parse.quote(schedule_id, safe='')}{suffix}" if schedule_id else "")


def _ms(text: str) -> int:
    """An ISO 8601 time (UTC unless it says otherwise) as epoch milliseconds."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r} is not an ISO 8601 time: {exc}") from None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1000)


def _overlap(value: str | None) -> str:
    if value is None:
        return "UNSPECIFIED"
    if value.upper() not in OVERLAPS:
        raise typer.BadParameter(f"--overlap must be one of {', '.join(OVERLAPS)}")
    return value.upper()


def _iso(ms: int | None) -> str:
    return "" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat()


@app.command()
def create(
    schedule_id: ScheduleId,
    workflow_type: Annotated[str, typer.Option("--workflow-type", "-t")],
    task_queue: Annotated[str, typer.Option("--task-queue", "-q")],
    workflow_id: Annotated[str, typer.Option("--workflow-id", "-w", help="Each action's id is this + '-' + its time.")],
    cron: Annotated[list[str] | None, typer.Option("--cron", help="A cron expression (repeat).")] = None,
    every_s: Annotated[float | None, typer.Option("--every", help="An interval, in seconds.")] = None,
    offset_s: Annotated[float, typer.Option("--offset", help="The interval's offset, in seconds.")] = 0.0,
    time_zone: Annotated[str, typer.Option("--time-zone", help="IANA zone of the cron expressions.")] = "",
    jitter_s: Annotated[float, typer.Option("--jitter", help="Delay each action by up to this, in seconds.")] = 0.0,
    start_at: Annotated[str | None, typer.Option("--start-at", help="ISO 8601.")] = None,
    end_at: Annotated[str | None, typer.Option("--end-at", help="ISO 8601.")] = None,
    overlap: OverlapOpt = None,
    catchup_window_s: Annotated[float, typer.Option("--catchup-window", help="Seconds.")] = 365 * 86_400.0,
    pause_on_failure: Annotated[bool, typer.Option("--pause-on-failure")] = False,
    paused: Annotated[bool, typer.Option("--paused")] = False,
    note: NoteOpt = "",
    remaining_actions: Annotated[int | None, typer.Option("--remaining-actions", help="Limit the actions.")] = None,
    trigger_immediately: Annotated[bool, typer.Option("--trigger-immediately")] = False,
    inputs: JsonInputs = None,
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Create a schedule that starts a workflow at the times of its cron expressions and interval."""
    body: dict[str, Any] = {
        "schedule_id": schedule_id,
        "spec": {"cron_expressions": list(cron or []), "time_zone_name": time_zone, "jitter_ms": int(jitter_s * 1000),
                 "intervals": [] if every_s is None else [{"every_ms": int(every_s * 1000),
                                                           "offset_ms": int(offset_s * 1000)}],
                 "start_at_ms": None if start_at is None else _ms(start_at),
                 "end_at_ms": None if end_at is None else _ms(end_at)},
        "action": {"workflow_id": workflow_id, "workflow_type": workflow_type, "task_queue": task_queue,
                   "input": _values(inputs or [])},
        "policy": {"overlap": _overlap(overlap), "catchup_window_ms": int(catchup_window_s * 1000),
                   "pause_on_failure": pause_on_failure},
        "state": {"paused": paused, "note": note, "limited_actions": remaining_actions is not None,
                  "remaining_actions": remaining_actions or 0},
        "trigger_immediately": trigger_immediately}
    _show(_run(lambda: _call(server, "POST", _path(namespace), body)), output)


@app.command()
def describe(schedule_id: ScheduleId, server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default",
             output: OutputOpt = "table") -> None:
    """The schedule, its counts, running and recent actions, and its next action times."""
    found = _run(lambda: _call(server, "GET", _path(namespace, schedule_id)))
    if output != "json":
        info = found["info"]
        found = {"schedule_id": found["schedule_id"], "paused": found["state"]["paused"],
                 "note": found["state"]["note"], "spec": found["spec"], "action": found["action"]["workflow_type"],
                 "actions": info["num_actions"], "missed (catch-up window)": info["num_actions_missed_catchup_window"],
                 "skipped (overlap)": info["num_actions_skipped_overlap"],
                 "running": [a["workflow_id"] for a in info["running"]],
                 "recent": [f"{_iso(a['schedule_time_ms'])} {a['workflow_id']} {a['status']}"
                            for a in info["recent_actions"]],
                 "next": [_iso(t) for t in info["next_action_times_ms"]]}
    _show(found, output)


@app.command("list")
def list_schedules(server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default",
                   output: OutputOpt = "table") -> None:
    """The namespace's schedules."""
    found = _run(lambda: _call(server, "GET", _path(namespace)))
    if output == "json":
        _show(found, output)
    else:
        for item in found["schedules"]:
            print(item["schedule_id"])


@app.command()
def pause(schedule_id: ScheduleId, note: NoteOpt = "", server: ServerOpt = DEFAULT_SERVER,
          namespace: NamespaceOpt = "default", output: OutputOpt = "table") -> None:
    """Stop taking the spec's actions (trigger and backfill still work)."""
    _show(_run(lambda: _call(server, "POST", _path(namespace, schedule_id, "/pause"), {"note": note})), output)


@app.command()
def unpause(schedule_id: ScheduleId, note: NoteOpt = "", server: ServerOpt = DEFAULT_SERVER,
            namespace: NamespaceOpt = "default", output: OutputOpt = "table") -> None:
    """Take the spec's actions again, from now on."""
    _show(_run(lambda: _call(server, "POST", _path(namespace, schedule_id, "/unpause"), {"note": note})), output)


@app.command()
def trigger(schedule_id: ScheduleId, overlap: OverlapOpt = None, server: ServerOpt = DEFAULT_SERVER,
            namespace: NamespaceOpt = "default", output: OutputOpt = "table") -> None:
    """Take an action now."""
    _show(_run(lambda: _call(server, "POST", _path(namespace, schedule_id, "/trigger"),
                             {"overlap": _overlap(overlap)})), output)


@app.command()
def backfill(schedule_id: ScheduleId, start_at: Annotated[str, typer.Option("--start-at", help="ISO 8601.")],
             end_at: Annotated[str, typer.Option("--end-at", help="ISO 8601.")], overlap: OverlapOpt = None,
             server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default",
             output: OutputOpt = "table") -> None:
    """Take, now, every action the spec names from --start-at to --end-at."""
    body = {"backfill": [{"start_at_ms": _ms(start_at), "end_at_ms": _ms(end_at), "overlap": _overlap(overlap)}]}
    _show(_run(lambda: _call(server, "POST", _path(namespace, schedule_id, "/backfill"), body)), output)


@app.command()
def delete(schedule_id: ScheduleId, server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default",
           output: OutputOpt = "table") -> None:
    """Delete the schedule; the runs it started go on."""
    _show(_run(lambda: _call(server, "DELETE", _path(namespace, schedule_id))), output)
