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
