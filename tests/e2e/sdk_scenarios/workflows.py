"""The workflows and activities of the SDK scenarios: small, each showing one thing a user relies on.

Activities learn nothing from module globals that a test reads back: what a test checks travels through
results, heartbeat details and history, so the same code runs on a worker in another process.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from ostinato import RetryPolicy, activity, workflow
from ostinato.exceptions import ActivityError, ApplicationError, CancelledError

SHORT = timedelta(seconds=10)
NO_RETRY = RetryPolicy(maximum_attempts=1)


# -- hello --------------------------------------------------------------------------------------------------------

@activity.defn
async def greet(name: str) -> str:
    return f"Hello, {name}"


@workflow.defn
class Hello:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(greet, name, start_to_close_timeout=SHORT)


# -- saga ---------------------------------------------------------------------------------------------------------

@activity.defn
async def charge(order: str) -> str:
    return f"charge-{order}"


@activity.defn
async def reserve(order: str) -> str:
    raise ApplicationError(f"no stock for {order}", "sku-42", type="OutOfStock", non_retryable=True)


@activity.defn
async def refund(charge_id: str) -> str:
    return f"refunded {charge_id}"


@workflow.defn
class Saga:
    """Charge, then reserve; when reserving fails for good, refund the charge and fail with the cause."""

    @workflow.run
    async def run(self, order: str) -> str:
        compensations: list[str] = []
        try:
            charge_id = await workflow.execute_activity(charge, order, start_to_close_timeout=SHORT)
            compensations.append(charge_id)
            await workflow.execute_activity(reserve, order, start_to_close_timeout=SHORT)
            return "done"
        except ActivityError:
            for charge_id in reversed(compensations):
                await workflow.execute_activity(refund, charge_id, start_to_close_timeout=SHORT)
            raise


# -- retries ------------------------------------------------------------------------------------------------------

@activity.defn
async def flaky() -> list[list[int]]:
    """Fails twice, then succeeds. Each attempt records (attempt, when it was scheduled in ms) in its heartbeat,
    which the next attempt receives, so the last one returns the whole story."""
    info = activity.info()
    seen = [*(info.heartbeat_details[0] if info.heartbeat_details else []),
            [info.attempt, int(info.current_attempt_scheduled_time.timestamp() * 1000)]]
    activity.heartbeat(seen)
    if info.attempt < 3:
        raise ApplicationError(f"attempt {info.attempt} fails", type="Flaky")
    return seen


@workflow.defn
class Retrying:
    @workflow.run
    async def run(self) -> list[list[int]]:
        return await workflow.execute_activity(
            flaky, start_to_close_timeout=SHORT,
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2))


# -- signals, queries, timers -------------------------------------------------------------------------------------

@workflow.defn
class Shipment:
    """Waits up to 14 days (or `wait_s`: a real engine has no virtual time) for `shipped`; a query tells where it
    stands."""

    def __init__(self) -> None:
        self.tracking: str | None = None
        self.token = ""
        self.log: list[str] = []

    @workflow.signal
    def shipped(self, tracking: str) -> None:
        self.tracking = tracking
        self.log.append(f"signal {tracking}")

    @workflow.query
    def status(self) -> str:
        return f"shipped {self.tracking}" if self.tracking else "waiting"

    @workflow.query
    def state(self) -> dict[str, object]:
        return {"token": self.token, "log": self.log, "now": workflow.now().isoformat()}

    @workflow.run
    async def run(self, wait_s: float = 14 * 24 * 3600) -> str:
        # Drawn from the run's seed: a replay after a cache eviction must draw the very same token.
        self.token = str(workflow.uuid4())
        self.log.append(f"started {workflow.random().randint(0, 10**9)}")
        try:
            await workflow.wait_condition(lambda: self.tracking is not None, timeout=timedelta(seconds=wait_s))
        except TimeoutError:
            return "support case"
        greeting = await workflow.execute_activity(greet, self.tracking, start_to_close_timeout=SHORT)
        return f"{greeting} {self.token}"


# -- child workflows ----------------------------------------------------------------------------------------------

@workflow.defn
class Child:
    """Waits for `finish` (or is cancelled, or terminated)."""

    def __init__(self) -> None:
        self.finished = False

    @workflow.signal
    def finish(self) -> None:
        self.finished = True

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.finished)
        return "child finished"


@workflow.defn
class Parent:
    """Starts a child with the given parent-close policy and completes while the child still waits."""

    @workflow.run
    async def run(self, policy: str) -> list[str]:
        child = await workflow.start_child_workflow(
            Child.run, id=f"{workflow.info().workflow_id}-child",
            parent_close_policy=workflow.ParentClosePolicy(policy))
        return [child.id, child.run_id]


# -- continue-as-new ----------------------------------------------------------------------------------------------

@workflow.defn
class Counter:
    """Counts to `limit`, one run per step, carrying the count and the run ids seen so far."""

    @workflow.run
    async def run(self, count: int, limit: int, runs: list[str]) -> dict[str, object]:
        runs = [*runs, workflow.info().run_id]
        count += 1
        if count < limit:
            workflow.continue_as_new(count, limit, runs)
        return {"count": count, "runs": runs}


# -- cancellation -------------------------------------------------------------------------------------------------

@activity.defn
async def heartbeating() -> str:
    """Heartbeats until cancelled; says so by its cancellation details."""
    try:
        while True:
            activity.heartbeat("alive")
            await asyncio.sleep(0.02)
    except asyncio.CancelledError:
        raise CancelledError("stopped on request", "saw cancel") from None


@workflow.defn
class CancelsActivity:
    """Starts a heartbeating activity; on `stop` it cancels it and reports what the activity said."""

    def __init__(self) -> None:
        self.stop_requested = False

    @workflow.signal
    def stop(self) -> None:
        self.stop_requested = True

    @workflow.run
    async def run(self, wait_for_cancelled: bool) -> str:
        kind = workflow.ActivityCancellationType
        handle = workflow.start_activity(
            heartbeating, start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=1),
            retry_policy=NO_RETRY,
            cancellation_type=kind.WAIT_CANCELLATION_COMPLETED if wait_for_cancelled else kind.TRY_CANCEL)
        await workflow.wait_condition(lambda: self.stop_requested)
        handle.cancel()
        try:
            await handle
        except asyncio.CancelledError:
            return "activity cancelled"
        except ActivityError as error:
            return f"activity error: {type(error.cause).__name__}"
        return "activity completed"


@workflow.defn
class CancelledByClient:
    """Runs a heartbeating activity that only a cancellation of the workflow stops."""

    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(
            heartbeating, start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=1),
            retry_policy=NO_RETRY, cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)


# -- patching -----------------------------------------------------------------------------------------------------

@activity.defn
async def shout(name: str) -> str:
    return f"HELLO, {name.upper()}"


@workflow.defn(name="Patchy")
class PatchyV1:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(greet, "old", start_to_close_timeout=SHORT)


@workflow.defn(name="Patchy")
class PatchyV2:
    @workflow.run
    async def run(self) -> str:
        if workflow.patched("x"):
            return await workflow.execute_activity(shout, "new", start_to_close_timeout=SHORT)
        return await workflow.execute_activity(greet, "old", start_to_close_timeout=SHORT)


# -- non-determinism ----------------------------------------------------------------------------------------------

@activity.defn
async def step_one() -> str:
    return "one"


@activity.defn
async def step_two() -> str:
    return "two"


class _Gate:
    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True


@workflow.defn(name="Ordered")
class OrderedA(_Gate):
    """Version A: step one, wait for `proceed`, step two."""

    @workflow.run
    async def run(self) -> list[str]:
        first = await workflow.execute_activity(step_one, start_to_close_timeout=SHORT)
        await workflow.wait_condition(lambda: self.go)
        return [first, await workflow.execute_activity(step_two, start_to_close_timeout=SHORT)]


@workflow.defn(name="Ordered")
class OrderedB(_Gate):
    """Version B swaps the steps: replaying a history of A diverges at the first activity."""

    @workflow.run
    async def run(self) -> list[str]:
        first = await workflow.execute_activity(step_two, start_to_close_timeout=SHORT)
        await workflow.wait_condition(lambda: self.go)
        return [first, await workflow.execute_activity(step_one, start_to_close_timeout=SHORT)]


# -- worker shutdown ----------------------------------------------------------------------------------------------

@activity.defn
async def long_job() -> list[object]:
    """The first attempt heartbeats until its worker stops it; a later attempt finishes at once and tells which
    attempt it was and why the one before ended."""
    info = activity.info()
    if info.attempt == 1:
        while True:
            activity.heartbeat("working")
            await asyncio.sleep(0.02)
    return [info.attempt, list(info.heartbeat_details)]


@workflow.defn
class LongJob:
    @workflow.run
    async def run(self) -> list[object]:
        return await workflow.execute_activity(
            long_job, start_to_close_timeout=timedelta(minutes=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3))


ALL_WORKFLOWS = [Hello, Saga, Retrying, Shipment, Child, Parent, Counter, CancelsActivity, CancelledByClient]
ALL_ACTIVITIES = [greet, charge, reserve, refund, flaky, heartbeating]


# -- a workflow retried by its retry policy -----------------------------------------------------------------------

@workflow.defn
class FailsThrice:
    """Fails on its first three attempts: each retry is a new run that sees its attempt and the previous failure."""

    @workflow.run
    async def run(self, name: str) -> list[object]:
        info = workflow.info()
        last = workflow.get_last_failure()
        if info.attempt < 4:
            raise ApplicationError(f"{name}: attempt {info.attempt} fails", type="Transient")
        return [info.attempt, info.first_execution_run_id, str(last)]


# -- cron ---------------------------------------------------------------------------------------------------------

@workflow.defn
class Tally:
    """A cron workflow: each run adds one to what the previous run returned."""

    @workflow.run
    async def run(self) -> int:
        previous: int = workflow.get_last_completion_result(int) if workflow.has_last_completion_result() else 0
        return previous + 1


# -- a parent's cancellation reaching its child -------------------------------------------------------------------

@workflow.defn
class AwaitsChild:
    """Awaits a `Child` started with the given cancellation type. The parent close policy is ABANDON, so what
    happens to the child comes from the cancellation alone, not from the parent closing."""

    @workflow.run
    async def run(self, cancellation_type: str) -> str:
        return await workflow.execute_child_workflow(  # type: ignore[no-any-return]
            Child.run, id=f"{workflow.info().workflow_id}-child",
            cancellation_type=workflow.ChildWorkflowCancellationType[cancellation_type],
            parent_close_policy=workflow.ParentClosePolicy.ABANDON)


# -- a local activity retried on the worker -----------------------------------------------------------------------

@activity.defn
async def flaky_local(order: str) -> list[object]:
    """Fails on its first two attempts; the third returns its attempt and whether it ran as a local activity."""
    info = activity.info()
    if info.attempt < 3:
        raise ApplicationError(f"{order}: attempt {info.attempt} fails", type="Flaky")
    return [order, info.attempt, info.is_local]


@workflow.defn
class RunsLocalActivity:
    @workflow.run
    async def run(self, order: str) -> list[object]:
        return await workflow.execute_local_activity(  # type: ignore[no-any-return]
            flaky_local, order, start_to_close_timeout=SHORT,
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=5))


# -- an activity completed from outside the worker ----------------------------------------------------------------

class Approvals:
    """Temporal's async-completion sample: the activity hands its task token on and returns without an answer;
    whoever holds the token (here the test, with its own client) completes it later. The tokens travel in this
    object, which the test owns and registers (`activities=[approvals.request_approval]`)."""

    def __init__(self) -> None:
        self.tokens: asyncio.Queue[bytes] = asyncio.Queue()

    @activity.defn
    async def request_approval(self, request: str) -> str:
        self.tokens.put_nowait(activity.info().task_token)
        activity.raise_complete_async()


@workflow.defn
class AwaitsApproval:
    @workflow.run
    async def run(self, request: str) -> str:
        return await workflow.execute_activity_method(
            Approvals.request_approval, request, activity_id="approval", start_to_close_timeout=timedelta(minutes=5))
