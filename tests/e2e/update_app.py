"""A small application with updates and an activity completed from outside, for the end-to-end tests:
`ostinato worker tests.e2e.update_app:worker`."""

from __future__ import annotations

from datetime import timedelta

from ostinato import activity, workflow


@activity.defn
async def price(item: str) -> int:
    return len(item)


@workflow.defn
class Cart:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.done = False

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: self.done)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.items

    @workflow.update
    def add(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    @add.validator
    def validate_add(self, item: str) -> None:
        if not item:
            raise ValueError("an item needs a name")

    @workflow.update
    async def add_priced(self, item: str) -> int:
        cost = await workflow.execute_activity(price, item, start_to_close_timeout=timedelta(seconds=10))
        self.items.append(item)
        return cost

    @workflow.signal
    def checkout(self) -> None:
        self.done = True


@activity.defn
async def approve(token_file: str) -> str:
    """Leaves its task token where the test reads it, and its answer to whoever completes it."""
    from pathlib import Path

    Path(token_file).write_bytes(activity.info().task_token)
    activity.raise_complete_async()


@workflow.defn
class Approval:
    @workflow.run
    async def run(self, token_file: str) -> str:
        return await workflow.execute_activity(approve, token_file, start_to_close_timeout=timedelta(minutes=5))


worker = {"task_queue": "cart-q", "workflows": [Cart, Approval], "activities": [price, approve]}
WORKFLOWS = [Cart, Approval]
