"""Runs a workflow's local activities on its worker: attempts through the activity executor, retried here with the
retry policy's backoff while that backoff is at most the local retry threshold (Temporal's rule), each outcome a
resolution the workflow records as a `core_local_activity` marker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ostinato.sdk import exceptions as exc
from ostinato.sdk.activity_executor import COMPLETED, FAILED, ActivityExecutor
from ostinato.sdk.data import DataConverter
from ostinato.streams.retry import decide_retry, with_defaults

Record = dict[str, Any]
DEFAULT_LOCAL_RETRY_THRESHOLD_MS = 60_000  # Temporal's default: a longer backoff waits on a workflow timer


TIMEOUT_GRACE_S = 0.2  # how long a timed-out attempt may take to stop before its outcome is given without it


def _drop_outcome(task: asyncio.Future[Any]) -> None:
    """An abandoned attempt's outcome, retrieved so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


class LocalActivityRunner:
    """The local activities of one worker: at most `max_concurrent` attempts run at once (the others wait for a slot,
    which counts against their schedule-to-start timeout). `executor` is None on a worker without activities: every
    local activity then fails, not retried, as an unregistered activity does."""

    def __init__(self, executor: ActivityExecutor | None, converter: DataConverter, max_concurrent: int = 100) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent_local_activities must be at least 1, not {max_concurrent}")
        self.executor = executor
        self.converter = converter
        self.max_concurrent = max_concurrent
        self._slots: asyncio.Semaphore | None = None

    async def run(self, request: Record, task: Record, cancel: asyncio.Event) -> Record:
        """Run `request` (from the workflow) for the workflow task `task` until an outcome: a result, a failure for
        good, or a failure whose next attempt is to wait for a timer (`backoff_ms`). `cancel` set means the workflow
        cancelled it: the running attempt is asked to stop, and the outcome is a cancellation."""
        policy = with_defaults(request["retry_policy"])
        threshold = request["local_retry_threshold_ms"] or DEFAULT_LOCAL_RETRY_THRESHOLD_MS
        attempt = int(request["attempt"])
        # Schedule-to-close counts from the first attempt's schedule, in the workflow's time; what is left of it,
        # in this worker's monotonic time.
        total = request["schedule_to_close_timeout_ms"]
        deadline = None if total is None else time.monotonic() + (total - request["elapsed_ms"]) / 1000
        while True:
            failure, result = await self._attempt(request, task, attempt, deadline, cancel)
            if failure is None:
                return self._resolution(request, attempt, result=result)
            if cancel.is_set():
                return self._resolution(request, attempt, failure=self.converter.encode_failure(
                    exc.CancelledError("local activity cancelled")), retry_state="CANCEL_REQUESTED")
            now_ms = int(time.monotonic() * 1000)
            decision = decide_retry(policy, attempt, failure, now_ms,
                                    None if deadline is None else int(deadline * 1000))
            if decision.retry_state != "IN_PROGRESS":
                if decision.retry_state == "TIMEOUT" and deadline is not None and time.monotonic() >= deadline:
                    failure = self.converter.encode_failure(exc.TimeoutError(
                        "local activity schedule-to-close timeout", type="SCHEDULE_TO_CLOSE"))
                return self._resolution(request, attempt, failure=failure, retry_state=decision.retry_state)
            if decision.delay_ms > threshold:
                return self._resolution(request, attempt, failure=failure, backoff_ms=decision.delay_ms,
                                        retry_state="IN_PROGRESS")
            try:
                await asyncio.wait_for(cancel.wait(), decision.delay_ms / 1000)
            except TimeoutError:
                attempt += 1
                continue
            return self._resolution(request, attempt, failure=self.converter.encode_failure(
                exc.CancelledError("local activity cancelled")), retry_state="CANCEL_REQUESTED")

    async def _attempt(self, request: Record, task: Record, attempt: int, deadline: float | None,
                       cancel: asyncio.Event) -> tuple[Record | None, Any]:
        """One attempt: (None, result payloads) or (failure record, None)."""
        if self.executor is None:
            return self.converter.encode_failure(exc.ApplicationError(
                f"activity type {request['activity_type']!r} is not registered on this worker (it has no "
                "activities): a local activity runs on the worker of its workflow", type="ActivityNotRegistered",
                non_retryable=True)), None
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrent)
        try:
            await asyncio.wait_for(self._slots.acquire(), _earliest(request["schedule_to_start_timeout_ms"], deadline))
        except TimeoutError:
            return self.converter.encode_failure(exc.TimeoutError(
                "local activity schedule-to-start timeout", type="SCHEDULE_TO_START")), None
        try:
            return await self._execute(request, task, attempt, deadline, cancel)
        finally:
            self._slots.release()

    async def _execute(self, request: Record, task: Record, attempt: int, deadline: float | None,
                       cancel: asyncio.Event) -> tuple[Record | None, Any]:
        assert self.executor is not None
        now_ms = time.time_ns() // 1_000_000
        activity_task = {
            "namespace": task["namespace"], "workflow_id": task["workflow_id"], "run_id": task["run_id"],
            "workflow_type": task["workflow_type"], "task_queue": task["task_queue"],
            "activity_id": request["activity_id"], "activity_type": request["activity_type"],
            "scheduled_event_id": 0, "attempt": attempt, "input": request["input"], "heartbeat_details": [],
            "scheduled_time_ms": request["original_schedule_time_ms"], "current_attempt_scheduled_time_ms": now_ms,
            "start_to_close_timeout_ms": request["start_to_close_timeout_ms"],
            "schedule_to_close_timeout_ms": request["schedule_to_close_timeout_ms"], "heartbeat_timeout_ms": None,
            "is_local": True}

        async def heartbeat(_task: Record, _details: list[Record]) -> bool:
            return cancel.is_set()  # a local activity's heartbeats go nowhere (Temporal ignores them too)

        limit = _earliest(request["start_to_close_timeout_ms"], deadline)
        run = asyncio.ensure_future(self.executor.execute(activity_task, heartbeat))
        stop = asyncio.ensure_future(cancel.wait())
        try:
            done, _ = await asyncio.wait({run, stop}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if run not in done:
            run.cancel()  # the attempt stops (an activity thread at its next heartbeat)
            if cancel.is_set():  # the workflow cancelled it: its cancellation type may wait for the stop
                await asyncio.gather(run, return_exceptions=True)
                return self.converter.encode_failure(exc.CancelledError("local activity cancelled")), None
            # A timeout is the outcome at once, as in Temporal: an attempt that ignores its cancellation is left to
            # end on its own, its outcome dropped, rather than holding (and heartbeating) the workflow task.
            await asyncio.wait({run}, timeout=TIMEOUT_GRACE_S)
            run.add_done_callback(_drop_outcome)
            kind = "SCHEDULE_TO_CLOSE" if deadline is not None and time.monotonic() >= deadline else \
                "START_TO_CLOSE"
            return self.converter.encode_failure(exc.TimeoutError(
                f"local activity {kind.lower().replace('_', '-')} timeout", type=kind)), None
        answer = run.result()
        if answer is None:
            return self.converter.encode_failure(exc.ApplicationError(
                "a local activity cannot complete asynchronously", type="IllegalState", non_retryable=True)), None
        name, body = answer
        if name == COMPLETED:
            return None, body["result"]
        if name == FAILED:
            return body["failure"], None
        return self.converter.encode_failure(exc.CancelledError("local activity cancelled")), None

    @staticmethod
    def _resolution(request: Record, attempt: int, *, result: list[Record] | None = None,
                    failure: Record | None = None, backoff_ms: int | None = None,
                    retry_state: str = "UNSPECIFIED") -> Record:
        return {"seq": request["seq"], "activity_id": request["activity_id"],
                "activity_type": request["activity_type"], "attempt": attempt,
                "complete_time_ms": time.time_ns() // 1_000_000,
                "original_schedule_time_ms": request["original_schedule_time_ms"], "backoff_ms": backoff_ms,
                "retry_state": retry_state, "result": result, "failure": failure}


def _earliest(timeout_ms: int | None, deadline: float | None) -> float | None:
    """Seconds until the sooner of a timeout from now and a monotonic deadline (None: neither)."""
    limits = [t for t in (None if not timeout_ms else timeout_ms / 1000,
                          None if deadline is None else max(0.0, deadline - time.monotonic())) if t is not None]
    return min(limits) if limits else None
