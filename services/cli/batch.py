"""`ostinato batch start|describe|list|cancel`: batch operations (issue 21) through the SDK's client, so the command
line and Python programs drive jobs the same way."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer

from ostinato.sdk.batch import (
    BatchAction,
    BatchCancel,
    BatchReset,
    BatchSignal,
    BatchTerminate,
    list_batch_operations_query,
)
from ostinato.sdk.client import Client
from ostinato.sdk.exceptions import OstinatoError

T = TypeVar("T")
app = typer.Typer(help="Terminate, cancel, signal or reset every run a query selects, as a durable job.",
                  no_args_is_help=True)
ServerOpt = Annotated[str, typer.Option("--server", envvar="OSTINATO_SERVER", help="The Ostinato API.")]
NamespaceOpt = Annotated[str, typer.Option("--namespace", "-n", envvar="OSTINATO_NAMESPACE")]
DEFAULT_SERVER = "http://127.0.0.1:7243"


def _with_client(server: str, namespace: str, fn: Callable[[Client], Awaitable[T]]) -> T:
    async def run() -> T:
        client = await Client.connect(server, namespace=namespace, identity="ostinato-cli")
        try:
            return await fn(client)
        finally:
            await client.close()

    try:
        return asyncio.run(run())
    except (OstinatoError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _print(value: Any) -> None:
    typer.echo(json.dumps(dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value, indent=2,
                          default=str))


@app.command()
def start(query: Annotated[str, typer.Argument(help="A visibility query selecting the runs.")],
          operation: Annotated[str, typer.Option("--operation", help="terminate, cancel, signal or reset")],
          job_id: Annotated[str, typer.Option("--job-id")],
          reason: Annotated[str, typer.Option()] = "",
          signal_name: Annotated[str, typer.Option("--signal")] = "",
          arg: Annotated[list[str] | None, typer.Option("--arg", help="a signal argument (JSON)")] = None,
          reset_type: Annotated[str, typer.Option("--reset-type", help="first or last")] = "last",
          rps: Annotated[float, typer.Option("--rps", help="operations per second; 0: unlimited")] = 0,
          server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default") -> None:
    """Start a job; prints its id."""
    actions: dict[str, Callable[[], BatchAction]] = {
        "terminate": lambda: BatchTerminate(reason), "cancel": lambda: BatchCancel(reason),
        "signal": lambda: BatchSignal(signal_name, [json.loads(a) for a in arg or []]),
        "reset": lambda: BatchReset(reset_type, reason)}
    if operation not in actions or (operation == "signal" and not signal_name):
        typer.echo("error: --operation is terminate, cancel, signal (with --signal) or reset", err=True)
        raise typer.Exit(2)
    handle = _with_client(server, namespace, lambda c: c.start_batch_operation(
        query, actions[operation](), job_id=job_id, rps=rps or None))
    _print({"job_id": handle.job_id})


@app.command()
def describe(job_id: Annotated[str, typer.Argument()], server: ServerOpt = DEFAULT_SERVER,
             namespace: NamespaceOpt = "default") -> None:
    """A job's state and progress (total, done, failed, the first errors)."""
    _print(_with_client(server, namespace, lambda c: c.get_batch_operation_handle(job_id).describe()))


@app.command()
def cancel(job_id: Annotated[str, typer.Argument()], server: ServerOpt = DEFAULT_SERVER,
           namespace: NamespaceOpt = "default") -> None:
    """Stop a job; runs already acted on stay so."""
    _with_client(server, namespace, lambda c: c.get_batch_operation_handle(job_id).cancel())
    _print({"job_id": job_id, "cancel_requested": True})


@app.command("list")
def list_jobs(server: ServerOpt = DEFAULT_SERVER, namespace: NamespaceOpt = "default") -> None:
    """Batch jobs of the namespace, newest first, with their run's status."""
    async def jobs(client: Client) -> list[dict[str, str]]:
        return [{"job_id": w.id, "status": getattr(w.status, "name", str(w.status))}
                async for w in client.list_workflows(list_batch_operations_query())]

    _print(_with_client(server, namespace, jobs))
