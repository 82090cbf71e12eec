"""The SDK as a user drives it: workflows, activities, signals, queries, children, continue-as-new, cancellation,
patching, non-determinism, worker loss and cache eviction, workflow retries and cron, a parent's cancellation
reaching its child, local activities and async activity completion, through the public imports only."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import timedelta
from typing import Any

import pytest

from ostinato.client import WorkflowHandle
from ostinato.common import RetryPolicy
from ostinato.exceptions import (
    ActivityError,
    ApplicationError,
    NondeterminismError,
    QueryRejectedError,
    RPCError,
    WorkflowFailureError,
)
from ostinato.worker import Replayer
from tests.e2e.sdk_scenarios.conftest import ScenarioEnv
from tests.e2e.sdk_scenarios.workflows import (
    Approvals,
    AwaitsApproval,
    AwaitsChild,
    CancelledByClient,
    CancelsActivity,
    Child,
    Counter,
    FailsThrice,
    Hello,
    LongJob,
    OrderedA,
    OrderedB,
    Parent,
    PatchyV1,
    PatchyV2,
    Retrying,
    RunsLocalActivity,
    Saga,
    Shipment,
    Tally,
    charge,
    flaky,
    flaky_local,
    greet,
    heartbeating,
    long_job,
    refund,
    reserve,
    shout,
    step_one,
    step_two,
)

Record = dict[str, Any]


# -- helpers ------------------------------------------------------------------------------------------------------

def attrs(event: Record) -> Record:
    found: Record = event["attributes"][1]
    return found


def kinds(history: list[Record]) -> list[str]:
    return [e["event_type"] for e in history]


def only(history: list[Record], kind: str) -> list[Record]:
    return [e for e in history if e["event_type"] == kind]


def payload(env: ScenarioEnv, payloads: list[Record]) -> Any:
    return env.client.data_converter.decode_one(payloads)


async def wait_for_event(env: ScenarioEnv, handle: WorkflowHandle, kind: str, *, count: int = 1) -> Record:
    """The `count`-th event of `kind` in the run's history, once there."""
    async def check() -> Record | None:
        found = only(await handle.fetch_history(), kind)
        return found[count - 1] if len(found) >= count else None

    return await env.wait_until(check, what=f"{kind} #{count} in {handle.id}")


async def wait_for_running_activity(env: ScenarioEnv, handle: WorkflowHandle, identity: str = "") -> Record:
    """The pending activity of `handle`, once a worker (`identity`, if given) runs it and it has heartbeaten."""
    async def check() -> Record | None:
        for activity in (await handle.describe()).raw["activities"]:
            if activity["started_identity"] and (not identity or activity["started_identity"] == identity) \
                    and activity["last_heartbeat_time_ms"]:
                return activity
        return None

    return await env.wait_until(check, what=f"a running activity of {handle.id}")


async def start(env: ScenarioEnv, workflow: Any, *args: Any, stem: str) -> WorkflowHandle:
    return await env.client.start_workflow(workflow, *args, id=env.workflow_id(stem), task_queue=env.task_queue)


# -- scenarios ----------------------------------------------------------------------------------------------------

async def test_hello_runs_one_activity(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[Hello], activities=[greet]):
        handle = await start(env, Hello.run, "Ada", stem="hello")
        assert await handle.result() == "Hello, Ada"
    history = await handle.fetch_history()
    assert [attrs(e)["activity_type"] for e in only(history, "ACTIVITY_TASK_SCHEDULED")] == ["greet"]
    assert kinds(history)[-1] == "WORKFLOW_EXECUTION_COMPLETED"
    assert (await handle.describe()).status == "COMPLETED"


async def test_saga_compensates_after_a_non_retryable_failure(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[Saga], activities=[charge, reserve, refund]):
        handle = await start(env, Saga.run, "o-1", stem="saga")
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result()
    error = caught.value
    assert error.status == "FAILED"
    activity_error = error.cause
    assert isinstance(activity_error, ActivityError)
    assert (activity_error.activity_type, activity_error.retry_state) == ("reserve", "NON_RETRYABLE_FAILURE")
    cause = activity_error.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.message, cause.type, cause.non_retryable, tuple(cause.details)) == \
        ("no stock for o-1", "OutOfStock", True, ("sku-42",))
    history = await handle.fetch_history()
    assert [attrs(e)["activity_type"] for e in only(history, "ACTIVITY_TASK_SCHEDULED")] == \
        ["charge", "reserve", "refund"]
    assert [payload(env, attrs(e)["result"]) for e in only(history, "ACTIVITY_TASK_COMPLETED")] == \
        ["charge-o-1", "refunded charge-o-1"]
    assert len(only(history, "ACTIVITY_TASK_STARTED")) == 3  # reserve was tried once: non-retryable
    assert kinds(history)[-1] == "WORKFLOW_EXECUTION_FAILED"


