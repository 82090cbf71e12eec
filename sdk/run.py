"""`ostinato worker module:attr`: run a worker from the command line until SIGINT or SIGTERM (then drain).

`attr` names either a dict of Worker options (`{"task_queue": "orders", "workflows": [...], "activities": [...]}`)
or a function (sync or async) that takes a connected Client and returns a Worker.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import signal
import sys
import time
from typing import Any

from ostinato.sdk.client import Client
from ostinato.sdk.worker import Worker


class WorkerTargetError(ValueError):
    """`module:attr` does not name something a worker can be built from."""


def load_target(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise WorkerTargetError(f"expected module:attr (e.g. myapp.workers:orders), not {target!r}")
    sys.path.insert(0, ".")  # like `python -m`: modules of the current directory are found
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WorkerTargetError(f"cannot import {module_name!r}: {exc}") from None
    found = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise WorkerTargetError(f"{module_name} has no attribute {attr!r}")
        found = getattr(found, part)
    return found


async def build_worker(found: Any, client: Client) -> Worker:
    if isinstance(found, dict):
        return Worker(client, **found)
    if callable(found):
        made = found(client)
        if inspect.isawaitable(made):
            made = await made
        if isinstance(made, Worker):
            return made
    raise WorkerTargetError("the target must be a dict of Worker options or a function taking a Client and "
                            f"returning a Worker, not {type(found).__name__}")


async def connect(server: str, namespace: str, timeout_s: float) -> Client:
    """Connect, waiting for a server that is still starting (a worker is often started beside it)."""
    from ostinato.sdk.exceptions import RPCError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await Client.connect(server, namespace=namespace)
        except RPCError as exc:
            if time.monotonic() > deadline:
                raise
            print(f"ostinato worker: waiting for the server ({exc})", file=sys.stderr, flush=True)
            await asyncio.sleep(1.0)


async def run(target: str, server: str, namespace: str, connect_timeout_s: float = 30.0) -> None:
    found = load_target(target)
    client = await connect(server, namespace, connect_timeout_s)
    worker = await build_worker(found, client)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(worker.shutdown()))
    print(f"ostinato worker: serving task queue {worker.task_queue!r} of {server} (namespace {namespace}); "
          "Ctrl-C stops it after running activities finish", file=sys.stderr, flush=True)
    await worker.run()
