"""Workflows the schedule scenarios start: one that returns at once, one that waits to be released."""

from __future__ import annotations

from ostinato import workflow


@workflow.defn
class Stamp:
    """Returns its argument and the time it ran: what a schedule's action left behind."""

    @workflow.run
    async def run(self, label: str) -> str:
        return f"{label}@{workflow.now().isoformat()}"


@workflow.defn
class Blocker:
    """Runs until released (a signal) or canceled: an action that overlaps the next one."""

    def __init__(self) -> None:
        self.released = False

    @workflow.signal
    def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.released)
        return "released"
