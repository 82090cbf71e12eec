"""Throughput of the deterministic core: decide + apply for a hello-workflow command mix, one core, no I/O.

Each workflow takes five commands, as the processor sees them off Kafka (already decoded): start; workflow task
completed with one ScheduleActivityTask; activity started; activity completed; workflow task completed with
CompleteWorkflowExecution. Figures are printed, never asserted.

    .venv/bin/python bench/core.py [--workflows N] [--repeat R] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
from typing import Any

from ostinato.schemas import codec, wire
from ostinato.streams.config import Config
from ostinato.streams.deciders import decide
from ostinato.streams.model import Workflow

Record = dict[str, Any]
PAYLOAD = {"metadata": {"encoding": b"json/plain"}, "data": b'{"order": "A-1", "amount": 1999, "currency": "EUR"}'}


def command(workflow_id: str, name: str, body: Record, run_id: str = "", request_id: str = "r") -> Record:
    record = {"namespace": "default", "workflow_id": workflow_id, "run_id": run_id, "request_id": request_id,
              "identity": "bench-worker", "time_ms": 0, "reply_partition": 0,
              "body": (wire.command_type(name), body)}
    return codec.decode(codec.encode(wire.COMMAND, record))[1]


def one_workflow(i: int, config: Config, now: int) -> int:
    """Drive one hello workflow through the core; returns the number of commands decided."""
    wid = f"hello-{i}"
    wf = Workflow("default", wid)
    decide(wf, command(wid, "StartWorkflowExecution", {"workflow_type": "Hello", "task_queue": "hello",
                                                       "input": [PAYLOAD]}, request_id=f"s{i}"), now, config)
    run_id = wf.current.run_id  # type: ignore[union-attr]
    schedule = (wire.command_type("ScheduleActivityTaskCommand"), {
        "activity_id": "1", "activity_type": "say_hello", "input": [PAYLOAD], "start_to_close_timeout_ms": 10_000})
    decide(wf, command(wid, "RespondWorkflowTaskCompleted",
                       {"scheduled_event_id": 2, "attempt": 1, "commands": [schedule]}, run_id), now + 1, config)
    decide(wf, command(wid, "RecordActivityTaskStarted", {"scheduled_event_id": 5, "attempt": 1}, run_id),
           now + 2, config)
    decide(wf, command(wid, "RespondActivityTaskCompleted",
                       {"scheduled_event_id": 5, "attempt": 1, "result": [PAYLOAD]}, run_id), now + 3, config)
    done = (wire.command_type("CompleteWorkflowExecutionCommand"), {"result": [PAYLOAD]})
    decide(wf, command(wid, "RespondWorkflowTaskCompleted",
                       {"scheduled_event_id": 8, "attempt": 1, "commands": [done]}, run_id), now + 4, config)
    assert wf.runs[run_id].status == "COMPLETED"
    return 5


def measure(n: int, config: Config) -> tuple[float, int, int]:
    """Seconds spent in decide for n hello workflows (commands decoded beforehand), commands, events."""
    from ostinato.streams.deciders.common import new_run_id

    batches = []
    for i in range(n):
        wid = f"hello-{i}"
        run_id = new_run_id("default", wid, f"s{i}", str(i))
        schedule = (wire.command_type("ScheduleActivityTaskCommand"), {
            "activity_id": "1", "activity_type": "say_hello", "input": [PAYLOAD],
            "start_to_close_timeout_ms": 10_000})
        done = (wire.command_type("CompleteWorkflowExecutionCommand"), {"result": [PAYLOAD]})
        batches.append((Workflow("default", wid), [
            command(wid, "StartWorkflowExecution", {"workflow_type": "Hello", "task_queue": "hello",
                                                    "input": [PAYLOAD]}, request_id=f"s{i}"),
            command(wid, "RespondWorkflowTaskCompleted",
                    {"scheduled_event_id": 2, "attempt": 1, "commands": [schedule]}, run_id),
            command(wid, "RecordActivityTaskStarted", {"scheduled_event_id": 5, "attempt": 1}, run_id),
            command(wid, "RespondActivityTaskCompleted",
                    {"scheduled_event_id": 5, "attempt": 1, "result": [PAYLOAD]}, run_id),
            command(wid, "RespondWorkflowTaskCompleted",
                    {"scheduled_event_id": 8, "attempt": 1, "commands": [done]}, run_id),
        ]))
    gc.collect()
    events = commands = 0
    started = time.perf_counter()
    for now, (wf, cmds) in enumerate(batches):
        for c in cmds:
            step = decide(wf, c, 1_000_000 + now, config, offset=now)
            events += len(step.events)
            commands += 1
    elapsed = time.perf_counter() - started
    assert all(next(iter(wf.runs.values())).status == "COMPLETED" for wf, _ in batches)
    return elapsed, commands, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    config = Config()
    one_workflow(0, config, 1)  # warm-up: imports, registry, caches
    runs = [measure(args.workflows, config) for _ in range(args.repeat)]
    rates = [c / s for s, c, _ in runs]
    _, commands, events = runs[0]
    result = {
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "workflows": args.workflows, "commands_per_run": commands, "events_per_run": events,
        "commands_per_s_median": statistics.median(rates), "commands_per_s_best": max(rates),
        "workflows_per_s_median": statistics.median(rates) / 5,
        "us_per_command_median": 1e6 / statistics.median(rates),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"core decide+apply, hello mix (5 commands, {events // args.workflows} events per workflow), "
          f"{args.workflows} workflows x {args.repeat} runs, Python {result['machine']['python']}")
    print(f"  commands/s  median {result['commands_per_s_median']:>9,.0f}")
    print(f"  commands/s  best   {result['commands_per_s_best']:>9,.0f}")
    print(f"  workflows/s median {result['workflows_per_s_median']:>9,.0f}")
    print(f"  µs/command  median {result['us_per_command_median']:>9.1f}")


if __name__ == "__main__":
    main()
