"""Local activities (`workflow.execute_local_activity`) on the time-skipping environment: run by the workflow's worker
inside its task, retried there, recorded as one `core_local_activity` marker; replay returns the recorded outcome
without running the function; a changed call is non-deterministic; a long backoff goes through a workflow timer and a
long attempt keeps its task alive by heartbeating it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import timedelta
from typing import Any

import pytest

from ostinato import activity, exceptions, workflow
from ostinato.common import RetryPolicy
from ostinato.exceptions import ActivityError, ApplicationError, CancelledError, NondeterminismError
from ostinato.sdk.data import DEFAULT
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Replayer, Worker
from tests.unit.sdk.support import run_async

Q = "local-q"
FAST = RetryPolicy(initial_interval=timedelta(milliseconds=10), maximum_interval=timedelta(milliseconds=20))
calls: list[tuple[str, int, bool]] = []  # (activity, attempt, is_local) per call


@activity.defn
async def flaky(name: str) -> str:
    info = activity.info()
    calls.append(("flaky", info.attempt, info.is_local))
    if info.attempt < 3:
        raise ApplicationError(f"attempt {info.attempt} failed")
    return f"hello {name} (attempt {info.attempt})"


@activity.defn
async def other(name: str) -> str:
    calls.append(("other", activity.info().attempt, activity.info().is_local))
    return f"other {name}"


@activity.defn
async def refuse(name: str) -> str:
    calls.append(("refuse", activity.info().attempt, activity.info().is_local))
    raise ApplicationError(f"no {name}", type="Refused", non_retryable=True)


@activity.defn
async def slow(seconds: float) -> str:
    calls.append(("slow", activity.info().attempt, activity.info().is_local))
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@workflow.defn(name="Greeting")
class Greeting:
    @workflow.run
    async def run(self, name: str) -> str:
        result = await workflow.execute_local_activity(flaky, name, start_to_close_timeout=timedelta(seconds=5),
                                                       retry_policy=FAST)
        await workflow.sleep(timedelta(minutes=1))  # a later task: without a cached copy it replays the marker
        return result


@workflow.defn(name="Greeting")
class ChangedGreeting:
    """Greeting's code after an incompatible change: another local activity at the same place."""

    @workflow.run
    async def run(self, name: str) -> str:
        result = await workflow.execute_local_activity(other, name, start_to_close_timeout=timedelta(seconds=5))
        await workflow.sleep(timedelta(minutes=1))
        return result


@workflow.defn(name="Greeting")
class RemoteGreeting:
    """Greeting's code after another incompatible change: a (remote) activity where the local one was."""

    @workflow.run
    async def run(self, name: str) -> str:
        result: str = await workflow.execute_activity(flaky, name, start_to_close_timeout=timedelta(seconds=5))
        await workflow.sleep(timedelta(minutes=1))
        return result


@workflow.defn
class Refusing:
    @workflow.run
    async def run(self, name: str) -> list[Any]:
        try:
            await workflow.execute_local_activity(refuse, name, schedule_to_close_timeout=timedelta(seconds=5))
        except ActivityError as error:
            cause = error.cause
            assert isinstance(cause, ApplicationError)
            return [error.activity_type, error.retry_state, cause.type, cause.message]
        return []


@workflow.defn
class Backoff:
    """A backoff above the local retry threshold: the next attempt waits on a workflow timer."""

    @workflow.run
    async def run(self, name: str) -> str:
        result: str = await workflow.execute_local_activity(
            flaky, name, start_to_close_timeout=timedelta(seconds=5), local_retry_threshold=timedelta(seconds=1),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=30), backoff_coefficient=1.0))
        return result


@workflow.defn
class Slow:
    @workflow.run
    async def run(self, seconds: float) -> str:
        result: str = await workflow.execute_local_activity(slow, seconds,
                                                            start_to_close_timeout=timedelta(seconds=10))
        return result


@workflow.defn
class Cancelling:
    @workflow.run
    async def run(self, wait: bool) -> str:
        kind = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED if wait else \
            workflow.ActivityCancellationType.TRY_CANCEL
        handle = workflow.start_local_activity(slow, 30.0, start_to_close_timeout=timedelta(seconds=60),
                                               cancellation_type=kind)
        if wait:
            await asyncio.sleep(0)  # its task runs (and so can wait); cancelled before, it could not
        handle.cancel()
        try:
            await handle
        except ActivityError as error:  # cancelled once its task ran: Temporal's, the cancellation is the cause
            assert wait and isinstance(error.cause, CancelledError), error.cause
        except asyncio.CancelledError:  # cancelled before its task ever ran: nothing could catch it there
            assert not wait
        else:
            return "not cancelled"
        await workflow.sleep(timedelta(seconds=1))  # goes on (in a later task) while the attempt stops
        return "cancelled"