async def test_retries_back_off_on_the_engine_clock(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[Retrying], activities=[flaky]):
        handle = await start(env, Retrying.run, stem="retry")
        attempts = await handle.result()
    assert [attempt for attempt, _ in attempts] == [1, 2, 3]
    (_, first), (_, second), (_, third) = attempts
    slack_ms = env.clock_slack.total_seconds() * 1000
    assert 1000 <= second - first <= 1000 + slack_ms  # initial_interval
    assert 2000 <= third - second <= 2000 + slack_ms  # x backoff_coefficient
    history = await handle.fetch_history()
    scheduled, = only(history, "ACTIVITY_TASK_SCHEDULED")
    started, = only(history, "ACTIVITY_TASK_STARTED")
    assert attrs(started)["attempt"] == 3
    assert attrs(started)["last_failure"]["message"] == "attempt 2 fails"
    assert attrs(started)["last_failure"]["non_retryable"] is False
    assert 3000 <= started["event_time_ms"] - scheduled["event_time_ms"] <= 3000 + 2 * slack_ms
    assert abs(started["event_time_ms"] - third) <= slack_ms  # the last attempt started when it was scheduled


async def test_signal_or_fourteen_day_timeout_without_waiting(env: ScenarioEnv) -> None:
    began = time.monotonic()
    async with env.worker(workflows=[Shipment], activities=[greet]):
        shipped = await start(env, Shipment.run, stem="shipped")
        assert await shipped.query(Shipment.status) == "waiting"
        await shipped.signal(Shipment.shipped, "T-1")
        token = (await shipped.query(Shipment.state))["token"]
        assert await shipped.result() == f"Hello, T-1 {token}"

        forgotten = await start(env, Shipment.run, env.long_wait.total_seconds(), stem="forgotten")
        waiting_since = env.now()
        assert await forgotten.result() == "support case"
        waited = env.now() - waiting_since
    elapsed = time.monotonic() - began
    assert waited >= env.long_wait
    history = await forgotten.fetch_history()
    timer, = only(history, "TIMER_STARTED")
    assert attrs(timer)["start_to_fire_timeout_ms"] == env.long_wait / timedelta(milliseconds=1)
    fired, = only(history, "TIMER_FIRED")
    late = fired["event_time_ms"] - timer["event_time_ms"] - env.long_wait / timedelta(milliseconds=1)
    assert 0 <= late <= env.clock_slack / timedelta(milliseconds=1)
    if env.skips_time:
        assert elapsed < 2.0, f"14 days of virtual time took {elapsed:.2f} s of wall time"


async def test_queries_answer_from_cache_and_after_eviction(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[Shipment], activities=[greet]) as worker:
        handler = worker.workflow_handler
        assert handler is not None
        handle = await start(env, Shipment.run, stem="query")
        assert await handle.query(Shipment.status) == "waiting"
        cached = await handle.query(Shipment.state)
        assert handle.run_id in handler.cache

        handler.evict(handle.run_id)
        assert await handle.query(Shipment.state) == cached  # rebuilt from history: same token, same log
        assert handle.run_id not in handler.cache  # a query does not repopulate the cache

        await handle.signal(Shipment.shipped, "T-2")
        assert await handle.query(Shipment.status) == "shipped T-2"  # the signal was delivered first
        handler.cache.clear()
        assert await handle.query(Shipment.status) == "shipped T-2"
        with pytest.raises(QueryRejectedError, match="no query 'nope'"):
            await handle.query("nope")
        assert await handle.result() == f"Hello, T-2 {cached['token']}"
        # A closed run answers too, from its full history.
        after = await handle.query(Shipment.state)
    assert (after["token"], after["log"]) == (cached["token"], [*cached["log"], "signal T-2"])


