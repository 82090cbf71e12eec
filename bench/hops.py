"""Hop anatomy of a hello workflow: where its latency goes, hop by hop, beside Kafka's own floor (issue 15).

Runs a broker, one `ostinato server` and one worker (bench/engine_ostinato.py), then:
1. closed loop: hello with many in flight, for the throughput (and to warm every process up);
2. lone: hello workflows one at a time, then the bare Kafka floor (bench/kafka_floor.py) with the same client
   settings, then a few seconds with nothing running (the CPU the processes spend idle);
3. half load: an open loop at half the closed loop's throughput, with the floor measured beside it.

Afterwards it reads every topic back (read_committed) and the broker's own log files (bench/kafka_logs.py), and
prints, per step of the workflow (each command), a waterfall of hops with p50/p90, built from the timestamps
the processes and the broker already write (bench/waterfall.py says which); records, bytes, markers and partitions
written per workflow and per transaction; CPU per workflow (broker, server, worker); the processor's own metrics.
Figures are printed, never asserted.

    .venv/bin/python bench/hops.py [--quick] [--json] [--kafka HOST:PORT] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository root must be importable as `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from bench import kafka_floor, kafka_logs, prometheus_text
from bench.engine_ostinato import OstinatoEngine
from bench.harness import ProcessMeter, Scenario, run_scenario
from bench.hops_report import markdown, render
from bench.ostinato_workflows import TASK_QUEUE
from bench.waterfall import (
    ClientTimes,
    Writes,
    Written,
    group_by_workflow,
    hops,
    percentile,
    series_p50,
    steps,
    waterfall,
    where_the_time_goes,
)
from ostinato.kafka.clients import reader
from ostinato.schemas import codec, wire
from ostinato.schemas.keys import split_key
from ostinato.schemas.topics import TaskKind, Topic, task_topic_name, topic_name

ROOT = Path(__file__).resolve().parents[1]


class HopsEngine(OstinatoEngine):
    """The benchmark's engine, with the broker's process counted even when the broker is not one it started."""

    broker_pid: int | None = None

    def processes(self) -> dict[str, list[int]]:
        found = super().processes()
        if not found.get("broker") and self.broker_pid is not None:
            found["broker"] = [self.broker_pid]
        return found


@dataclass(frozen=True)
class Sizes:
    lone: int
    lone_warmup: int
    closed: int
    concurrency: int
    closed_warmup: int
    half_seconds: float
    floor_reps: int
    idle_seconds: float
    half_rate: float = 0.0  # workflows/s of the half load; 0: half the closed loop's throughput


QUICK = Sizes(lone=10, lone_warmup=2, closed=40, concurrency=10, closed_warmup=5, half_seconds=5.0, floor_reps=20,
              idle_seconds=3.0)
# The full run's warm-up is long (about 30 s of hello at 50 in flight): a lone workflow on a broker younger than a
# minute or two measured 65 ms p50 where the same build measured 40-45 ms after bench/compare's S1 (its JVM compiles
# meanwhile). Quick runs (CI) keep it short.
FULL = Sizes(lone=200, lone_warmup=20, closed=600, concurrency=50, closed_warmup=2500, half_seconds=30.0,
             floor_reps=200, idle_seconds=10.0)


@dataclass
class Phase:
    """One measured run: what the clients saw, what the processes spent, what /metrics counted meanwhile."""

    name: str
    clients: list[ClientTimes] = field(default_factory=list)
    failures: int = 0
    cpu_s: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    floor: dict[str, list[float]] = field(default_factory=dict)
    rate: float | None = None

    @property
    def window(self) -> tuple[int, int]:
        if not self.clients:  # every workflow failed: an empty window, empty figures
            return 0, 0
        return int(min(c.called for c in self.clients)), int(max(c.result for c in self.clients)) + 1


# -- running --------------------------------------------------------------------------------------------------------


def wall_ms() -> float:
    return time.time() * 1000


async def one(engine: OstinatoEngine, workflow_id: str) -> ClientTimes:
    assert engine.client is not None
    called = wall_ms()
    handle = await engine.client.start_workflow("hello", "bench", id=workflow_id, task_queue=TASK_QUEUE)
    started = wall_ms()
    await handle.result()
    return ClientTimes(workflow_id, called, started, wall_ms())


async def scrape(engine: OstinatoEngine) -> dict[str, float]:
    assert engine.session is not None
    async with engine.session.get(engine.url + "/metrics") as resp:
        return prometheus_text.samples(await resp.text())


async def idle(pids: dict[str, list[int]], seconds: float) -> dict[str, float]:
    """CPU ms per second of each process with no workflow running: what polling and heartbeats cost."""
    meter = ProcessMeter(pids)
    await asyncio.sleep(seconds)
    return {role: round(f.cpu_s * 1000 / seconds, 2) for role, f in meter.finish().items()}


async def floor(bootstrap: str, *, reps: int | None = None, seconds: float | None = None) -> dict[str, list[float]]:
    """bench/kafka_floor.py in a child process (its own interpreter: no GIL shared with the load generator)."""
    proc = await asyncio.create_subprocess_exec(*kafka_floor.floor_argv(bootstrap, reps=reps, seconds=seconds),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                cwd=ROOT)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        print(f"  the floor failed ({proc.returncode}): {err.decode()[-1500:]}", file=sys.stderr)
        return {}
    return kafka_floor.parse_output(out.decode())


async def lone(engine: HopsEngine, sizes: Sizes, token: str, bootstrap: str, pids: dict[str, list[int]]) -> Phase:
    phase = Phase("lone")
    for i in range(sizes.lone_warmup):
        await one(engine, f"{token}-warm-{i}")
    before, meter = await scrape(engine), ProcessMeter(pids)
    for i in range(sizes.lone):
        try:
            phase.clients.append(await one(engine, f"{token}-lone-{i}"))
        except Exception as exc:  # noqa: BLE001 - a failed workflow is a figure
            phase.failures += 1
            print(f"  lone {i} failed: {exc!r}", file=sys.stderr)
    phase.cpu_s = {role: f.cpu_s for role, f in meter.finish().items()}
    phase.metrics = prometheus_text.delta(before, await scrape(engine))
    print(f"== the Kafka floor alone ({sizes.floor_reps} round trips)", file=sys.stderr, flush=True)
    phase.floor = await floor(bootstrap, reps=sizes.floor_reps)
    return phase


async def closed_loop(engine: HopsEngine, sizes: Sizes, token: str) -> dict[str, Any]:
    """Hello with many in flight, as S1: its throughput sets the half load, and it warms every process up (a
    broker's JVM spends its first minute compiling: idle CPU falls from ~0.4 to ~0.1 core meanwhile)."""
    closed = await run_scenario(engine, Scenario("S1", "hello", sizes.closed, sizes.concurrency,
                                                 warmup=sizes.closed_warmup), token + "c")
    print(f"  closed loop: {closed.workflows_per_s} wf/s, p50 {closed.latency_ms['p50']} ms", file=sys.stderr,
          flush=True)
    done = max(1, closed.count - closed.failures)
    return {"workflows_per_s": closed.workflows_per_s, "p50_ms": closed.latency_ms["p50"],
            "concurrency": sizes.concurrency, "count": sizes.closed,
            "cpu_ms_per_workflow": {r: round(f.cpu_s * 1000 / done, 2) for r, f in closed.processes.items()}}


async def half_load(engine: HopsEngine, sizes: Sizes, token: str, bootstrap: str, pids: dict[str, list[int]],
                    workflows_per_s: float) -> Phase:
    rate = sizes.half_rate or max(1.0, workflows_per_s / 2)
    print(f"== half load: {rate:.1f}/s for {sizes.half_seconds:.0f} s, the floor beside it", file=sys.stderr,
          flush=True)
    phase = Phase("half load", rate=round(rate, 1))
    count = max(10, int(rate * sizes.half_seconds))
    before, meter = await scrape(engine), ProcessMeter(pids)
    floor_run = asyncio.create_task(floor(bootstrap, seconds=count / rate))
    t0 = time.perf_counter()

    async def go(i: int) -> None:
        try:
            phase.clients.append(await one(engine, f"{token}-half-{i}"))
        except Exception as exc:  # noqa: BLE001
            phase.failures += 1
            if phase.failures <= 3:
                print(f"  half {i} failed: {exc!r}", file=sys.stderr)

    tasks = []
    for i in range(count):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(go(i)))
    await asyncio.gather(*tasks)
    phase.cpu_s = {role: f.cpu_s for role, f in meter.finish().items()}
    phase.metrics = prometheus_text.delta(before, await scrape(engine))
    phase.floor = await floor_run
    return phase


