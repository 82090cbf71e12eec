"""The demo's business process, from the seed: order fulfilment as a saga.

Capture the payment, reserve the stock (refund the payment if that fails), then wait up to 14 days for the
warehouse's `shipped` signal; if it never comes, open a support case. Plain SDK code, as users write it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ostinato import RetryPolicy, activity, workflow
from ostinato.exceptions import ActivityError, ApplicationError

QUEUE = "orders"
RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=5)
SHORT = timedelta(seconds=10)


@activity.defn
async def capture_payment(order: dict[str, Any]) -> str:
    if activity.info().attempt == 1 and order.get("flaky_payment"):
        raise RuntimeError("the payment provider timed out")  # retried by the engine: the second attempt works
    return f"pay-{order['id']}"


@activity.defn
async def reserve_stock(order: dict[str, Any]) -> str:
    if order["sku"] == "sold-out":
        raise ApplicationError(f"no stock of {order['sku']}", type="OutOfStock", non_retryable=True)
    return f"res-{order['id']}"


@activity.defn
async def refund_payment(payment_id: str) -> str:
    return f"refund-of-{payment_id}"


@activity.defn
async def open_support_case(order: dict[str, Any]) -> str:
    return f"case-{order['id']}"


@workflow.defn
class OrderFulfilment:
    def __init__(self) -> None:
        self.stage = "received"
        self.tracking: str | None = None

    @workflow.signal
    def shipped(self, tracking: str) -> None:
        self.tracking = tracking

    @workflow.query
    def status(self) -> str:
        return self.stage

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        self.stage = "capturing payment"
        payment = await workflow.execute_activity(capture_payment, order, start_to_close_timeout=SHORT,
                                                  retry_policy=RETRY)
        self.stage = "reserving stock"
        try:
            await workflow.execute_activity(reserve_stock, order, start_to_close_timeout=SHORT, retry_policy=RETRY)
        except ActivityError:
            self.stage = "refunding"
            refund = await workflow.execute_activity(refund_payment, payment, start_to_close_timeout=SHORT,
                                                     retry_policy=RETRY)
            return {"order": order["id"], "outcome": "refunded (out of stock)", "refund": refund}
        self.stage = "waiting for shipment"
        wait = timedelta(seconds=order.get("ship_within_s", 14 * 24 * 3600))
        try:
            await workflow.wait_condition(lambda: self.tracking is not None, timeout=wait)
        except TimeoutError:
            self.stage = "opening a support case"
            case = await workflow.execute_activity(open_support_case, order, start_to_close_timeout=SHORT,
                                                   retry_policy=RETRY)
            return {"order": order["id"], "outcome": "never shipped: support case opened", "case": case}
        self.stage = "shipped"
        return {"order": order["id"], "outcome": "shipped", "tracking": self.tracking, "payment": payment}


WORKER = {"task_queue": QUEUE, "workflows": [OrderFulfilment],
          "activities": [capture_payment, reserve_stock, refund_payment, open_support_case]}