@workflow.defn
class TimingOut:
    @workflow.run
    async def run(self, schedule_to_close: bool) -> list[Any]:
        options: dict[str, Any] = {"schedule_to_close_timeout": timedelta(milliseconds=300)} if schedule_to_close \
            else {"start_to_close_timeout": timedelta(milliseconds=200),
                  "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=10), maximum_attempts=2)}
        try:
            await workflow.execute_local_activity(slow, 30.0, **options)
        except ActivityError as error:
            cause = error.cause
            assert isinstance(cause, exceptions.TimeoutError)
            return [error.retry_state, cause.type]
        return []


@workflow.defn
class SlowWithSignals:
    def __init__(self) -> None:
        self.signals: list[str] = []

    @workflow.signal
    def note(self, text: str) -> None:
        self.signals.append(text)

    @workflow.run
    async def run(self, seconds: float) -> list[str]:
        slept = await workflow.execute_local_activity(slow, seconds, start_to_close_timeout=timedelta(seconds=10))
        return [*self.signals, slept]


@pytest.fixture(autouse=True)
def _clear() -> None:
    calls.clear()


def markers(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The local activity markers' data (decoded), with their result and failure."""
    found = []
    for event in history:
        attrs = event["attributes"][1]
        if event["event_type"] == "MARKER_RECORDED" and attrs["marker_name"] == "core_local_activity":
            data = DEFAULT.decode(attrs["details"]["data"])[0]
            found.append({**data, "result": DEFAULT.decode(attrs["details"].get("result", [])),
                          "failure": attrs["failure"]})
    return found


def kinds(history: list[dict[str, Any]]) -> list[str]:
    return [event["event_type"] for event in history]


@run_async
async def test_a_local_activity_that_fails_twice_then_succeeds_leaves_one_marker() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Greeting], activities=[flaky]):
        handle = await env.client.start_workflow(Greeting.run, "Ada", id="greeting", task_queue=Q)
        assert await handle.result() == "hello Ada (attempt 3)"
        history = await handle.fetch_history()
    assert calls == [("flaky", 1, True), ("flaky", 2, True), ("flaky", 3, True)]
    assert not [kind for kind in kinds(history) if kind.startswith("ACTIVITY_TASK")]
    [marker] = markers(history)
    assert (marker["seq"], marker["activity_id"], marker["activity_type"], marker["attempt"]) == (1, "1", "flaky", 3)
    assert marker["result"] == ["hello Ada (attempt 3)"] and marker["failure"] is None
    assert marker["backoff_ms"] is None
    # Recorded with the first task's answer, before the timer the workflow starts next.
    first_done = kinds(history).index("WORKFLOW_TASK_COMPLETED")
    assert kinds(history)[first_done + 1:first_done + 3] == ["MARKER_RECORDED", "TIMER_STARTED"]


@run_async
async def test_replay_returns_the_recorded_result_without_running_the_function() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        # No cached copies: the task after the timer replays the whole history, the marker included.
        worker = Worker(env.client, task_queue=Q, workflows=[Greeting], activities=[flaky], max_cached_workflows=0)
        async with worker:
            handle = await env.client.start_workflow(Greeting.run, "Ada", id="greeting", task_queue=Q)
            assert await handle.result() == "hello Ada (attempt 3)"
            history = await handle.fetch_history()
        assert worker.workflow_handler is not None and worker.workflow_handler.replays >= 2
    assert len(calls) == 3  # the replays ran no attempt
    assert Replayer(workflows=[Greeting]).replay(history).failure is None
    assert len(calls) == 3


@run_async
async def test_a_changed_local_activity_call_is_non_deterministic() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Greeting], activities=[flaky]):
        handle = await env.client.start_workflow(Greeting.run, "Ada", id="greeting", task_queue=Q)
        await handle.result()
        history = await handle.fetch_history()
    changed = Replayer(workflows=[ChangedGreeting]).replay(history).failure
    assert isinstance(changed, NondeterminismError)
    assert "'flaky'" in str(changed) and "'other'" in str(changed)
    remote = Replayer(workflows=[RemoteGreeting]).replay(history).failure
    assert isinstance(remote, NondeterminismError) and "local activity 'flaky'" in str(remote)
    assert len(calls) == 3


@run_async
async def test_a_failed_local_activity_raises_activity_error_with_its_cause() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Refusing], activities=[refuse]):
        result = await env.client.execute_workflow(Refusing.run, "tea", id="refusing", task_queue=Q)
        history = await env.client.get_workflow_handle("refusing").fetch_history()
    assert result == ["refuse", "NON_RETRYABLE_FAILURE", "Refused", "no tea"]
    [marker] = markers(history)
    assert marker["failure"]["type"] == "Refused" and marker["attempt"] == 1
    assert calls == [("refuse", 1, True)]


