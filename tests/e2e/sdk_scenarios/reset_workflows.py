"""Two versions of one workflow type for the reset scenarios: the deployed one breaks at step 3, the fixed one
does not; up to step 3 they command the same, so the fixed code replays the copied history."""

from __future__ import annotations

from datetime import timedelta

from ostinato import activity, workflow
from ostinato.exceptions import ApplicationError

STEP = timedelta(seconds=10)


@activity.defn
async def pick(items: list[str]) -> str:
    return "picked " + ",".join(items)


@activity.defn
async def pack(items: list[str]) -> str:
    return "packed " + ",".join(items)


@workflow.defn(name="Fulfil")
class FulfilBuggy:
    """Waits for two items, picks and packs them, then fails at step 3 (the bad deploy)."""

    def __init__(self) -> None:
        self.items: list[str] = []

    @workflow.signal
    def add(self, item: str) -> None:
        self.items.append(item)

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: len(self.items) >= 2)
        await workflow.execute_activity(pick, self.items, start_to_close_timeout=STEP)
        await workflow.execute_activity(pack, self.items, start_to_close_timeout=STEP)
        raise ApplicationError("step 3: shipping label service renamed", non_retryable=True)


@workflow.defn(name="Fulfil")
class FulfilFixed(FulfilBuggy):
    """The fix: step 3 ships."""

    @workflow.signal
    def add(self, item: str) -> None:
        self.items.append(item)

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: len(self.items) >= 2)
        picked = await workflow.execute_activity(pick, self.items, start_to_close_timeout=STEP)
        packed = await workflow.execute_activity(pack, self.items, start_to_close_timeout=STEP)
        return f"{picked}; {packed}; shipped {','.join(self.items)}"