@pytest.mark.parametrize(("policy", "status"), [
    ("TERMINATE", "TERMINATED"), ("ABANDON", "RUNNING"), ("REQUEST_CANCEL", "CANCELED")])
async def test_child_workflow_parent_close_policy(env: ScenarioEnv, policy: str, status: str) -> None:
    async with env.worker(workflows=[Parent, Child]):
        parent = await start(env, Parent.run, policy, stem=f"parent-{policy.lower()}")
        child_id, child_run_id = await parent.result()
        child = env.client.get_workflow_handle(child_id, run_id=child_run_id)
        if policy == "ABANDON":
            assert (await child.describe()).status == "RUNNING"
            await child.signal(Child.finish)
            assert await child.result() == "child finished"
        else:
            with pytest.raises(WorkflowFailureError) as caught:
                await child.result()
            assert caught.value.status == status
        assert (await child.describe()).status == ("COMPLETED" if policy == "ABANDON" else status)
    parent_history = await parent.fetch_history()
    initiated, = only(parent_history, "START_CHILD_WORKFLOW_EXECUTION_INITIATED")
    assert attrs(initiated)["parent_close_policy"] == policy
    assert "CHILD_WORKFLOW_EXECUTION_STARTED" in kinds(parent_history)
    child_started = (await child.fetch_history())[0]
    assert (attrs(child_started)["parent"]["workflow_id"], attrs(child_started)["parent"]["run_id"]) == \
        (parent.id, parent.run_id)


async def test_continue_as_new_carries_state_over_five_runs(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[Counter]):
        handle = await start(env, Counter.run, 0, 5, [], stem="counter")
        result = await handle.result()  # follows the runs to the last one
    assert result["count"] == 5
    runs = result["runs"]
    assert len(set(runs)) == 5 and runs[0] == handle.run_id
    assert (await env.client.get_workflow_handle(handle.id).describe()).run_id == runs[-1]
    for previous, following in itertools.pairwise(runs):
        history = await env.client.get_workflow_handle(handle.id, run_id=previous).fetch_history()
        closing = history[-1]
        assert closing["event_type"] == "WORKFLOW_EXECUTION_CONTINUED_AS_NEW"
        assert attrs(closing)["new_execution_run_id"] == following
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result(follow_runs=False)
    assert caught.value.status == "CONTINUED_AS_NEW"


async def test_a_failed_workflow_is_retried_as_new_runs_of_its_chain(env: ScenarioEnv) -> None:
    """Issue 17's scenario: a workflow retried three times, then succeeding."""
    policy = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=5)
    async with env.worker(workflows=[FailsThrice]):
        handle = await env.client.start_workflow(FailsThrice.run, "job", id=env.workflow_id("fails-thrice"),
                                                 task_queue=env.task_queue, retry_policy=policy)
        attempt, first_run, last_failure = await handle.result()  # follows the retries to the last run
    assert (attempt, first_run, last_failure) == (4, handle.run_id, "job: attempt 3 fails")
    run_id, backoffs = handle.run_id, []
    for expected_attempt in (1, 2, 3):
        history = await env.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        assert attrs(history[0])["attempt"] == expected_attempt
        closing = history[-1]
        assert closing["event_type"] == "WORKFLOW_EXECUTION_CONTINUED_AS_NEW"
        assert attrs(closing)["initiator"] == "RETRY"
        assert attrs(closing)["failure"]["message"] == f"job: attempt {expected_attempt} fails"
        backoffs.append(attrs(closing)["backoff_start_interval_ms"])
        run_id = attrs(closing)["new_execution_run_id"]
    assert backoffs == [200, 400, 800]
    last = await env.client.get_workflow_handle(handle.id).describe()
    assert (last.run_id, last.status) == (run_id, "COMPLETED")


async def test_workflow_cancels_a_heartbeating_activity(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[CancelsActivity], activities=[heartbeating]):
        handle = await start(env, CancelsActivity.run, True, stem="cancel-activity")
        await wait_for_running_activity(env, handle)
        await handle.signal(CancelsActivity.stop)
        assert await handle.result() == "activity error: CancelledError"  # ActivityError caused by CancelledError
    history = await handle.fetch_history()
    names = kinds(history)
    assert names.index("ACTIVITY_TASK_CANCEL_REQUESTED") < names.index("ACTIVITY_TASK_CANCELED")
    canceled, = only(history, "ACTIVITY_TASK_CANCELED")
    assert payload(env, attrs(canceled)["details"]) == "saw cancel"  # what the activity said on its way out
    assert names[-1] == "WORKFLOW_EXECUTION_COMPLETED"


