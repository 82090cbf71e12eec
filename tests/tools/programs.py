"""Stateless workflow and activity programs for tests, standing in for the SDK until it exists.

A program reads only the events of the workflow task at hand (the events since the previous completed task)
and returns the commands for RespondWorkflowTaskCompleted. It keeps no cache, so any worker can answer any
task, a redelivered task is answered the same way, and the test worker needs no sticky state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ostinato.schemas import wire

Record = dict[str, Any]
Command = tuple[str, Record]

ENCODING_JSON = b"json/plain"
ENCODING_NULL = b"binary/null"

HELLO, SLEEP, CHAIN, DONE, IDLE = "hello", "sleep", "chain", "done", "idle"
GREET, STEP = "greet", "step"
CHAIN_STEPS = 3
DEFAULT_SLEEP_MS = 1_000
ACTIVITY_START_TO_CLOSE_MS = 10_000
# Generous attempts with a short, capped backoff: a worker injecting failures at rate 0.5 fails an activity for
# good about once in 30 million, and the worst retry chain still ends within half a minute.
ACTIVITY_RETRY_POLICY: Record = {
    "initial_interval_ms": 100, "backoff_coefficient": 2.0, "maximum_interval_ms": 1_000, "maximum_attempts": 25,
    "non_retryable_error_types": ["UnknownActivityType"],
}

WORKFLOW_STARTED = "WORKFLOW_EXECUTION_STARTED"
CANCEL_REQUESTED = "WORKFLOW_EXECUTION_CANCEL_REQUESTED"
ACTIVITY_COMPLETED = "ACTIVITY_TASK_COMPLETED"
ACTIVITY_FAILED = "ACTIVITY_TASK_FAILED"
ACTIVITY_TIMED_OUT = "ACTIVITY_TASK_TIMED_OUT"
TIMER_FIRED = "TIMER_FIRED"


class UnknownTypeError(LookupError):
    """A task names a workflow or activity type no program implements; the worker reports it as a failure."""


# -- payloads (the JSON converter's wire shape, as plain records) ------------------------------------------------

def to_payload(value: Any) -> Record:
    """A JSON payload record, as `sdk.converter.DefaultPayloadConverter` writes it (None as `binary/null`)."""
    if value is None:
        return {"metadata": {"encoding": ENCODING_NULL}, "data": b""}
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    return {"metadata": {"encoding": ENCODING_JSON}, "data": data}


def from_payload(payload: Record) -> Any:
    """The value of a JSON (or null) payload record."""
    encoding = payload["metadata"].get("encoding")
    if encoding == ENCODING_NULL:
        return None
    if encoding != ENCODING_JSON:
        raise ValueError(f"the test programs read only JSON payloads, not {encoding!r}")
    return json.loads(payload["data"])


def first_value(payloads: Sequence[Record], default: Any) -> Any:
    """The first argument's value, or `default` when there is none (or it is null)."""
    value = from_payload(payloads[0]) if payloads else None
    return default if value is None else value


# -- commands ---------------------------------------------------------------------------------------------------

def _command(name: str, body: Record) -> Command:
    return wire.COMMAND_PREFIX + name, body


def schedule_activity(activity_id: str, activity_type: str, args: Sequence[Record]) -> Command:
    return _command("ScheduleActivityTaskCommand", {
        "activity_id": activity_id, "activity_type": activity_type, "input": list(args),
        "start_to_close_timeout_ms": ACTIVITY_START_TO_CLOSE_MS, "retry_policy": dict(ACTIVITY_RETRY_POLICY),
    })


def complete(result: Sequence[Record]) -> Command:
    return _command("CompleteWorkflowExecutionCommand", {"result": list(result)})


def fail_for(event: Record) -> Command:
    """Fail the workflow because an activity failed or timed out for good; its failure becomes the cause."""
    attrs = event["attributes"][1]
    return _command("FailWorkflowExecutionCommand", {"failure": {
        "message": f"activity failed ({event['event_type']})", "type": "ActivityError", "cause": attrs["failure"]}})


def cancel() -> Command:
    return _command("CancelWorkflowExecutionCommand", {})


# -- programs ---------------------------------------------------------------------------------------------------

def _last(events: Sequence[Record], *types: str) -> Record | None:
    return next((e for e in reversed(events) if e["event_type"] in types), None)


def _attrs(event: Record) -> Record:
    attrs: Record = event["attributes"][1]
    return attrs