@run_async
async def test_a_backoff_past_the_local_retry_threshold_continues_with_a_timer() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Backoff], activities=[flaky]):
        handle = await env.client.start_workflow(Backoff.run, "Ada", id="backoff", task_queue=Q)
        assert await handle.result() == "hello Ada (attempt 3)"
        history = await handle.fetch_history()
    first, second, third = markers(history)
    assert (first["attempt"], first["backoff_ms"], first["failure"]["message"]) == (1, 30_000, "attempt 1 failed")
    assert (second["attempt"], second["backoff_ms"]) == (2, 30_000)
    assert (third["attempt"], third["result"], third["backoff_ms"]) == (3, ["hello Ada (attempt 3)"], None)
    # Each backoff is a workflow timer; each next attempt runs in the task its firing starts.
    order = [kind for kind in kinds(history) if kind in ("MARKER_RECORDED", "TIMER_STARTED", "TIMER_FIRED")]
    assert order == ["MARKER_RECORDED", "TIMER_STARTED", "TIMER_FIRED"] * 2 + ["MARKER_RECORDED"]
    assert calls == [("flaky", 1, True), ("flaky", 2, True), ("flaky", 3, True)]
    assert Replayer(workflows=[Backoff]).replay(history).failure is None


@run_async
async def test_a_local_activity_outlasting_the_task_timeout_heartbeats_the_task() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Slow], activities=[slow]):
        handle = await env.client.start_workflow(Slow.run, 1.5, id="slow", task_queue=Q,
                                                 task_timeout=timedelta(seconds=1))
        assert await handle.result() == "slept 1.5"
        history = await handle.fetch_history()
    assert calls == [("slow", 1, True)]  # one attempt, across two tasks
    events = kinds(history)
    assert "WORKFLOW_TASK_TIMED_OUT" not in events
    # The first task was answered (with nothing yet) at 80% of its timeout; the marker came with a later one.
    assert events.count("WORKFLOW_TASK_COMPLETED") >= 2
    assert events.index("MARKER_RECORDED") > events.index("WORKFLOW_TASK_COMPLETED") + 1
    [marker] = markers(history)
    assert marker["result"] == ["slept 1.5"]
    assert Replayer(workflows=[Slow]).replay(history).failure is None


@run_async
async def test_a_cancelled_local_activity_stops_without_holding_the_task() -> None:
    started = time.monotonic()
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Cancelling], activities=[slow]):
        # TRY_CANCEL: the workflow goes on at once; nothing is recorded (replay cancels it again at the same point).
        assert await env.client.execute_workflow(Cancelling.run, False, id="try", task_queue=Q) == "cancelled"
        history = await env.client.get_workflow_handle("try").fetch_history()
        assert markers(history) == [] and kinds(history)[-1] == "WORKFLOW_EXECUTION_COMPLETED"
        # WAIT_CANCELLATION_COMPLETED: the workflow waits for the stopped attempt, whose cancellation is recorded.
        assert await env.client.execute_workflow(Cancelling.run, True, id="wait", task_queue=Q) == "cancelled"
        waited = await env.client.get_workflow_handle("wait").fetch_history()
    [marker] = markers(waited)
    assert marker["failure"]["kind"] == "CANCELED" and marker["retry_state"] == "CANCEL_REQUESTED"
    assert Replayer(workflows=[Cancelling]).replay(history).failure is None
    assert Replayer(workflows=[Cancelling]).replay(waited).failure is None
    assert time.monotonic() - started < 10  # neither task waited for the 30 s attempt


@run_async
async def test_local_activity_timeouts() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[TimingOut], activities=[slow]):
        # Each attempt cut at its start-to-close timeout, and retried up to the policy's maximum.
        assert await env.client.execute_workflow(TimingOut.run, False, id="start-to-close", task_queue=Q) == \
            ["MAXIMUM_ATTEMPTS_REACHED", "START_TO_CLOSE"]
        assert calls == [("slow", 1, True), ("slow", 2, True)]
        # All attempts together cut at the schedule-to-close timeout.
        assert await env.client.execute_workflow(TimingOut.run, True, id="schedule-to-close", task_queue=Q) == \
            ["TIMEOUT", "SCHEDULE_TO_CLOSE"]