# -- reading back -----------------------------------------------------------------------------------------------------


def topic_roles(prefix: str) -> dict[str, str]:
    found = {topic_name(prefix, t): t.value for t in (Topic.COMMANDS, Topic.HISTORY, Topic.STATE, Topic.VISIBILITY,
                                                       Topic.REPLIES)}
    found |= {task_topic_name(prefix, TASK_QUEUE, k): f"tasks.{k.value}" for k in TaskKind}
    return found


def role_of(prefix: str) -> Any:
    names = topic_roles(prefix)
    return lambda topic: names.get(topic, topic)


def _state_time(record: dict[str, Any]) -> int | None:
    """The latest decision time a state record carries: a task's start or the close."""
    times = [a.get("started_time_ms") for a in record.get("activities") or []]
    task = record.get("workflow_task")
    times += [task.get("started_time_ms") if task else None, record.get("close_time_ms")]
    found = [t for t in times if t is not None]
    return max(found) if found else None


def written(role: str, topic: str, msg: Any) -> Written | None:
    """One record read back, attributed to its workflow (None: not a record of a workflow)."""
    key, value = msg.key() or b"", msg.value() or b""
    if not value:
        return None
    try:
        name, record = codec.decode(value)
    except codec.DecodeError:
        return None
    time_ms = None
    if role in ("commands", "replies"):
        workflow_id, kind = record["workflow_id"], wire.short_name(record["body"][0])
        time_ms = record.get("time_ms")
    else:
        parts = split_key(key.decode())
        if len(parts) < 2:
            return None
        workflow_id, kind = parts[1], wire.short_name(name)
        if role == "history":
            kind, time_ms = record["event_type"], record["event_time_ms"]
        elif role == "state" and kind == "MutableState":
            time_ms = _state_time(record)
    size = len(key) + len(value) + sum(len(k) + len(v or b"") for k, v in msg.headers() or [])
    return Written(topic, role, msg.partition(), msg.offset(), msg.timestamp()[1], size, workflow_id, kind, time_ms)


