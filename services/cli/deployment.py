"""`ostinato deployment set-current|set-ramping|describe`: a task queue's current and ramping build (worker
versioning; Temporal's `temporal worker deployment set-current-version`, per task queue)."""

from __future__ import annotations

import json
import urllib.parse
from typing import Annotated, Any

import typer
from rich.table import Table

from ostinato.services.cli.workflow import (
    DEFAULT_SERVER,
    NamespaceOpt,
    OutputOpt,
    ServerOpt,
    _call,
    _run,
    console,
)

app = typer.Typer(help="Worker versioning: which build's workers get a task queue's new and auto-upgrade work.",
                  no_args_is_help=True)
QueueOpt = Annotated[str, typer.Option("--task-queue", "-q", help="The task queue.")]


def _path(namespace: str, queue: str) -> str:
    return (f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}/task-queues/"
            f"{urllib.parse.quote(queue, safe='')}/versioning")


def _print(found: dict[str, Any], output: str) -> None:
    if output == "json":
        print(json.dumps(found, indent=2))
        return
    table = Table("task queue", "current build", "ramping build", "ramping %", "revision",
                  title=f"versioning in {found['namespace']}")
    table.add_row(found["task_queue"], found["current_build"] or "(unversioned)", found["ramping_build"] or "-",
                  f"{found['ramping_percentage']:g}", str(found["revision"]))
    console.print(table)
    console.print("drain check: ostinato workflow count --query \"BuildIds = 'pinned:<build>' AND "
                  "ExecutionStatus = 'Running'\"")


@app.command("set-current")
def set_current(
    task_queue: QueueOpt,
    build_id: Annotated[str, typer.Option("--build-id", help="The build that gets new and auto-upgrade work ('' "
                                                              "to route to the unversioned topics again).")],
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Make a build current: new runs and auto-upgrade runs' next tasks go to its workers; pinned runs stay on the
    build that started them. A ramp of that build ends."""
    _print(_run(lambda: _call(server, "POST", _path(namespace, task_queue), {"current_build": build_id})), output)


@app.command("set-ramping")
def set_ramping(
    task_queue: QueueOpt,
    build_id: Annotated[str, typer.Option("--build-id", help="The ramping build ('' ends the ramp).")],
    percentage: Annotated[float, typer.Option("--percentage", help="0-100: the share of workflow ids it takes.")],
    server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default", output: OutputOpt = "table",
) -> None:
    """Send a share of the queue's workflow ids (by a stable hash of the id) to a ramping build."""
    _print(_run(lambda: _call(server, "POST", _path(namespace, task_queue),
                              {"ramping_build": build_id, "ramping_percentage": percentage})), output)


@app.command("describe")
def describe(task_queue: QueueOpt, server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default",
             output: OutputOpt = "table") -> None:
    """The queue's current and ramping build."""
    _print(_run(lambda: _call(server, "GET", _path(namespace, task_queue))), output)