async def test_client_cancel_reaches_a_heartbeating_activity(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[CancelledByClient], activities=[heartbeating]):
        handle = await start(env, CancelledByClient.run, stem="cancel-workflow")
        await wait_for_running_activity(env, handle)
        await handle.cancel("changed my mind")
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result()
    assert caught.value.status == "CANCELED"
    names = kinds(await handle.fetch_history())
    assert names.index("WORKFLOW_EXECUTION_CANCEL_REQUESTED") < names.index("ACTIVITY_TASK_CANCEL_REQUESTED") \
        < names.index("ACTIVITY_TASK_CANCELED")
    assert names[-1] == "WORKFLOW_EXECUTION_CANCELED"


async def test_patched_takes_the_old_branch_on_old_histories_and_the_new_on_new_runs(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[PatchyV1], activities=[greet]):
        old = await start(env, PatchyV1.run, stem="patchy-old")
        assert await old.result() == "Hello, old"
    old_history = await old.fetch_history()
    replayed = Replayer(workflows=[PatchyV2]).replay(old_history, workflow_id=old.id, run_id=old.run_id)
    assert replayed.ok, replayed.failure

    async with env.worker(workflows=[PatchyV2], activities=[greet, shout]):
        new = await start(env, PatchyV2.run, stem="patchy-new")
        assert await new.result() == "HELLO, NEW"
    new_history = await new.fetch_history()
    marker, = only(new_history, "MARKER_RECORDED")
    assert payload(env, attrs(marker)["details"]["patch_id"]) == "x"
    assert "MARKER_RECORDED" not in kinds(old_history)
    assert Replayer(workflows=[PatchyV2]).replay(new_history, run_id=new.run_id).ok
    # The old code cannot replay a history the patch wrote.
    back = Replayer(workflows=[PatchyV1]).replay(new_history, run_id=new.run_id)
    assert isinstance(back.failure, NondeterminismError)


async def test_changed_activity_order_is_non_determinism_until_fixed(env: ScenarioEnv) -> None:
    activities = [step_one, step_two]
    async with env.worker(workflows=[OrderedA], activities=activities):
        handle = await start(env, OrderedA.run, stem="ordered")
        await wait_for_event(env, handle, "WORKFLOW_TASK_COMPLETED", count=2)  # step one done; waits for the signal
    before = await handle.fetch_history()

    async with env.worker(workflows=[OrderedB], activities=activities) as changed:
        assert changed.workflow_handler is not None
        changed.workflow_handler.evict(handle.run_id)
        await handle.signal(OrderedA.proceed)
        failed = await wait_for_event(env, handle, "WORKFLOW_TASK_FAILED")
        assert attrs(failed)["cause"] == "NONDETERMINISM"
        assert "step_one" in attrs(failed)["failure"]["message"]
        assert "step_two" in attrs(failed)["failure"]["message"]
        stuck = await handle.fetch_history()
        # The task is retried (at once, then after 1 s): every attempt replays from scratch, fails again and
        # writes nothing.
        await env.sleep(timedelta(seconds=2))
        assert changed.workflow_handler.replays >= 3
        assert await handle.fetch_history() == stuck
        assert (await handle.describe()).status == "RUNNING"
    assert stuck[:len(before)] == before  # history was never rewritten
    assert kinds(stuck)[len(before):] == [
        "WORKFLOW_EXECUTION_SIGNALED", "WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_FAILED"]

    async with env.worker(workflows=[OrderedA], activities=activities):  # the fix: code A again
        assert await handle.result() == ["one", "two"]