def read_back(bootstrap: str, prefix: str, wanted: set[str], timeout_s: float = 120) -> list[Written]:
    """Every record of the engine's topics (read_committed, from the start) that belongs to a wanted workflow."""
    names = topic_roles(prefix)
    consumer = reader(bootstrap, f"{prefix}-hops-reader")
    try:
        meta = consumer.list_topics(timeout=30).topics
        parts = [TopicPartition(t, p, OFFSET_BEGINNING) for t in names if t in meta for p in meta[t].partitions]
        consumer.assign(parts)
        pending, out = {(tp.topic, tp.partition) for tp in parts}, []
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard((msg.topic(), msg.partition()))
                    continue
                found = written(names[msg.topic()], msg.topic(), msg)
                if found is not None and found.workflow_id in wanted:
                    out.append(found)
        return out
    finally:
        consumer.close()


def broker_of(bootstrap: str) -> tuple[int | None, Path | None]:
    """The local broker process listening on the bootstrap port, and its log directory (None, None if remote)."""
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                props = [a for a in psutil.Process(conn.pid).cmdline() if a.endswith(".properties")]
                for line in Path(props[-1]).read_text().splitlines() if props else []:
                    if line.startswith("log.dirs="):
                        return conn.pid, Path(line.split("=", 1)[1].split(",")[0])
                return conn.pid, None
    except (psutil.Error, OSError, IndexError):
        pass
    return None, None


@dataclass
class BrokerLog:
    ledger: kafka_logs.Ledger
    batches: list[kafka_logs.Batch]
    offset_records: list[kafka_logs.LogRecord]


def read_broker_log(log_dir: Path, prefix: str) -> BrokerLog:
    names = list(topic_roles(prefix))
    files = kafka_logs.segment_files(log_dir, [*names, kafka_logs.OFFSETS_TOPIC, kafka_logs.TXN_STATE_TOPIC])
    data = [f for t in names for f in files.get(t, [])]
    state_text, offsets_text, data_text = kafka_logs.dump_all(
        [(files.get(kafka_logs.TXN_STATE_TOPIC, []), "transaction-log"),
         (files.get(kafka_logs.OFFSETS_TOPIC, []), "offsets"), (data, None)])
    _, state = kafka_logs.parse_dump(state_text)
    offset_batches, offset_records = kafka_logs.parse_dump(offsets_text)
    data_batches, _ = kafka_logs.parse_dump(data_text)
    batches = data_batches + offset_batches
    dumped = {(b.topic, b.partition) for b in batches}
    txns: list[kafka_logs.Transaction] = []
    for tid, pid in kafka_logs.producers(state, f"{prefix}-processor-").items():
        mine = kafka_logs.transactions(state, tid)
        kafka_logs.attach_markers(mine, batches, pid, dumped)
        kafka_logs.attach_offset_commits(mine, offset_records, pid)
        txns += mine
    return BrokerLog(kafka_logs.Ledger(txns), batches, offset_records)


# -- figures ------------------------------------------------------------------------------------------------------


