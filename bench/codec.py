"""Single-threaded cost of the wire codec (Avro encode/decode of typical records), key hashing and schema loading.

Run: `.venv/bin/python bench/codec.py [--seconds S] [--json]`. Each figure is the median of 3 timed runs of S
seconds (default 1) after a short warm-up; figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import fastavro

from ostinato.schemas import codec, wire
from ostinato.schemas.keys import shard_for, workflow_key
from ostinato.schemas.partitioner import partition_for

REPEATS = 3
SHARDS = 16
NS, WF_ID, RUN_ID = "payments", "order-2024-11-29-7f3a9c1e", "0193a7e2-5c1b-7d4e-9f21-6b8e3d0c4a57"
T0 = 1_732_870_000_000


def json_payload(size: int = 300) -> dict[str, Any]:
    """A `json/plain` payload whose data is a realistic JSON object padded to about `size` bytes."""
    value: dict[str, Any] = {"order_id": WF_ID, "customer": {"id": "cus_8Hq2LmX0", "tier": "gold"},
                             "items": [{"sku": "SKU-10442", "qty": 2, "price": "19.99"}], "currency": "EUR", "note": ""}
    value["note"] = "x" * max(0, size - len(json.dumps(value).encode()))
    return {"metadata": {"encoding": b"json/plain"}, "data": json.dumps(value).encode()}


RETRY = {"initial_interval_ms": 1000, "backoff_coefficient": 2.0, "maximum_interval_ms": 60_000,
         "maximum_attempts": 5, "non_retryable_error_types": ["InvalidOrder"]}
SCHEDULE = {"activity_id": "1", "activity_type": "charge_card", "task_queue": "payments", "input": [json_payload()],
            "header": {}, "schedule_to_close_timeout_ms": None, "schedule_to_start_timeout_ms": None,
            "start_to_close_timeout_ms": 30_000, "heartbeat_timeout_ms": None, "retry_policy": RETRY}


def command(body: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"namespace": NS, "workflow_id": WF_ID, "run_id": RUN_ID, "request_id": "req-6f1d2b9a7c3e4f50",
            "identity": "worker-1@host-a", "time_ms": T0, "reply_partition": 3, "body": body}


def event(event_id: int, event_type: str, attributes: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"event_id": event_id, "event_time_ms": T0 + event_id, "event_type": event_type, "applier_version": 1,
            "attributes": attributes}


SAMPLES: list[tuple[str, str, dict[str, Any]]] = [
    ("Command/RespondWorkflowTaskCompleted x3", wire.COMMAND, command((
        wire.command_type("RespondWorkflowTaskCompleted"),
        {"scheduled_event_id": 2, "attempt": 1, "force_create_new_task": False, "sdk_flags": [1], "build_id": "v1",
         "commands": [
             (wire.command_type("ScheduleActivityTaskCommand"), SCHEDULE),
             (wire.command_type("StartTimerCommand"), {"timer_id": "2", "start_to_fire_timeout_ms": 300_000}),
             (wire.command_type("UpsertWorkflowSearchAttributesCommand"), {"search_attributes": {
                 "OrderStatus": {"metadata": {"encoding": b"json/plain"}, "data": b'"charging"'}}}),
         ]}))),
    ("Command/StartWorkflowExecution", wire.COMMAND, command((
        wire.command_type("StartWorkflowExecution"),
        {"workflow_type": "OrderWorkflow", "task_queue": "payments", "input": [json_payload()],
         "execution_timeout_ms": None, "run_timeout_ms": 86_400_000, "task_timeout_ms": 10_000,
         "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL", "retry_policy": None, "memo": {},
         "search_attributes": {}, "header": {}, "parent": None}))),
    ("HistoryEvent/ActivityTaskScheduled", wire.HISTORY_EVENT, event(5, "ACTIVITY_TASK_SCHEDULED", (
        "ostinato.history.ActivityTaskScheduledEventAttributes",
        {**SCHEDULE, "workflow_task_completed_event_id": 4}))),
    ("HistoryEvent/ActivityTaskCompleted", wire.HISTORY_EVENT, event(7, "ACTIVITY_TASK_COMPLETED", (
        "ostinato.history.ActivityTaskCompletedEventAttributes",
        {"result": [json_payload()], "scheduled_event_id": 5, "started_event_id": 6, "identity": "worker-1@host-a"}))),
    ("ActivityTask", wire.ACTIVITY_TASK,
     {"namespace": NS, "workflow_id": WF_ID, "run_id": RUN_ID, "workflow_type": "OrderWorkflow", "activity_id": "1",
      "activity_type": "charge_card", "task_queue": "payments", "scheduled_event_id": 5, "attempt": 1,
      "input": [json_payload()], "header": {}, "heartbeat_details": [], "scheduled_time_ms": T0,
      "current_attempt_scheduled_time_ms": T0, "start_to_close_timeout_ms": 30_000,
      "schedule_to_close_timeout_ms": None, "heartbeat_timeout_ms": None, "retry_policy": RETRY}),
]


def ops_per_second(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of `fn` over `seconds`, in batches so the clock is read rarely."""
    warm_end = time.perf_counter() + min(0.2, seconds / 5)
    batch = 1
    while time.perf_counter() < warm_end:  # warm-up, and grow the batch to about 10 ms
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        if time.perf_counter() - start < 0.01:
            batch *= 2
    count, start = 0, time.perf_counter()
    end = start + seconds
    while (now := time.perf_counter()) < end:
        for _ in range(batch):
            fn()
        count += batch
    return count / (now - start)