async def test_worker_stopped_mid_activity_hands_it_to_another(env: ScenarioEnv) -> None:
    handle = await start(env, LongJob.run, stem="long-job")
    async with env.worker(workflows=[LongJob], activities=[long_job], identity="worker-1"):
        await wait_for_running_activity(env, handle, identity="worker-1")

    async def retry_due() -> Record | None:
        pending, = (await handle.describe()).raw["activities"]
        return pending if pending["attempt"] == 2 else None

    # The stopping worker answered at once: a retryable failure, so a second attempt is due.
    pending = await env.wait_until(retry_due, what="the second attempt of long_job")
    assert pending["last_failure"]["type"] == "WorkerShutdown"
    assert pending["last_failure"]["non_retryable"] is False

    async with env.worker(workflows=[LongJob], activities=[long_job], identity="worker-2"):
        assert await handle.result() == [2, ["working"]]  # resumed from the first attempt's heartbeat
    started, = only(await handle.fetch_history(), "ACTIVITY_TASK_STARTED")
    assert (attrs(started)["identity"], attrs(started)["attempt"]) == ("worker-2", 2)
    assert attrs(started)["last_failure"]["type"] == "WorkerShutdown"


async def test_cache_eviction_replays_to_the_same_result(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[Shipment], activities=[greet]) as worker:
        handler = worker.workflow_handler
        assert handler is not None
        kept, evicted = [await start(env, Shipment.run, stem=stem) for stem in ("kept", "evicted")]
        states = {h.id: await h.query(Shipment.state) for h in (kept, evicted)}
        replays = handler.replays

        await kept.signal(Shipment.shipped, "T-3")
        assert await kept.result() == f"Hello, T-3 {states[kept.id]['token']}"
        assert handler.replays == replays  # sticky: every task found the workflow cached

        handler.evict(evicted.run_id)
        await evicted.signal(Shipment.shipped, "T-3")
        assert await evicted.result() == f"Hello, T-3 {states[evicted.id]['token']}"
        assert handler.replays == replays + 1  # one full replay, then cached again
        after = await evicted.query(Shipment.state)
    assert (after["token"], after["log"]) == (states[evicted.id]["token"], [*states[evicted.id]["log"], "signal T-3"])


@pytest.mark.parametrize("env", ["time-skipping"], indirect=True)  # five cron minutes need virtual time
async def test_cron_every_minute_for_five_runs(env: ScenarioEnv) -> None:
    """Five minutes of a `* * * * *` schedule pass in virtual time: five runs, each on the minute, each handing its
    result to the next (a real engine would need five wall-clock minutes, so this one runs time-skipping only)."""
    async with env.worker(workflows=[Tally]):
        handle = await env.client.start_workflow(Tally.run, id=env.workflow_id("tally"), task_queue=env.task_queue,
                                                 cron_schedule="* * * * *")
        await env.sleep(timedelta(minutes=5, seconds=30))
        await env.client.get_workflow_handle(handle.id).terminate("five runs are enough")
    run_id, results, due = handle.run_id, [], []
    while True:
        history = await env.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        started, closing = attrs(history[0]), history[-1]
        due.append(history[0]["event_time_ms"] + started["first_workflow_task_backoff_ms"])
        if closing["event_type"] != "WORKFLOW_EXECUTION_CONTINUED_AS_NEW":
            break
        assert attrs(closing)["initiator"] == "CRON_SCHEDULE"
        results.append(payload(env, attrs(closing)["last_completion_result"]))
        run_id = attrs(closing)["new_execution_run_id"]
    assert closing["event_type"] == "WORKFLOW_EXECUTION_TERMINATED"  # the sixth run, waiting for its minute
    assert results == [1, 2, 3, 4, 5]
    assert all(at % 60_000 == 0 for at in due)  # on the minute
    assert [later - earlier for earlier, later in itertools.pairwise(due)] == [60_000] * 5


# What each cancellation type leaves: the child's status once the parent is CANCELED, and what the parent's history
# shows between asking the child to cancel and closing itself: nothing (TRY_CANCEL closes in the same task), the
# request delivered (WAIT_CANCELLATION_REQUESTED), the child's cancellation (WAIT_CANCELLATION_COMPLETED), or no
# request at all (ABANDON).
ASKED = "REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED"