def _stats(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": percentile(values, 50), "p90": percentile(values, 90),
            "p99": percentile(values, 99), "mean": round(sum(values) / len(values), 2) if values else math.nan}


def analyse(phase: Phase, records: list[Written], log: BrokerLog | None, prefix: str) -> dict[str, Any]:
    """The figures of one phase as plain data (the JSON and the tables both come from it)."""
    role = role_of(prefix)
    ids = {c.workflow_id for c in phase.clients}
    mine = [r for r in records if r.workflow_id in ids]
    by_workflow = group_by_workflow(mine)
    consumed_by = log.ledger.consumed_by if log else (lambda *_: None)
    written_by = log.ledger.written_by if log else (lambda *_: None)
    timelines = []
    for client in phase.clients:
        recs = by_workflow.get(client.workflow_id, [])
        chain = steps([r for r in recs if r.role == "commands"], [r for r in recs if r.role != "commands"],
                      consumed_by, written_by)
        timelines.append(hops(chain, client))
    rows = waterfall(timelines)
    n = max(1, len(phase.clients))
    writes = Writes(len(phase.clients))
    writes.add(mine)
    since, until = phase.window
    out: dict[str, Any] = {
        "workflows": len(phase.clients), "failures": phase.failures, "rate": phase.rate,
        "window_s": round((until - since) / 1000, 2),
        "waterfall": [{"step": r.step, "hop": r.hop, "in_series": r.in_series, **_stats(r.values)} for r in rows],
        "series_p50_sum": round(series_p50(rows), 1),
        "mean_by_hop": {hop: round(ms, 1) for hop, ms in where_the_time_goes(rows).items()},
        "floor": {stage: _stats(v) for stage, v in phase.floor.items()},
        "writes_per_workflow": {t: {"records": round(c, 2), "bytes": round(b, 1)}
                                for t, (c, b) in writes.per_workflow().items()},
        "cpu_ms_per_workflow": {r: round(s * 1000 / n, 2) for r, s in phase.cpu_s.items()},
        "cpu_s": phase.cpu_s,
        "processor_metrics": _processor_metrics(phase.metrics),
    }
    if log is not None:
        # __consumer_offsets partitions of other groups (the floor's, running beside the half load) are not ours
        ours = {r.batch.partition for r in log.offset_records
                if isinstance(g := r.key.get("data"), dict) and str(g.get("group", "")).startswith(prefix)}
        logged = kafka_logs.log_writes([b for b in log.batches if b.topic != kafka_logs.OFFSETS_TOPIC
                                        or b.partition in ours], since, until)
        out["log_per_workflow"] = {role(t): {"records": round(logged.records[t] / n, 2),
                                             "batches": round(logged.batches[t] / n, 2),
                                             "markers": round(logged.markers[t] / n, 2),
                                             "bytes": round(logged.bytes[t] / n, 1)} for t in sorted(logged.bytes)}
        out["transactions"] = _transactions(log.ledger.between(since, until), n, role)
        commits = kafka_logs.offset_commits_by_group(log.offset_records, since, until)
        out["offset_commits_per_workflow"] = {g.removeprefix(prefix + "-"): round(c / n, 2)
                                              for g, c in sorted(commits.items()) if g.startswith(prefix)}
    return out


def _transactions(txns: list[kafka_logs.Transaction], n: int, role: Any) -> dict[str, Any]:
    if not txns:
        return {"count": 0}
    sizes = [len(t.partitions) for t in txns]
    records = [sum(t.records.values()) for t in txns]
    by_topic: Counter[str] = Counter()
    for t in txns:
        for topic, _ in t.partitions:
            by_topic[role(topic)] += 1
    commands = sum(sum(1 for _ in t.consumed) for t in txns)
    return {"count": len(txns), "per_workflow": round(len(txns) / n, 2),
            "aborted": sum(1 for t in txns if not t.committed),
            "partitions_p50": percentile(sizes, 50), "partitions_max": max(sizes),
            "records_p50": percentile(records, 50), "records_max": max(records),
            "partitions_by_topic_mean": {k: round(v / len(txns), 2) for k, v in sorted(by_topic.items())},
            "shards_consumed_mean": round(commands / len(txns), 2)}


def _processor_metrics(delta: dict[str, float]) -> dict[str, float]:
    buckets, count, total = prometheus_text.histogram(delta, "ostinato_processor_commit_seconds")
    _, batches, batch_sum = prometheus_text.histogram(delta, "ostinato_processor_batch_size")
    return {"transactions": count, "commands_per_transaction": round(batch_sum / batches, 2) if batches else 0.0,
            "transaction_ms_mean": round(total / count * 1000, 2) if count else float("nan"),
            "transaction_ms_p50": round(prometheus_text.quantile(buckets, 0.5) * 1000, 2),
            "transaction_ms_p90": round(prometheus_text.quantile(buckets, 0.9) * 1000, 2)}


