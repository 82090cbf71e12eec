"""The application the web UI's browser tests look at: `ostinato worker tests.browser.ui_app:worker`.

A parcel waits for a `deliver` signal while its `weigh` activity sits scheduled on a queue no worker serves, so a
run always has a pending activity to show until it is delivered. A household runs chores as child workflows (one
of them fails), so its run has finished children to list; a relay continues as new until its leg reaches the end,
so its runs form a chain."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ostinato import activity, workflow
from ostinato.exceptions import ApplicationError, ChildWorkflowError

QUEUE = "ui-q"
NOBODY = "ui-nobody"  # no worker polls this queue: the activity stays pending


@activity.defn
async def weigh(order: dict[str, Any]) -> int:
    return len(order)


@workflow.defn
class Parcel:
    def __init__(self) -> None:
        self.delivered_to = ""

    @workflow.signal
    def deliver(self, to: str) -> None:
        self.delivered_to = to

    @workflow.query
    def where(self) -> str:
        return self.delivered_to or "in the depot"

    @workflow.update
    def redirect(self, to: str) -> str:
        self.delivered_to = to
        return f"redirected to {to}"

    @redirect.validator
    def check_redirect(self, to: str) -> None:
        if not to:
            raise ValueError("a redirect needs an address")

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        workflow.start_activity(weigh, order, task_queue=NOBODY, start_to_close_timeout=timedelta(hours=1))
        await workflow.wait_condition(lambda: bool(self.delivered_to))
        return {"order": order.get("id"), "delivered_to": self.delivered_to}


@workflow.defn
class Chore:
    @workflow.run
    async def run(self, name: str) -> str:
        if name == "ironing":
            raise ApplicationError("the iron is broken", type="Broken", non_retryable=True)
        return f"{name} done"


@workflow.defn
class Household:
    @workflow.run
    async def run(self, chores: list[str]) -> list[str]:
        done = []
        for chore in chores:
            try:
                done.append(await workflow.execute_child_workflow(Chore.run, chore,
                                                                  id=f"{workflow.info().workflow_id}-{chore}"))
            except ChildWorkflowError:
                done.append(f"{chore} failed")
        return done


@workflow.defn
class Nursery:
    """Waits for its one child, a parcel, then for a `close` signal: it runs on after its child finished."""

    def __init__(self) -> None:
        self.closing = False

    @workflow.signal
    def close(self) -> None:
        self.closing = True

    @workflow.run
    async def run(self) -> str:
        delivered = await workflow.execute_child_workflow(Parcel.run, {"id": "child"},
                                                          id=f"{workflow.info().workflow_id}-parcel")
        await workflow.wait_condition(lambda: self.closing)
        return str(delivered["delivered_to"])


@workflow.defn
class Relay:
    @workflow.run
    async def run(self, leg: int, last: int) -> int:
        if leg < last:
            workflow.continue_as_new(leg + 1, last)
        return leg


worker = {"task_queue": QUEUE, "workflows": [Parcel, Chore, Household, Nursery, Relay], "activities": [weigh]}
WORKFLOWS = [Parcel, Chore, Household, Nursery, Relay]
# Worker versioning: a versioned worker of build ui-v1 on its own queue (the test makes ui-v1 current first).
VERSIONED_QUEUE = "ui-versioned"
versioned_worker = {"task_queue": VERSIONED_QUEUE, "workflows": [Parcel], "build_id": "ui-v1",
                    "use_worker_versioning": True}
