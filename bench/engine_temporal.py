"""Temporal as an `Engine` of bench/harness.py: the CLI dev server and Python worker processes, driven from here.

    .venv/bin/python -m bench.engine_temporal --shape hello --count 500 --concurrency 50 [--persistent]

Comparability choices:
- One dev server (SQLite: in memory, or a file with `persistent`), reused across scenarios.
- start_only (S6) starts workflows on a task queue no worker polls, and returns when the start is acknowledged.
- signal (S5) waits, by a history long poll, until the workflow's first workflow task has completed (it is then
  really blocked in `wait_condition`), then measures signal sent -> result received. A signal sent earlier would
  ride along with the first workflow task and measure nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from bench import harness
from bench.harness import WORKER_CACHE, Outcome, Scenario
from bench.temporal_server import TemporalDevServer, quiet_runtime
from ostinato.infra.process import pid_alive, tail, terminate

REPO = Path(__file__).resolve().parent.parent
WORKER_MARKER = "bench.temporal_worker"
IDLE_IN_FLIGHT = 200  # S7 starts in flight at once: enough to keep the server busy, not enough to time out
ARGS: dict[str, list[Any]] = {"hello": ["bench"], "seq10": [], "fanout100": [], "sleep1s": [], "signal": [],
                              "idle": []}


class TemporalEngine:
    """Temporal dev server + `workers` worker processes; a client in the generator process starts workflows."""

    def __init__(self, *, persistent: bool = False, workers: int = 1, home: Path | None = None) -> None:
        self.name = "temporal-sqlite" if persistent else "temporal"
        self.persistent = persistent
        self.worker_count = workers
        self._owns_home = home is None
        self.home = home or Path(tempfile.mkdtemp(prefix="ostinato-bench-temporal-"))
        token = uuid.uuid4().hex[:8]
        self.task_queue = f"bench-{token}"
        self.unserved_queue = f"bench-unserved-{token}"  # S6: nobody polls it
        self._idle_prefix = f"idle-{token}"
        self._idle_started = 0
        self.server: TemporalDevServer | None = None
        self.client: Client | None = None
        self._workers: list[subprocess.Popen[bytes]] = []

    async def start(self, scenario: Scenario) -> None:
        if self.server is None:
            db_file = self.home / "temporal.db" if self.persistent else None
            if db_file is not None:
                db_file.unlink(missing_ok=True)  # every benchmark starts from an empty database
            self.server = TemporalDevServer(self.home, db_file)
            await self.server.start()
            self.client = await Client.connect(self.server.address, runtime=quiet_runtime())
        if scenario.shape == "start_only":
            await asyncio.to_thread(self._stop_workers)  # S6 measures ingestion alone
        elif not self._workers:
            await self._start_workers()

    async def _start_workers(self, timeout: float = 120.0) -> None:
        assert self.server is not None
        ready_files = []
        for i in range(self.worker_count):
            ready = self.home / f"worker-{i}.ready"
            ready.unlink(missing_ok=True)
            ready_files.append(ready)
            argv = [sys.executable, "-m", WORKER_MARKER, "--address", self.server.address,
                    "--task-queue", self.task_queue, "--ready-file", str(ready),
                    "--max-cached-workflows", str(WORKER_CACHE)]
            with open(self.home / f"worker-{i}.log", "ab") as log:
                self._workers.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                                      stdin=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + timeout
        while not all(f.exists() for f in ready_files):
            for i, proc in enumerate(self._workers):
                if proc.poll() is not None:
                    raise RuntimeError(f"temporal worker {i} exited ({proc.returncode}):\n"
                                       f"{tail(self.home / f'worker-{i}.log')}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"temporal workers not ready after {timeout:.0f} s")
            await asyncio.sleep(0.2)

    def _stop_workers(self) -> None:
        workers, self._workers = self._workers, []
        for proc in workers:
            if pid_alive(proc.pid):
                terminate(proc.pid, WORKER_MARKER, timeout=15.0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)

    async def _start(self, workflow: str, workflow_id: str, task_queue: str | None = None) -> WorkflowHandle[Any, Any]:
        assert self.client is not None, "start() first"
        return await self.client.start_workflow(workflow, args=ARGS[workflow], id=workflow_id,
                                                task_queue=task_queue or self.task_queue)

    async def run_one(self, scenario: Scenario, workflow_id: str) -> Outcome:
        shape = scenario.shape
        started = time.perf_counter()
        if shape == "start_only":
            await self._start("hello", workflow_id, self.unserved_queue)
            return Outcome(time.perf_counter() - started)
        handle = await self._start(shape, workflow_id)
        if shape == "signal":
            await _first_workflow_task_completed(handle)
            sent = time.perf_counter()
            await handle.signal("go")
            await handle.result()
            done = time.perf_counter()
            return Outcome(done - started, metric_ms=(done - sent) * 1000)
        await handle.result()
        latency = time.perf_counter() - started
        return Outcome(latency, later=(lambda: _timer_lateness_ms(handle)) if shape == "sleep1s" else None)

    async def start_idle(self, count: int, progress: Callable[[int], None]) -> None:
        indices = iter(range(self._idle_started, self._idle_started + count))
        self._idle_started += count  # a second call in the same run must not reuse ids

        async def lane() -> None:
            for i in indices:  # shared iterator: IDLE_IN_FLIGHT starts in flight at any time
                await self._start("idle", f"{self._idle_prefix}-{i}")
                progress(1)

        await asyncio.gather(*(lane() for _ in range(min(IDLE_IN_FLIGHT, max(1, count)))))

    def processes(self) -> dict[str, list[int]]:
        return {"server": [self.server.pid] if self.server else [], "worker": [p.pid for p in self._workers]}

    async def stop(self) -> None:
        self.client = None  # the SDK client has no close(); its connection goes with the object
        await asyncio.to_thread(self._stop_workers)
        server, self.server = self.server, None
        if server is not None:
            await asyncio.to_thread(server.stop)
        if self._owns_home:
            shutil.rmtree(self.home, ignore_errors=True)


async def _first_workflow_task_completed(handle: WorkflowHandle[Any, Any]) -> None:
    """Return once the workflow has run its first task (a history long poll, not a busy describe loop)."""
    async for event in handle.fetch_history_events(wait_new_event=True):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return
    raise RuntimeError(f"workflow {handle.id} closed before it waited for the signal")


async def _timer_lateness_ms(handle: WorkflowHandle[Any, Any]) -> float:
    """TIMER_FIRED minus TIMER_STARTED minus the 1 s asked, from the history (read after the scenario's window,
    `Outcome.later`): the same measure as Ostinato's, whatever each engine calls a task's start time."""
    times: dict[int, float] = {}
    async for event in handle.fetch_history_events():
        if event.event_type in (EventType.EVENT_TYPE_TIMER_STARTED, EventType.EVENT_TYPE_TIMER_FIRED):
            times[event.event_type] = event.event_time.ToMilliseconds()
    return times[EventType.EVENT_TYPE_TIMER_FIRED] - times[EventType.EVENT_TYPE_TIMER_STARTED] - 1000


SCENARIO_NAMES = {"hello": "S1", "seq10": "S2", "fanout100": "S3", "sleep1s": "S4", "signal": "S5",
                  "start_only": "S6"}
ACTIVITIES_PER_WORKFLOW = {"hello": 1, "seq10": 10, "fanout100": 100}


async def _self_check(args: argparse.Namespace) -> None:
    engine = TemporalEngine(persistent=args.persistent, workers=args.workers)
    results = []
    try:
        for shape in args.shape or ["hello"]:
            scenario = Scenario(SCENARIO_NAMES[shape], shape, args.count, concurrency=args.concurrency,
                                warmup=args.warmup, rate=args.rate,
                                activities_per_workflow=ACTIVITIES_PER_WORKFLOW.get(shape, 0))
            await engine.start(scenario)
            results.append(await harness.run_scenario(engine, scenario, uuid.uuid4().hex[:8]))
    finally:
        await engine.stop()
    print(harness.markdown(results))


def main() -> None:
    parser = argparse.ArgumentParser(description="Run scenarios against Temporal alone (a self-check).")
    parser.add_argument("--shape", action="append", choices=harness.SHAPES, help="repeatable; default hello")
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rate", type=float, default=None, help="open loop: starts per second")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--persistent", action="store_true", help="SQLite file instead of in-memory")
    asyncio.run(_self_check(parser.parse_args()))


if __name__ == "__main__":
    main()