# -- main -----------------------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = QUICK if args.quick else FULL
    if args.lone:
        sizes = replace(sizes, lone=args.lone)
    if args.half_seconds:
        sizes = replace(sizes, half_seconds=args.half_seconds)
    if args.half_rate:
        sizes = replace(sizes, half_rate=args.half_rate)
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="ostinato-hops-"))
    engine = HopsEngine(home=home, kafka=args.kafka, processors=args.processors)
    token, load_at_start = uuid.uuid4().hex[:6], os.getloadavg()
    try:
        print("== starting broker, server, worker", file=sys.stderr, flush=True)
        await engine.start(Scenario("S0", "hello", sizes.lone, 1))
        bootstrap = args.kafka or (engine.broker.bootstrap if engine.broker else "")
        engine.broker_pid, log_dir = broker_of(bootstrap)
        pids = engine.processes()
        print(f"== closed loop ({sizes.closed} @ {sizes.concurrency})", file=sys.stderr, flush=True)
        closed = await closed_loop(engine, sizes, token)
        print(f"== lone: {sizes.lone} hello workflows one at a time", file=sys.stderr, flush=True)
        first = await lone(engine, sizes, token, bootstrap, pids)
        print(f"== idle for {sizes.idle_seconds:.0f} s", file=sys.stderr, flush=True)
        idle_cpu = await idle(pids, sizes.idle_seconds)
        second = await half_load(engine, sizes, token, bootstrap, pids, closed["workflows_per_s"])
        await asyncio.sleep(1.0)  # the last markers and offset commits land
        print("== reading the topics and the broker's log files back", file=sys.stderr, flush=True)
        wanted = {c.workflow_id for p in (first, second) for c in p.clients}
        records = await asyncio.to_thread(read_back, bootstrap, engine.prefix, wanted)
        log = await asyncio.to_thread(read_broker_log, log_dir, engine.prefix) if log_dir else None
        if log is None:
            print("  the broker's log directory is not on this machine: no transaction figures", file=sys.stderr)
        phases = {p.name: analyse(p, records, log, engine.prefix) for p in (first, second)}
    finally:
        await engine.stop()
        if not args.home:
            shutil.rmtree(home, ignore_errors=True)
    return {"meta": {"when": datetime.now(UTC).isoformat(timespec="seconds"), "python": platform.python_version(),
                     "cpus": os.cpu_count(), "load_average": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                     "load_average_at_start": " ".join(f"{x:.1f}" for x in load_at_start),
                     "platform": platform.platform(), "quick": args.quick, "prefix": engine.prefix,
                     "sizes": sizes.__dict__},
            "closed_loop": closed, "idle_cpu_ms_per_s": idle_cpu, "phases": phases}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for CI (minutes)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout (tables to stderr)")
    parser.add_argument("--lone", type=int, default=0, help="lone workflows measured (quick 10, full 200)")
    parser.add_argument("--half-rate", type=float, default=0.0,
                        help="half load at this many workflows/s instead of half the closed loop's (A/B comparisons)")
    parser.add_argument("--half-seconds", type=float, default=0.0, help="half-load run length (quick 5 s, full 30 s)")
    parser.add_argument("--kafka", default=None, help="use this running broker (local: its log files are read)")
    parser.add_argument("--processors", type=int, default=None,
                        help="ostinato server --processors (default: one per core, at most one per shard)")
    parser.add_argument("--home", default="", help="working directory for the servers (default: a temp dir)")
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown (docs/benchmarks.md)")
    parser.add_argument("--report", default="", metavar="JSON", help="print the tables of a saved report, run nothing")
    parser.add_argument("--out", default="", help="also write the JSON here (default bench/results/hops-<time>.json)")
    args = parser.parse_args(argv)
    if args.report:
        report = json.loads(Path(args.report).read_text())
    else:
        report = asyncio.run(run(args))
        out = Path(args.out or ROOT / "bench" / "results" / f"hops-{datetime.now(UTC):%Y%m%dT%H%M%S}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, default=str))
        print(f"JSON: {out}", file=sys.stderr)
    if args.markdown:
        print(markdown(report), file=sys.stderr if args.json else sys.stdout)
    else:
        render(report, sys.stderr if args.json else None)
    if args.json:
        print(json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
