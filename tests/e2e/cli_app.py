"""A tiny application for the command-line tests: `ostinato worker tests.e2e.cli_app:worker`."""

from __future__ import annotations

from datetime import timedelta

from ostinato import activity, workflow


@activity.defn
async def shout(text: str) -> str:
    return text.upper()


@workflow.defn
class Shout:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(shout, text, start_to_close_timeout=timedelta(seconds=10))


worker = {"task_queue": "cli-q", "workflows": [Shout], "activities": [shout]}
WORKFLOWS = [Shout]


@activity.defn
async def slow_job(marker: str) -> str:
    """The first attempt records which process runs it and then works (heartbeating) until killed."""
    import asyncio
    import os
    from pathlib import Path

    if activity.info().attempt == 1:
        Path(marker).write_text(str(os.getpid()))
        for _ in range(600):
            activity.heartbeat()
            await asyncio.sleep(0.1)
    return f"done by {os.getpid()} on attempt {activity.info().attempt}"


@workflow.defn
class SlowJob:
    @workflow.run
    async def run(self, marker: str) -> str:
        from ostinato import RetryPolicy

        return await workflow.execute_activity(slow_job, marker, start_to_close_timeout=timedelta(seconds=120),
                                               heartbeat_timeout=timedelta(seconds=2),
                                               retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200)))


slow_worker = {"task_queue": "cli-slow", "workflows": [SlowJob], "activities": [slow_job]}


@activity.defn
async def counted(marker_dir: str) -> str:
    """Counts its executions outside the engine: one file per execution, named by attempt and process."""
    import os
    from pathlib import Path

    info = activity.info()
    Path(marker_dir, f"attempt-{info.attempt}-pid-{os.getpid()}").touch()
    return f"attempt {info.attempt}"


@workflow.defn
class Counted:
    @workflow.run
    async def run(self, marker_dir: str) -> str:
        from ostinato import RetryPolicy

        return await workflow.execute_activity(counted, marker_dir, start_to_close_timeout=timedelta(seconds=2),
                                               retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)))


eager_worker = {"task_queue": "cli-eager", "workflows": [Counted], "activities": [counted]}


@activity.defn
async def steady(marker_dir: str) -> str:
    """Heartbeats every 0.1 s for 4 s, counting its executions outside the engine (one file per execution)."""
    import asyncio
    import os
    from pathlib import Path

    info = activity.info()
    Path(marker_dir, f"attempt-{info.attempt}-pid-{os.getpid()}").touch()
    for _ in range(40):
        activity.heartbeat()
        await asyncio.sleep(0.1)
    return f"attempt {info.attempt}"


@workflow.defn
class Steady:
    @workflow.run
    async def run(self, marker_dir: str) -> str:
        from ostinato import RetryPolicy

        return await workflow.execute_activity(steady, marker_dir, start_to_close_timeout=timedelta(seconds=60),
                                               heartbeat_timeout=timedelta(seconds=1),
                                               retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)))


steady_worker = {"task_queue": "cli-steady", "workflows": [Steady], "activities": [steady]}
