"""The server's batch worker: runs the engine's `ostinato.BatchOperation` workflow (`sdk/batch_workflow.py`) on the
`ostinato-batch` queue, inside `ostinato server`, so batch jobs need nothing but servers. Every server runs one; the
queue's consumer group shares the jobs among them, and a job whose server died continues on another (or on the same
one after a restart) from its history."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import web

log = logging.getLogger("ostinato.batch")
RETRY_S = 1.0


def install(app: web.Application, endpoint: str, api_key: str | None = None) -> None:
    """Run the batch worker while the app runs, against this server's own API at `endpoint` (with `api_key` when
    the server has auth: its internal token)."""
    task: asyncio.Task[None] | None = None

    async def start(app: web.Application) -> None:
        nonlocal task
        task = asyncio.get_running_loop().create_task(_serve(endpoint, api_key))

    async def stop(app: web.Application) -> None:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.on_startup.append(start)
    app.on_shutdown.append(stop)


async def _serve(endpoint: str, api_key: str | None) -> None:
    from ostinato.sdk.batch_workflow import BATCH_TASK_QUEUE, BatchOperation, batch_activities
    from ostinato.sdk.client import Client
    from ostinato.sdk.worker import Worker

    await asyncio.sleep(RETRY_S)  # start-up hooks run before the API listens
    while True:  # a broker hiccup must not end batch jobs for good
        try:
            client = await Client.connect(endpoint, identity="ostinato-batch", api_key=api_key)
            worker = Worker(client, task_queue=BATCH_TASK_QUEUE, workflows=[BatchOperation],
                            activities=batch_activities(client))
            await worker.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("the batch worker stopped; starting it again in %.0f s", RETRY_S, exc_info=True)
        await asyncio.sleep(RETRY_S)
