"""Ostinato as a benchmark `Engine`: a local broker, one `ostinato server` and `ostinato worker` processes.

Everything runs as child processes (the broker's JVM, the server, the workers) so the harness can charge CPU and
RSS to each role; the client is the SDK's HTTP client in the generator process. Run one scenario with
`python -m bench.engine_ostinato --shape hello --count 200 --concurrency 50`, or the S1-S6 set with `--suite`.

How each shape is measured (keep in step with bench/engine_temporal.py):
- latency: perf_counter around start + result. The result comes from the SDK's history polling (what
  `WorkflowHandle.result()` does) or, with `result_via="api"`, from the JSON API's long poll.
- sleep1s: metric = the timer's lateness in history: TIMER_FIRED - TIMER_STARTED - 1 s.
- signal: metric = from the signal call to the result, signalled once its first workflow task completed.
- start_only: latency of the start alone, no worker running. By default the JSON API's `"wait": false` (202 once
  Kafka holds the command; the SDK Client has no such option); `sync_start=True` waits for the engine's reply.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp

from bench import harness, prometheus_text
from bench.harness import Outcome, Scenario
from bench.ostinato_workflows import TASK_QUEUE
from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.infra.process import free_ports
from ostinato.sdk._http import HttpService
from ostinato.services.admin.cluster import init_cluster

REPO = Path(__file__).resolve().parent.parent
INGEST_QUEUE = "bench-ingest"  # start_only: a queue no worker serves, so starts stay starts
NO_TASK_TIMEOUT = timedelta(seconds=120)  # the engine's maximum: unserved workflow tasks must not time out mid-scenario
RESULT_WAIT_MS = 60_000
READ_YOUR_WRITES_S = 5.0
ACTIVITIES = {"hello": 1, "seq10": 10, "fanout100": 100}
INPUTS: dict[str, list[Any]] = {"hello": ["bench"]}


@dataclass
class Phases:
    """Where one workflow's latency went, client side (for the "where the time goes" figures)."""

    start_ms: list[float] = field(default_factory=list)  # the start call
    result_ms: list[float] = field(default_factory=list)  # start acknowledged -> result in hand
    seen_after_close_ms: list[float] = field(default_factory=list)  # closing event written -> client has it


