"""`ostinato demo` (the README's first command): a local cluster, a worker, several orders, the server killed with
SIGKILL in the middle and restarted, and every order finishing correctly; then one order's history."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from ostinato.infra import process
from ostinato.sdk.client import Client, WorkflowHandle
from ostinato.sdk.exceptions import RPCError
from ostinato.sdk.worker import Worker
from ostinato.services.cli import demo_orders
from ostinato.services.cli.dev import SERVER_MARKER, DevOptions, run_detached, stop

console = Console(soft_wrap=True)


def _orders(run: str) -> list[dict[str, Any]]:
    return [
        {"id": f"{run}-1", "sku": "kettle", "qty": 1},
        {"id": f"{run}-2", "sku": "teapot", "qty": 2, "flaky_payment": True},
        {"id": f"{run}-3", "sku": "sold-out", "qty": 1},
        {"id": f"{run}-4", "sku": "mugs", "qty": 6},
        {"id": f"{run}-5", "sku": "tray", "qty": 1, "ship_within_s": 6},  # the warehouse forgets this one
        {"id": f"{run}-6", "sku": "cosy", "qty": 3},
    ]


async def _retry(what: Callable[[], Any], attempts: int = 60) -> Any:
    """Calls during the server's restart fail for a few seconds; the demo waits like a real client would."""
    for attempt in range(attempts):
        try:
            return await what()
        except RPCError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.5)
    return None


async def _run(opts: DevOptions, say: Callable[[str], None]) -> WorkflowHandle:
    running = run_detached(opts, say)
    client = await Client.connect(running.api)
    run = uuid.uuid4().hex[:6]
    orders = _orders(run)
    async with Worker(client, **demo_orders.WORKER):  # type: ignore[arg-type]
        handles = []
        for order in orders:
            handles.append(await client.start_workflow(demo_orders.OrderFulfilment.run, order,
                                                       id=f"order-{order['id']}", task_queue=demo_orders.QUEUE))
        say(f"Started {len(handles)} orders: payments, stock reservations, one out of stock, one never shipped")
        await asyncio.sleep(1.0)
        pid = process.read_pid(opts.home / "server.pid", SERVER_MARKER)
        if pid is not None:
            say(f"Killing the Ostinato server (kill -9, pid {pid}) in the middle of the run")
            os.kill(pid, signal.SIGKILL)
            process.wait_reaped(pid, 10)
            (opts.home / "server.pid").unlink(missing_ok=True)
        say("Restarting it: each shard restores from its changelog and carries on")
        run_detached(opts, say)
        for handle, order in zip(handles, orders, strict=True):
            if order["sku"] != "sold-out" and "ship_within_s" not in order:
                tracking = f"TRACK-{order['id']}"
                await _retry(lambda h=handle, t=tracking: h.signal(demo_orders.OrderFulfilment.shipped, t))
        say("The warehouse shipped four orders; waiting for every order to finish")
        results = [await _retry(handle.result) for handle in handles]
    await client.service.close()
    table = Table("order", "outcome", title="every order finished")
    for result in results:
        table.add_row(result["order"], result["outcome"])
    console.print(table)
    return handles[1]


def run_demo(opts: DevOptions, say: Callable[[str], None], keep: bool) -> None:
    # The failing attempts are part of the story (a flaky payment, a missing stock): no tracebacks for them.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("ostinato.activity").setLevel(logging.ERROR)
    logging.getLogger("ostinato.kafka").setLevel(logging.ERROR)  # librdkafka's retries while a broker warms up
    try:
        handle = asyncio.run(_run(opts, say))
        from ostinato.services.cli.workflow import show

        say(f"The history of {handle.id} (its payment failed once and was retried):")
        show(handle.id, run_id="", server=f"http://127.0.0.1:{opts.port}", namespace="default", output="table")
    finally:
        if not keep:
            stop(opts.home, wipe=False, say=say)