def _closing(events: Sequence[Record]) -> list[Command] | None:
    """What every program does when the task reports a final activity failure or a cancel request."""
    failed = _last(events, ACTIVITY_FAILED, ACTIVITY_TIMED_OUT)
    if failed is not None:
        return [fail_for(failed)]
    if _last(events, CANCEL_REQUESTED) is not None:
        return [cancel()]
    return None


def hello(events: Sequence[Record]) -> list[Command]:
    """Greet the input (default "world") with the `greet` activity and complete with its result."""
    done = _last(events, ACTIVITY_COMPLETED)
    if done is not None:
        return [complete(_attrs(done)["result"])]
    closing = _closing(events)
    if closing is not None:
        return closing
    started = _last(events, WORKFLOW_STARTED)
    if started is not None:
        return [schedule_activity(GREET, GREET, _attrs(started)["input"])]
    return []


def sleep(events: Sequence[Record]) -> list[Command]:
    """Start a timer of `{"sleep_ms": N}` (default 1000) and complete with the time it fired (epoch ms)."""
    fired = _last(events, TIMER_FIRED)
    if fired is not None:
        return [complete([to_payload(fired["event_time_ms"])])]
    closing = _closing(events)
    if closing is not None:
        return closing
    started = _last(events, WORKFLOW_STARTED)
    if started is not None:
        options = first_value(_attrs(started)["input"], {})
        sleep_ms = int(options.get("sleep_ms", DEFAULT_SLEEP_MS))
        return [_command("StartTimerCommand", {"timer_id": "sleep", "start_to_fire_timeout_ms": sleep_ms})]
    return []


def chain(events: Sequence[Record]) -> list[Command]:
    """Three `step` activities in sequence, each appending its number: input "x" completes with "x.1.2.3".

    The step number travels in the activity's result, so the next decision needs no earlier event.
    """
    done = _last(events, ACTIVITY_COMPLETED)
    if done is not None:
        state = first_value(_attrs(done)["result"], None)
        if state["step"] >= CHAIN_STEPS:
            return [complete([to_payload(state["value"])])]
        step = state["step"] + 1
        return [schedule_activity(f"step-{step}", STEP, [to_payload({"step": step, "value": state["value"]})])]
    closing = _closing(events)
    if closing is not None:
        return closing
    started = _last(events, WORKFLOW_STARTED)
    if started is not None:
        value = first_value(_attrs(started)["input"], "chain")
        return [schedule_activity("step-1", STEP, [to_payload({"step": 1, "value": value})])]
    return []


def done(events: Sequence[Record]) -> list[Command]:
    """Complete at once with the input (the ingress tests' orders)."""
    started = _attrs(events[0]) if events and events[0]["event_type"] == "WORKFLOW_EXECUTION_STARTED" else {}
    return [complete(list(started.get("input", [])))]


def idle(events: Sequence[Record]) -> list[Command]:
    """Stay open and do nothing: signals pile up in history (the ingress tests' accounts)."""
    return []


WORKFLOWS: dict[str, Callable[[Sequence[Record]], list[Command]]] = {
    HELLO: hello, SLEEP: sleep, CHAIN: chain, DONE: done, IDLE: idle}


def decide_task(task: Record) -> list[Command]:
    """The commands answering a decoded `ostinato.task.WorkflowTask`, as (full record name, body) pairs.

    Decided from `task["events"]` alone; a task with nothing new to act on (a signal, a redelivery) gets [].

    Raises:
        UnknownTypeError: no program is called `task["workflow_type"]`.
    """
    program = WORKFLOWS.get(task["workflow_type"])
    if program is None:
        raise UnknownTypeError(f"no test program for workflow type {task['workflow_type']!r}")
    return program(task["events"])


# -- activities -------------------------------------------------------------------------------------------------

def _greet(args: Sequence[Record]) -> Any:
    return f"Hello, {first_value(args, 'world')}"


def _step(args: Sequence[Record]) -> Any:
    state = first_value(args, None)
    return {"step": state["step"], "value": f"{state['value']}.{state['step']}"}


ACTIVITIES: dict[str, Callable[[Sequence[Record]], Any]] = {GREET: _greet, STEP: _step}


def run_activity(task: Record) -> list[Record]:
    """The result payloads of a decoded `ostinato.task.ActivityTask`.

    Raises:
        UnknownTypeError: no activity is called `task["activity_type"]` (the worker fails it as non-retryable).
    """
    activity = ACTIVITIES.get(task["activity_type"])
    if activity is None:
        raise UnknownTypeError(f"no test activity {task['activity_type']!r}")
    return [to_payload(activity(task["input"]))]