class OstinatoEngine:
    """The `bench.harness.Engine` for Ostinato. Processes start at the first `start` and serve every scenario."""

    name = "ostinato"

    def __init__(self, *, shards: int = 4, workers: int = 1, home: Path | None = None, kafka: str | None = None,
                 result_via: str = "sdk", sync_start: bool = False, processors: int | None = None) -> None:
        if result_via not in ("sdk", "api"):
            raise ValueError(f"result_via must be 'sdk' or 'api', not {result_via!r}")
        self.shards, self.workers, self.kafka = shards, workers, kafka
        # One history processor per core, at most one per shard, as docs/architecture.md §4 recommends: on the
        # 2-core machine the benchmarks run on, 2 against 4 gave S1 +19-25% and S2 +3-41% (fewer, larger
        # transactions) and a third less memory, at the cost of S4's timer lateness (docs/benchmarks.md).
        self.processors = processors or min(shards, len(os.sched_getaffinity(0)))  # the cores this may use
        self._metrics_before: dict[str, float] = {}
        self._scraped_at = 0.0  # when `_metrics_before` was read (time.monotonic)
        self.result_via, self.sync_start = result_via, sync_start
        self._own_home = home is None
        self.home = home or Path(tempfile.mkdtemp(prefix="ostinato-bench-"))
        self.prefix = f"bench{uuid.uuid4().hex[:6]}"
        self.broker: KafkaCluster | None = None
        self.server: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.worker_procs: list[subprocess.Popen[bytes]] = []
        self.session: aiohttp.ClientSession | None = None
        self.client: Client | None = None
        self.phases = Phases()

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def start(self, scenario: Scenario) -> None:
        if self.client is None:
            await asyncio.to_thread(self._start_cluster)
            # The SDK's own session allows 100 connections; S4 keeps 500 workflows (and their polls) in flight.
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            async with self.session.get(self.url + "/api/v1/cluster") as resp:
                cluster = await resp.json()
            self.client = Client(HttpService(self.url, self.session, cluster))
        if scenario.shape != "start_only" and not self.worker_procs:
            await self._start_workers()
        self.phases = Phases()
        self._metrics_before = await self._scrape()
        self._scraped_at = time.monotonic()

    async def _scrape(self) -> dict[str, float]:
        assert self.session is not None
        async with self.session.get(self.url + "/metrics") as resp:
            return prometheus_text.samples(await resp.text())

    async def processor_figures(self) -> str:
        """What the server's processors counted since the scenario started (`/metrics`): transactions, their
        length, batch size and the processors' own timer lateness (deadline -> the batch that fired it), for the
        result's note. Histogram quantiles are interpolated inside coarse buckets (2x apart)."""
        delta = prometheus_text.delta(self._metrics_before, await self._scrape())
        txn, count, _ = prometheus_text.histogram(delta, "ostinato_processor_commit_seconds")
        _, batches, batch_sum = prometheus_text.histogram(delta, "ostinato_processor_batch_size")
        late, fired, _ = prometheus_text.histogram(delta, "ostinato_processor_timer_lateness_seconds")

        def ms(buckets: list[tuple[float, float]], q: float) -> str:
            return f"{prometheus_text.quantile(buckets, q) * 1000:.0f}"

        note = (f"{self.processors} processors: {count:.0f} transactions, p50/p99 {ms(txn, 0.5)}/{ms(txn, 0.99)} ms, "
                f"{batch_sum / batches if batches else 0:.1f} commands+timers each")
        phases = []
        for phase in ("decide", "wait", "produce", "send_offsets", "commit", "after_commit"):
            only = {k: v for k, v in delta.items() if f'phase="{phase}"' in k}
            buckets, _, _ = prometheus_text.histogram(only, "ostinato_processor_phase_seconds")
            if buckets:
                phases.append(f"{phase} {ms(buckets, 0.5)}/{ms(buckets, 0.99)}")
        if phases:
            note += f"; phases p50/p99 ms: {', '.join(phases)}"
        if fired:
            note += f"; timers fired late by p50/p99 {ms(late, 0.5)}/{ms(late, 0.99)} ms (processor's measure)"
        _, collections, collected_s = prometheus_text.histogram(delta, "ostinato_processor_gc_seconds")
        note += f"; {collections:.0f} full garbage collections ({collected_s * 1000:.0f} ms)"
        ran = delta.get("ostinato_processor_thread_cpu_seconds_total")
        waited = delta.get("ostinato_processor_thread_cpu_wait_seconds_total")
        if ran is not None and waited is not None:  # Linux only (schedstat)
            elapsed = time.monotonic() - self._scraped_at
            note += (f"; processor threads ran {ran:.1f} s and waited {waited:.1f} s for a core "
                     f"in {elapsed:.1f} s")
        return note

    def _start_cluster(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        bootstrap = self.kafka
        if bootstrap is None:
            self.broker = KafkaCluster(self.home / "kafka", nodes=1, port=None).start()
            bootstrap = self.broker.bootstrap
        init_cluster(bootstrap, self.prefix, shards=self.shards)
        port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "ostinato", "server", "--kafka", bootstrap, "--prefix", self.prefix,
                "--port", str(port), "--data-dir", str(self.home / "server"), "--processors", str(self.processors)]
        with (self.home / "server.log").open("ab") as log:
            # Its own session, as Temporal's server and workers have (bench/temporal_server.py): Linux's autogroup
            # shares the CPU between sessions, so a server in the generator's session made the server, worker,
            # broker and load generator one group against each processor process's own, a share no deployment
            # gives and Temporal's server did not get (docs/benchmarks.md, "Sessions").
            self.server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                           start_new_session=True)
        self._wait_owning()

    def _wait_owning(self, timeout_s: float = 120.0) -> None:
        """Until the server answers and owns every shard: before that, starts would wait on a rebalance."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.server is not None
            if self.server.poll() is not None:
                raise RuntimeError(f"ostinato server exited with {self.server.returncode}: {self._tail('server')}")
            try:
                with urllib.request.urlopen(self.url + "/api/v1/cluster/owners", timeout=2) as resp:
                    owners = json.loads(resp.read())["owners"]
                if len({o["shard"] for o in owners if o["read_endpoint"] == self.url}) >= self.shards:
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"the server did not own {self.shards} shards in {timeout_s:.0f}s: {self._tail('server')}")

    async def _start_workers(self) -> None:
        for n in range(self.workers):
            with (self.home / f"worker-{n}.log").open("ab") as log:
                self.worker_procs.append(subprocess.Popen(
                    [sys.executable, "-m", "ostinato", "worker", "bench.ostinato_workflows:worker", "--server",
                     self.url], stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True))  # as above
        # Ready means in the consumer group with partitions assigned: a first workflow that completes says so.
        deadline = time.monotonic() + 120
        while len(await self._members()) < self.workers and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        assert self.client is not None
        handle = await self.client.start_workflow("hello", "probe", id=f"probe-{uuid.uuid4().hex}",
                                                  task_queue=TASK_QUEUE)
        await asyncio.wait_for(handle.result(), 120)

    async def _task_queue(self) -> dict[str, Any]:
        assert self.session is not None
        async with self.session.get(f"{self.url}/api/v1/namespaces/default/task-queues/{TASK_QUEUE}") as resp:
            if resp.status != 200:  # e.g. while the worker's group is still forming: asked again shortly
                print(f"  task-queue describe: HTTP {resp.status} {(await resp.text())[:200]}", file=sys.stderr)
                return {}
            found: dict[str, Any] = await resp.json()
            return found

    async def _members(self) -> list[Any]:
        for proc in self.worker_procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a worker exited with {proc.returncode}: {self._tail('worker-0')}")
        return list((await self._task_queue()).get("workers") or [])

    def processes(self) -> dict[str, list[int]]:
        broker = [pid for n in self.broker.nodes if (pid := self.broker.pid(n.node_id))] if self.broker else []
        return {"broker": broker, "server": [self.server.pid] if self.server else [],
                "worker": [p.pid for p in self.worker_procs if p.poll() is None]}

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session, self.client = None, None
        # Workers first (SIGTERM lets running activities finish; none should run by now), then the server.
        for group in (self.worker_procs, [self.server] if self.server else []):
            for proc in group:
                proc.send_signal(signal.SIGTERM)
            for proc in group:
                try:
                    await asyncio.to_thread(proc.wait, 60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    await asyncio.to_thread(proc.wait, 30)
        self.worker_procs, self.server = [], None
        if self.broker is not None:
            await asyncio.to_thread(self.broker.stop)
            self.broker = None
        if self._own_home:
            shutil.rmtree(self.home, ignore_errors=True)

    def _tail(self, name: str, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.home / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    # -- one workflow -----------------------------------------------------------------------------------------

    async def run_one(self, scenario: Scenario, workflow_id: str) -> Outcome:
        assert self.client is not None
        shape = scenario.shape
        t0 = time.perf_counter()
        if shape == "start_only":
            await self._start_only(workflow_id)
            return Outcome(time.perf_counter() - t0)
        handle = await self.client.start_workflow(shape, *INPUTS.get(shape, []), id=workflow_id,
                                                  task_queue=TASK_QUEUE)
        t1 = time.perf_counter()
        if shape == "signal":  # as for Temporal: signal a workflow that already waits (its first task done)
            await self._first_workflow_task_completed(workflow_id, handle.run_id)
            t1 = time.perf_counter()
            await handle.signal("go")
        await self._result(workflow_id, handle.run_id)
        t2 = time.perf_counter()
        self.phases.start_ms.append((t1 - t0) * 1000)
        self.phases.result_ms.append((t2 - t1) * 1000)
        if shape == "sleep1s":
            run_id = handle.run_id
            return Outcome(t2 - t0, later=lambda: self._timer_lateness_ms(workflow_id, run_id))
        return Outcome(t2 - t0, metric_ms=(t2 - t1) * 1000 if shape == "signal" else None)

    async def _first_workflow_task_completed(self, workflow_id: str, run_id: str) -> None:
        """Long-poll the owner's history until the first WORKFLOW_TASK_COMPLETED (no busy loop)."""
        assert self.client is not None
        service: Any = self.client.service
        first = 1
        while True:
            page = await service._history_page("default", workflow_id, run_id, first, wait_ms=10_000,
                                               deadline=time.monotonic() + 60)
            events = [] if page is None or page.get("unavailable") else page["events"]
            if any(e["event_type"] == "WORKFLOW_TASK_COMPLETED" for e in events):
                return
            first += len(events)
            if not events:
                await asyncio.sleep(0.01)

    async def _timer_lateness_ms(self, workflow_id: str, run_id: str) -> float:
        """TIMER_FIRED minus TIMER_STARTED minus the 1 s asked, from the history (read after the scenario's window,
        `Outcome.later`): the same measure as Temporal's."""
        assert self.client is not None
        events = await self.client.service.history("default", workflow_id, run_id)
        times = {e["event_type"]: e["event_time_ms"] for e in events if e["event_type"].startswith("TIMER_")}
        return float(times["TIMER_FIRED"] - times["TIMER_STARTED"] - 1000)

    async def _result(self, workflow_id: str, run_id: str) -> Any:
        assert self.client is not None and self.session is not None
        if self.result_via == "api":
            url = f"{self.url}/api/v1/namespaces/default/workflows/{workflow_id}/result?timeout_ms={RESULT_WAIT_MS}"
            deadline = time.monotonic() + READ_YOUR_WRITES_S
            while True:
                async with self.session.get(url) as resp:
                    body = await resp.json()
                # The start's reply comes at commit, the owner's store is written a moment later: until then the
                # long poll answers 404 at once instead of waiting (the SDK retries the same way).
                if resp.status != 404 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.02)
            if resp.status != 200 or body.get("status") != "COMPLETED":
                raise RuntimeError(f"{workflow_id}: HTTP {resp.status} {body}")
            return body.get("result")
        # What `WorkflowHandle.result()` does (poll the end of history), keeping the closing event's time.
        event = await self.client.service.wait_closed(self.client.namespace, workflow_id, run_id)
        self.phases.seen_after_close_ms.append(time.time() * 1000 - event["event_time_ms"])
        if event["event_type"] != "WORKFLOW_EXECUTION_COMPLETED":
            raise RuntimeError(f"{workflow_id}: {event['event_type']}")
        return self.client.data_converter.decode_one(event["attributes"][1]["result"], None)

    async def _start_only(self, workflow_id: str, workflow_type: str = "hello", queue: str = INGEST_QUEUE) -> None:
        assert self.client is not None and self.session is not None
        if self.sync_start:
            await self.client.start_workflow(workflow_type, *INPUTS.get(workflow_type, []), id=workflow_id,
                                             task_queue=queue,
                                             task_timeout=NO_TASK_TIMEOUT if queue == INGEST_QUEUE else None)
            return
        body = {"workflow_id": workflow_id, "workflow_type": workflow_type, "task_queue": queue,
                "input": INPUTS.get(workflow_type, []), "wait": False}
        if queue == INGEST_QUEUE:
            body["task_timeout_ms"] = NO_TASK_TIMEOUT // timedelta(milliseconds=1)
        async with self.session.post(f"{self.url}/api/v1/namespaces/default/workflows", json=body) as resp:
            if resp.status != 202:
                raise RuntimeError(f"start {workflow_id}: HTTP {resp.status} {await resp.text()}")

    async def start_idle(self, count: int, progress: Callable[[int], None]) -> None:
        """Synchronous starts, 200 in flight, then until the worker has taken every first workflow task: the
        measured run after it must not share the machine with a backlog."""
        token = uuid.uuid4().hex[:8]
        it = iter(range(count))

        async def lane() -> None:
            assert self.client is not None
            for i in it:
                await self.client.start_workflow("idle", id=f"idle-{token}-{i}", task_queue=TASK_QUEUE)
                progress(1)

        await asyncio.gather(*(lane() for _ in range(min(200, max(1, count)))))
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            described = await self._task_queue()
            backlog = sum(v["backlog"] for v in described.values() if isinstance(v, dict) and "backlog" in v)
            if backlog == 0 and described:
                return
            await asyncio.sleep(1.0)


