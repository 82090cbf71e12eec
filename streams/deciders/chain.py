"""How a run that completes, fails or times out may start the next run of its chain: a retry, or the next cron run.

Temporal's rules: a failed (or run-timed-out) run is retried while its retry policy allows; when it is not (or has
no policy) and the run has a cron schedule, the next cron run starts at the schedule's next time, as it does after a
completed run; otherwise (or once cancellation was requested) the run closes for good. Either way the run closes
with CONTINUED_AS_NEW (initiator RETRY or CRON_SCHEDULE) and the new run's first workflow task waits for the
backoff, so a parent, a result long-poll or `handle.result()` follows the chain exactly as for continue-as-new and
sees only the final outcome.
"""

from __future__ import annotations

from typing import Any

from ostinato.streams import cron
from ostinato.streams import events as ev
from ostinato.streams.deadlines import fitting
from ostinato.streams.deciders.common import close_run, new_run_id
from ostinato.streams.model import RunState
from ostinato.streams.retry import decide_retry, with_defaults
from ostinato.streams.writer import Writer

Record = dict[str, Any]


def complete(w: Writer, run_id: str, result: list[Record], completed_id: int) -> None:
    """Close a run that returned `result`: the next cron run starts with it as its last completion result."""
    run = w.run(run_id)
    backoff = _cron_backoff(w, run)
    if backoff is None:
        close_run(w, run_id, ev.WORKFLOW_EXECUTION_COMPLETED,
                  {"result": result, "workflow_task_completed_event_id": completed_id})
        return
    _continue(w, run, "CRON_SCHEDULE", backoff, attempt=1, failure=None, last_result=result,
              completed_id=completed_id)


def fail(w: Writer, run_id: str, failure: Record, completed_id: int) -> None:
    """Close a run that failed with `failure`: retry it, else start the next cron run, else fail for good."""
    run = w.run(run_id)
    retry_state = _retry_or_cron(w, run, failure, completed_id)
    if retry_state is not None:
        close_run(w, run_id, ev.WORKFLOW_EXECUTION_FAILED, {
            "failure": failure, "retry_state": retry_state, "workflow_task_completed_event_id": completed_id})


def time_out(w: Writer, run_id: str, failure: Record, whole_execution: bool) -> None:
    """Close a run whose run timeout fired (retried, or the next cron run, as for a failure); an execution
    timeout ends the chain, since it bounds every run of it."""
    run = w.run(run_id)
    retry_state: str | None = "TIMEOUT"
    if not whole_execution:
        retry_state = _retry_or_cron(w, run, failure, 0)
    if retry_state is not None:
        # A run without a retry policy says TIMEOUT, as it always has here (Temporal says RETRY_POLICY_NOT_SET).
        shown = "TIMEOUT" if retry_state == "RETRY_POLICY_NOT_SET" else retry_state
        close_run(w, run_id, ev.WORKFLOW_EXECUTION_TIMED_OUT, {"retry_state": shown})


def _retry_or_cron(w: Writer, run: RunState, failure: Record, completed_id: int) -> str | None:
    """Start the run's next run if its retry policy or cron schedule asks for one (None then), or why not."""
    if run.cancel_requested:  # asked to stop: neither a retry nor the next cron run brings it back
        return "CANCEL_REQUESTED"
    # A run started before retries were kept (its input was not) fails as it would have then.
    policy = None if run.retry_policy is None or not run.keeps_chain_inputs else with_defaults(run.retry_policy)
    decision = decide_retry(policy, run.attempt, failure, w.now_ms, run.execution_expiration_time_ms)
    if decision.retry_state == "IN_PROGRESS":
        _continue(w, run, "RETRY", decision.delay_ms, attempt=run.attempt + 1, failure=failure,
                  last_result=run.last_completion_result, completed_id=completed_id)
        return None
    backoff = _cron_backoff(w, run)
    if backoff is None:
        return decision.retry_state
    _continue(w, run, "CRON_SCHEDULE", backoff, attempt=1, failure=failure, last_result=run.last_completion_result,
              completed_id=completed_id)
    return None


def _cron_backoff(w: Writer, run: RunState) -> int | None:
    """The wait until the next cron run, None when there is none (no schedule, or after the execution timeout)."""
    if not run.cron_schedule or run.cancel_requested:
        return None
    backoff = cron.backoff_ms(run.cron_schedule, w.now_ms)
    expires = run.execution_expiration_time_ms
    if expires is not None and w.now_ms + backoff >= expires:
        return None
    return backoff


def _continue(w: Writer, run: RunState, initiator: str, backoff_ms: int, *, attempt: int, failure: Record | None,
              last_result: list[Record], completed_id: int) -> None:
    """Close `run` as continued-as-new and start the chain's next run with the same input, after `backoff_ms`."""
    from ostinato.streams.deciders.start import start_run

    run_id = run.run_id
    new_id = new_run_id(run.namespace, run.workflow_id, run_id, initiator.lower())
    run_timeout = None
    if run.run_expiration_time_ms is not None:
        run_timeout = fitting(w.now_ms, max(1, run.run_expiration_time_ms - run.execution_time_ms))
    backoff = fitting(w.now_ms, backoff_ms)
    request = w.workflow.current.start_request_id if w.workflow.current else ""
    carried = {"input": list(run.input), "header": dict(run.header), "memo": dict(run.memo),
               "search_attributes": dict(run.search_attributes), "parent": run.parent,
               "first": run.first_execution_run_id, "expires": run.execution_expiration_time_ms,
               "retry": run.retry_policy, "cron": run.cron_schedule}
    close_run(w, run_id, ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW, {
        "new_execution_run_id": new_id, "workflow_type": run.workflow_type, "task_queue": run.task_queue,
        "input": carried["input"], "run_timeout_ms": run_timeout, "task_timeout_ms": run.task_timeout_ms,
        "backoff_start_interval_ms": backoff, "initiator": initiator, "failure": failure,
        "last_completion_result": last_result, "header": carried["header"], "memo": carried["memo"],
        "search_attributes": carried["search_attributes"], "workflow_task_completed_event_id": completed_id})
    start_run(w, new_id, {
        "workflow_type": run.workflow_type, "task_queue": run.task_queue, "input": carried["input"],
        "execution_timeout_ms": None, "run_timeout_ms": run_timeout, "task_timeout_ms": run.task_timeout_ms,
        "retry_policy": carried["retry"], "attempt": attempt, "memo": carried["memo"],
        "search_attributes": carried["search_attributes"], "header": carried["header"], "parent": carried["parent"],
        "first_execution_run_id": carried["first"], "continued_execution_run_id": run_id,
        "continued_failure": failure, "last_completion_result": last_result,
        "execution_expiration_time_ms": carried["expires"], "identity": w.command["identity"],
        "request_id": request, "first_workflow_task_backoff_ms": backoff, "cron_schedule": carried["cron"]})