def measure(fn: Callable[[], object], seconds: float) -> dict[str, float]:
    rate = statistics.median(ops_per_second(fn, seconds) for _ in range(REPEATS))
    return {"ops_per_s": rate, "us_per_op": 1e6 / rate}


def machine() -> dict[str, Any]:
    return {"cpu_count": os.cpu_count(), "python": platform.python_version(), "implementation":
            platform.python_implementation(), "fastavro": fastavro.__version__, "platform": platform.platform(),
            "fastavro_compiled": type(fastavro.write.schemaless_writer).__name__ == "cython_function_or_method"}


def run(seconds: float) -> dict[str, Any]:
    start = time.perf_counter()
    registry = codec.registry()  # the first call builds it: this is the cold cost every process pays once
    first_build_ms = (time.perf_counter() - start) * 1000
    rebuild_ms = statistics.median(_timed_build() for _ in range(REPEATS))
    rows: list[dict[str, Any]] = []
    for label, type_name, record in SAMPLES:
        data = codec.encode(type_name, record)
        # Sanity, not timing: what is read back writes the same bytes (fields left out take their defaults).
        assert codec.encode(*codec.decode(data)) == data, f"{label} does not round-trip"
        rows.append({"name": label, "size_bytes": len(data),
                     "encode": measure(lambda t=type_name, r=record: codec.encode(t, r), seconds),
                     "decode": measure(lambda d=data: codec.decode(d), seconds)})
        # The same through fastavro alone: the careful path the compiled writers and readers fall back to.
        info = registry.schema(type_name)
        rows.append({"name": f"  the same, fastavro ({label.split('/')[0]})", "size_bytes": len(data),
                     "encode": measure(lambda i=info, t=type_name, r=record: registry._encode_carefully(t, i, r),
                                       seconds),
                     "decode": measure(lambda i=info, d=data: registry._decode_carefully(i, i, d), seconds)})
    key = workflow_key(NS, WF_ID)
    rows.append({"name": f"partition_for({len(key.encode())}-byte key, {SHARDS})", "size_bytes": None,
                 "encode": measure(lambda: partition_for(key, SHARDS), seconds), "decode": None})
    rows.append({"name": f"shard_for(ns, workflow_id, {SHARDS})", "size_bytes": None,
                 "encode": measure(lambda: shard_for(NS, WF_ID, SHARDS), seconds), "decode": None})
    return {"machine": machine(), "seconds_per_measurement": seconds, "repeats": REPEATS,
            "schemas": len(registry.schemas), "registry_first_build_ms": first_build_ms,
            "registry_rebuild_ms": rebuild_ms, "results": rows}


def _timed_build() -> float:
    start = time.perf_counter()
    codec.SchemaRegistry()
    return (time.perf_counter() - start) * 1000


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"machine: {m['cpu_count']} CPUs, {m['implementation']} {m['python']}, fastavro {m['fastavro']}"
             f" ({'compiled' if m['fastavro_compiled'] else 'pure Python'}), {m['platform']}",
             f"budget: {report['seconds_per_measurement']:g} s per measurement, median of {report['repeats']}"
             ", single thread",
             f"registry(): first build {report['registry_first_build_ms']:.1f} ms, rebuild "
             f"{report['registry_rebuild_ms']:.1f} ms ({report['schemas']} record schemas)", ""]
    head = f"{'record / operation':<44} {'bytes':>6} {'encode op/s':>12} {'µs/op':>8} {'decode op/s':>12} {'µs/op':>8}"
    lines += [head, "-" * len(head)]

    def cells(m: dict[str, float] | None) -> str:
        return f"{m['ops_per_s']:>12,.0f} {m['us_per_op']:>8.2f}" if m else f"{'':>12} {'':>8}"

    for row in report["results"]:
        size = "" if row["size_bytes"] is None else str(row["size_bytes"])
        lines.append(f"{row['name']:<44} {size:>6} {cells(row['encode'])} {cells(row['decode'])}")
    lines.append("(partition_for / shard_for figures are in the encode columns: calls per second and µs per call;")
    lines.append(" each record's first row is the codec as used, with its compiled writer and reader, the second")
    lines.append(" fastavro alone, which the codec falls back to for a record the compiled code is unsure of)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time budget of each measurement (default 1)")
    parser.add_argument("--json", action="store_true", help="print a JSON document instead of a table")
    args = parser.parse_args(argv)
    report = run(args.seconds)
    sys.stdout.write((json.dumps(report, indent=2) if args.json else render(report)) + "\n")


if __name__ == "__main__":
    main()