# -- the command line -----------------------------------------------------------------------------------------

SUITE = [  # (name, shape, count, concurrency, warm-up): sized to finish in minutes on a 2-core machine
    ("S1", "hello", 500, 50, 20), ("S2", "seq10", 100, 50, 10), ("S3", "fanout100", 10, 5, 2),
    ("S4", "sleep1s", 1000, 500, 20), ("S5", "signal", 500, 50, 20), ("S6", "start_only", 2000, 50, 20),
]
NAMES = {shape: name for name, shape, *_ in SUITE}


def _p50(values: list[float]) -> str:
    return f"{harness.percentiles(values)['p50']:.1f}" if values else "-"


async def _main(args: argparse.Namespace) -> None:
    if args.suite:
        plan = [Scenario(n, s, c, k, warmup=w, activities_per_workflow=ACTIVITIES.get(s, 0))
                for n, s, c, k, w in SUITE if not args.only or n in args.only]
    else:
        plan = [Scenario(NAMES[args.shape], args.shape, args.count, args.concurrency, warmup=args.warmup,
                         rate=args.rate, activities_per_workflow=ACTIVITIES.get(args.shape, 0))]
    engine = OstinatoEngine(shards=args.shards, workers=args.workers, kafka=args.kafka, result_via=args.result,
                            sync_start=args.sync_start)
    results, run_id = [], uuid.uuid4().hex[:8]
    try:
        for scenario in plan:
            await engine.start(scenario)
            result = await harness.run_scenario(engine, scenario, run_id)
            p = engine.phases
            result.note = (f"p50 start {_p50(p.start_ms)} ms, start->result {_p50(p.result_ms)} ms, "
                           f"closed->seen {_p50(p.seen_after_close_ms)} ms")
            print(f"  {scenario.name}: {result.note}", file=sys.stderr)
            results.append(result)
    finally:
        await engine.stop()
    print(harness.markdown(results))
    if args.json:
        harness.write_json(args.json, results, {"engine": "ostinato", "shards": args.shards,
                                                "workers": args.workers, "result_via": args.result})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=harness.SHAPES, default="hello")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rate", type=float, help="open loop: starts per second")
    parser.add_argument("--suite", action="store_true", help="S1-S6 at the sizes in SUITE, one set of processes")
    parser.add_argument("--only", action="append", help="with --suite: just these scenarios (S1, S4...)")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--kafka", help="bootstrap servers of a running broker (default: start one)")
    parser.add_argument("--result", choices=("sdk", "api"), default="sdk",
                        help="sdk: poll history as WorkflowHandle.result() does; api: the JSON long poll")
    parser.add_argument("--sync-start", action="store_true", help="start_only: wait for the engine's reply")
    parser.add_argument("--json", help="also write the results here")
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