@run_async
async def test_a_signal_during_a_heartbeated_local_activity_is_handled_while_it_runs() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        worker = Worker(env.client, task_queue=Q, workflows=[SlowWithSignals], activities=[slow])
        async with worker:
            handle = await env.client.start_workflow(SlowWithSignals.run, 1.5, id="signals", task_queue=Q,
                                                     task_timeout=timedelta(seconds=1))
            await asyncio.sleep(0.3)
            await handle.signal(SlowWithSignals.note, "during")
            assert await handle.result() == ["during", "slept 1.5"]
            history = await handle.fetch_history()
        assert worker.workflow_handler is not None and worker.workflow_handler.replays == 1  # the first task only
    events = kinds(history)
    # The signal came with the task after the heartbeat (the local activity still running), the marker later.
    assert events.index("WORKFLOW_EXECUTION_SIGNALED") < events.index("MARKER_RECORDED")
    assert calls == [("slow", 1, True)]
    assert Replayer(workflows=[SlowWithSignals]).replay(history).failure is None


@activity.defn
async def quick(name: str) -> str:
    return f"hi {name}"


@workflow.defn
class GuardedLocal:
    @workflow.run
    async def run(self, name: str) -> str:
        # Temporal's common pattern: a wait bounded by a timeout. Its timer is made in the activation that starts the
        # local activity and taken back, never sent, when the outcome comes in the same task.
        result = await asyncio.wait_for(
            workflow.execute_local_activity(quick, name, start_to_close_timeout=timedelta(seconds=5)), timeout=60)
        await workflow.sleep(timedelta(minutes=1))
        return result


@run_async
async def test_a_command_taken_back_when_the_outcome_came_is_taken_back_on_replay_too() -> None:
    """Found by review: replay met the timer the live run had taken back, before the marker, and called it
    non-deterministic; with no cache every task replays, so the run never finished."""
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[GuardedLocal], activities=[quick], max_cached_workflows=0):
        handle = await env.client.start_workflow(GuardedLocal.run, "Ada", id="guarded", task_queue=Q)
        assert await asyncio.wait_for(handle.result(), 20) == "hi Ada"
        history = await handle.fetch_history()
    assert "WORKFLOW_TASK_FAILED" not in kinds(history)
    assert Replayer(workflows=[GuardedLocal]).replay(history).failure is None


@activity.defn
async def stubborn() -> str:
    end = time.monotonic() + 6
    while time.monotonic() < end:
        with contextlib.suppress(asyncio.CancelledError):  # ignores its cancellation
            await asyncio.sleep(0.05)
    return "done"


@workflow.defn
class Stubborn:
    @workflow.run
    async def run(self) -> str:
        try:
            return await workflow.execute_local_activity(stubborn, start_to_close_timeout=timedelta(milliseconds=300),
                                                         retry_policy=RetryPolicy(maximum_attempts=1))
        except ActivityError as error:
            return f"failed: {type(error.cause).__name__}"


@run_async
async def test_a_timeout_is_the_outcome_at_once_even_if_the_attempt_ignores_its_cancellation() -> None:
    """Found by review: the worker waited for the attempt to stop, heartbeating the task meanwhile."""
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Stubborn], activities=[stubborn]):
        handle = await env.client.start_workflow(Stubborn.run, id="stubborn", task_queue=Q,
                                                 task_timeout=timedelta(seconds=2))
        answer = await handle.result()
        history = await handle.fetch_history()
    assert answer == "failed: TimeoutError"
    # One task: waiting for the attempt (6 s) would have heartbeated it at 80% of its 2 s, again and again.
    assert kinds(history).count("WORKFLOW_TASK_COMPLETED") == 1, kinds(history)


SLOW_STARTS: list[float] = []


@activity.defn
async def slow_once(seconds: float) -> str:
    SLOW_STARTS.append(seconds)
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@workflow.defn
class SlowLocal:
    @workflow.run
    async def run(self, seconds: float) -> str:
        return await workflow.execute_local_activity(slow_once, seconds, start_to_close_timeout=timedelta(seconds=30))


@run_async
async def test_a_local_activity_longer_than_a_task_is_adopted_by_a_fresh_copy_not_started_again() -> None:
    """Found by review: with no cached copy, each heartbeated task's fresh copy cancelled the running attempt and
    started it again, so a local activity longer than 80% of the task timeout never finished."""
    SLOW_STARTS.clear()
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[SlowLocal], activities=[slow_once], max_cached_workflows=0):
        handle = await env.client.start_workflow(SlowLocal.run, 1.5, id="slow-local", task_queue=Q,
                                                 task_timeout=timedelta(seconds=1))
        assert await asyncio.wait_for(handle.result(), 20) == "slept 1.5"
        history = await handle.fetch_history()
    assert SLOW_STARTS == [1.5]  # one attempt, carried across the heartbeated tasks
    assert len(markers(history)) == 1 and "WORKFLOW_TASK_FAILED" not in kinds(history)
