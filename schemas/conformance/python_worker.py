"""The conformance activities served by the Python SDK's worker, for `driver.py`:

    PYTHONPATH=schemas/conformance python -m ostinato worker python_worker:worker --server {server}
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from ostinato import activity
from ostinato.exceptions import ApplicationError


@activity.defn(name="conformance.echo")
async def echo(*args: Any) -> Any:
    return args[0] if args else None


@activity.defn(name="conformance.fail")
async def fail(message: str) -> None:
    raise ApplicationError(message, message, type="ConformanceFailure", non_retryable=True)


@activity.defn(name="conformance.retry_later")
async def retry_later() -> None:
    raise ApplicationError("try again later", type="RetryLater", next_retry_delay=timedelta(milliseconds=1500))


@activity.defn(name="conformance.info")
async def info() -> dict[str, Any]:
    details = activity.info().heartbeat_details
    return {"attempt": activity.info().attempt, "previous": details[0] if details else None}


@activity.defn(name="conformance.heartbeat")
async def heartbeat(count: int) -> int:
    for step in range(1, count + 1):
        activity.heartbeat(step)
        await asyncio.sleep(0.01)
    return count


@activity.defn(name="conformance.wait_cancel")
async def wait_cancel() -> None:
    beats = 0
    while True:  # cancelled (asyncio.CancelledError) once a heartbeat's answer asks
        beats += 1
        activity.heartbeat(beats)
        await asyncio.sleep(0.05)


worker = {"task_queue": "conformance", "activities": [echo, fail, retry_later, info, heartbeat, wait_cancel]}