@pytest.mark.parametrize(("cancellation_type", "child_status", "waits_for"), [
    ("TRY_CANCEL", "CANCELED", None),
    ("WAIT_CANCELLATION_REQUESTED", "CANCELED", "EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED"),
    ("WAIT_CANCELLATION_COMPLETED", "CANCELED", "CHILD_WORKFLOW_EXECUTION_CANCELED"),
    ("ABANDON", "RUNNING", None),
])
async def test_a_parent_cancel_reaches_its_child_as_its_cancellation_type_says(
        env: ScenarioEnv, cancellation_type: str, child_status: str, waits_for: str | None) -> None:
    async with env.worker(workflows=[AwaitsChild, Child]):
        parent = await start(env, AwaitsChild.run, cancellation_type, stem=f"awaits-{cancellation_type.lower()}")
        await wait_for_event(env, parent, "CHILD_WORKFLOW_EXECUTION_STARTED")
        child = env.client.get_workflow_handle(f"{parent.id}-child")
        await parent.cancel()
        with pytest.raises(WorkflowFailureError) as caught:
            await parent.result()
        assert caught.value.status == "CANCELED"

        async def child_settled() -> str | None:
            status = (await child.describe()).status
            return status if status == child_status or status != "RUNNING" else None

        assert await env.wait_until(child_settled, what=f"the child {child_status}") == child_status
        asked = child_status == "CANCELED"
        assert ("WORKFLOW_EXECUTION_CANCEL_REQUESTED" in kinds(await child.fetch_history())) == asked
        parent_kinds = [kind for kind in kinds(await parent.fetch_history()) if not kind.startswith("WORKFLOW_TASK_")]
        assert parent_kinds[-1] == "WORKFLOW_EXECUTION_CANCELED"
        if not asked:  # abandoned: never asked, and it still answers its own signals
            assert ASKED not in parent_kinds
            await child.signal(Child.finish)
            assert await child.result() == "child finished"
        elif waits_for is None:
            assert parent_kinds[-2] == ASKED
        else:
            assert parent_kinds.index(ASKED) < parent_kinds.index(waits_for) < len(parent_kinds) - 1


async def test_a_local_activity_fails_twice_then_succeeds(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[RunsLocalActivity], activities=[flaky_local]):
        handle = await start(env, RunsLocalActivity.run, "o-7", stem="local")
        assert await handle.result() == ["o-7", 3, True]
    history = await handle.fetch_history()
    assert not [kind for kind in kinds(history) if kind.startswith("ACTIVITY_TASK_")]  # no activity task at all
    marker, = only(history, "MARKER_RECORDED")  # three attempts, retried on the worker, one marker
    assert attrs(marker)["marker_name"] == "core_local_activity"
    assert payload(env, attrs(marker)["details"]["result"]) == ["o-7", 3, True]
    data = payload(env, attrs(marker)["details"]["data"])
    assert (data["attempt"], data["activity_type"]) == (3, "flaky_local")
    assert kinds(history)[-1] == "WORKFLOW_EXECUTION_COMPLETED"


async def test_an_activity_completed_asynchronously_from_outside_the_worker(env: ScenarioEnv) -> None:
    approvals = Approvals()
    async with env.worker(workflows=[AwaitsApproval], activities=[approvals.request_approval]):
        by_token = await start(env, AwaitsApproval.run, "loan", stem="approval")
        token = await asyncio.wait_for(approvals.tokens.get(), 20)
        assert (await by_token.describe()).status == "RUNNING"  # the activity function returned, unanswered
        outside = env.client.get_async_activity_handle(task_token=token)
        await outside.heartbeat("still deciding")
        await outside.complete("approved by Ada")
        assert await by_token.result() == "approved by Ada"
        with pytest.raises(RPCError):  # answered: the token is stale now
            await outside.complete("again")

        by_id = await start(env, AwaitsApproval.run, "boat", stem="approval")
        await asyncio.wait_for(approvals.tokens.get(), 20)
        await env.client.get_async_activity_handle(workflow_id=by_id.id, activity_id="approval").fail(
            ApplicationError("refused", type="Refused", non_retryable=True))
        with pytest.raises(WorkflowFailureError) as caught:
            await by_id.result()
    assert isinstance(caught.value.cause, ActivityError)
    assert isinstance(caught.value.cause.cause, ApplicationError) and caught.value.cause.cause.type == "Refused"
    completed, = only(await by_token.fetch_history(), "ACTIVITY_TASK_COMPLETED")
    assert payload(env, attrs(completed)["result"]) == "approved by Ada"
