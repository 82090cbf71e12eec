"""Sustained throughput of one history processor process on a local broker (DESIGN.md §4).

The commands topic is pre-loaded with every command before the processor starts, so what is measured is the
processor alone: fetch, decide + apply, produce the outputs, send offsets, commit the transaction, write the
overlay to RocksDB. The window opens at the first transaction (after subscribe, assignment and restore) and
closes when the last command's transaction is committed; `--mix signal` also leaves its warm-up starts out.

Not measured: producers, workers, the frontend, replication (one broker, replication factor 1), the latency of
a single command. The broker shares the machine's cores. Figures are printed, never asserted (inflated under
`--profile`). Run: `.venv/bin/python bench/processor.py [--quick] [--mix start|signal|mixed] [--profile] [--serial]`.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import operator
import os
import platform
import pstats
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from prometheus_client import CollectorRegistry

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import base_config
from ostinato.kafka.task_topics import TaskTopics
from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import workflow_key
from ostinato.schemas.topics import TaskKind, Topic, task_topic_name, topic_name
from ostinato.services.admin.cluster import init_cluster
from ostinato.services.history.processor import Flight, Processor, ProcessorOptions
from ostinato.services.history.shard import Sealed

QUEUE, NS = "bench", "default"
TRANSACTION, PRODUCE = "loop step", "produce (hand to librdkafka)"
SEND_OFFSETS, COMMIT, STORE = "send offsets (round trip)", "commit (round trip)", "store write (RocksDB)"
LAND = "land the batch in flight"
KEY, VALUE = operator.attrgetter("key"), operator.attrgetter("value")
PAYLOAD = {"metadata": {"encoding": b"json/plain"}, "data": b'{"order": "A-1", "amount": 1999, "currency": "EUR"}'}


def mark() -> tuple[float, float, float]:  # wall clock, process CPU (librdkafka's threads too), this thread's CPU
    return time.perf_counter(), time.process_time(), time.thread_time()


@dataclass
class Stats:
    total: int  # commands in the topic
    warmup: int  # commands processed before the window opens
    done: int = 0
    marks: list[tuple[float, float, float]] = field(default_factory=list)  # at the window's open and close
    batches: list[int] = field(default_factory=list)  # commands per transaction in the window
    spent: dict[str, list[float]] = field(default_factory=dict)  # phase -> durations in the window
    counts: Counter[str] = field(default_factory=Counter)  # records, bytes, rejections, timers in the window

    @property
    def measuring(self) -> bool:
        return len(self.marks) == 1

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        measuring, started = self.measuring, time.perf_counter()
        try:
            yield
        finally:
            if measuring:
                self.spent.setdefault(phase, []).append(time.perf_counter() - started)


class TimedProducer:
    """Delegates to the processor's transactional producer, timing the two blocking round trips of a batch."""

    def __init__(self, inner: Producer, stats: Stats) -> None:
        self._inner, self._stats = inner, stats
        self.produce, self.poll = inner.produce, inner.poll  # hot path: no wrapper in between

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def send_offsets_to_transaction(self, *args: Any) -> None:
        with self._stats.timed(SEND_OFFSETS):
            self._inner.send_offsets_to_transaction(*args)

    def commit_transaction(self, *args: Any) -> None:
        with self._stats.timed(COMMIT):
            self._inner.commit_transaction(*args)


class TimedProcessor(Processor):
    """The real processor; the overrides only time and count around the inherited steps."""

    stats: Stats
    finished: threading.Event

    def _new_producer(self) -> Producer:
        return cast(Producer, TimedProducer(super()._new_producer(), self.stats))

    def _transaction(self, commands: list[Message], due: dict[int, list[bytes]], now: int) -> None:
        s = self.stats
        if not s.marks and s.done >= s.warmup:
            s.marks.append(mark())
        measuring = s.measuring
        with s.timed(TRANSACTION):  # an aborted batch raises out of here: neither counted nor timed
            super()._transaction(commands, due, now)
        if measuring:
            s.counts["timers"] += sum(len(keys) for keys in due.values())

    def _land(self, now: int, touched: set[int] | None, floor: int | None = None) -> int:
        with self.stats.timed(LAND):
            return super()._land(now, touched, floor)

    def _produce_batch(self, sealed: dict[int, Sealed]) -> None:
        with self.stats.timed(PRODUCE):
            super()._produce_batch(sealed)
        if self.stats.measuring:  # counted in C (map, filter): a Python loop here cost the thread 1% of its window
            for batch in sealed.values():
                outputs = batch.outputs
                self.stats.counts["records"] += len(outputs)
                self.stats.counts["bytes"] += (sum(map(len, filter(None, map(KEY, outputs))))
                                               + sum(map(len, filter(None, map(VALUE, outputs)))))
            self.stats.counts["records"] += len(self._announce)

    def _after_commit(self, flight: Flight) -> None:
        s = self.stats
        if s.measuring:
            s.counts["rejections"] += sum(len(batch.rejections) for batch in flight.sealed.values())
            s.batches.append(flight.commands)
        with s.timed(STORE):
            super()._after_commit(flight)
        s.done += flight.commands
        if s.done >= s.total and s.measuring:
            s.marks.append(mark())
            self.finished.set()


Commands = list[tuple[str, str, dict[str, Any]]]  # (workflow id, command name, body) in topic order


def build_commands(mix: str, n: int, workflows: int, run: str) -> tuple[Commands, int]:
    """The commands and how many of the first ones are warm-up. No worker answers, so the longest task timeout
    keeps task-timeout timers out of runs shorter than two minutes."""
    start: dict[str, Any] = {"workflow_type": "Bench", "task_queue": QUEUE, "input": [PAYLOAD],
                             "task_timeout_ms": 120_000}
    signal: dict[str, Any] = {"signal_name": "poke", "input": [PAYLOAD]}
    wid = [f"{run}-{i}" for i in range(max(n, workflows))]
    if mix == "start":
        return [(wid[i], "StartWorkflowExecution", start) for i in range(n)], 0
    if mix == "signal":  # warm-up starts, then n signals spread round-robin over those workflows
        starts = [(wid[i], "StartWorkflowExecution", start) for i in range(workflows)]
        return starts + [(wid[i % workflows], "SignalWorkflowExecution", signal) for i in range(n)], workflows
    out: Commands = []  # mixed: half starts, half signals to workflows started earlier in the topic
    for i in range(n // 2):
        out += [(wid[i], "StartWorkflowExecution", start), (wid[i // 2], "SignalWorkflowExecution", signal)]
    return out, 0


def preload(bootstrap: str, prefix: str, shards: int, commands: Commands) -> None:
    producer = Producer({**base_config(bootstrap, f"{prefix}-bench-loader"), "enable.idempotence": True,
                         "acks": "all", "linger.ms": 20, "batch.size": 1_000_000,  # the local queue holds them all
                         "queue.buffering.max.messages": 2**31 - 1, "queue.buffering.max.kbytes": 2**31 - 1})
    failed: list[KafkaError] = []
    topic, now = topic_name(prefix, Topic.COMMANDS), int(time.time() * 1000)
    for i, (wf, name, body) in enumerate(commands):
        key = workflow_key(NS, wf)
        value = codec.encode(wire.COMMAND, {
            "namespace": NS, "workflow_id": wf, "run_id": "", "request_id": f"bench-{i}", "identity": "bench",
            "time_ms": now, "reply_partition": None, "body": (wire.command_type(name), body)})
        producer.produce(topic, value, key.encode(), partition=partition_for(key, shards),
                         on_delivery=lambda err, _m: failed.append(err) if err else None)
        producer.poll(0)
    if producer.flush(60) or failed:
        raise RuntimeError(f"pre-loading failed: {failed[:3]}")


def monitor(proc: TimedProcessor, total: int, timeout: float) -> None:
    """Progress every ~2 s; stops the processor once everything is committed (or on timeout)."""
    began, last, last_done = time.monotonic(), time.monotonic(), 0
    while not proc.finished.wait(2.0):
        now, done = time.monotonic(), proc.stats.done
        print(f"  {now - began:6.1f} s  {done:>9,} / {total:,} commands  ({(done - last_done) / (now - last):,.0f}/s)",
              flush=True)
        last, last_done = now, done
        if now - began > timeout:
            print(f"  timed out after {timeout:.0f} s", flush=True)
            break
    proc.stop()


def all_committed(bootstrap: str, prefix: str, shards: int) -> bool:
    topic = topic_name(prefix, Topic.COMMANDS)
    consumer = Consumer({**base_config(bootstrap, f"{prefix}-bench-check"), "group.id": f"{prefix}-history"})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(shards)], timeout=10)
        return all(tp.offset == consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps)
    finally:
        consumer.close()


def pct(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def report(s: Stats, args: argparse.Namespace, startup: float, committed: bool) -> float:
    """Print the tables; return the sustained commands/s."""
    (t0, cpu0, thread0), (t1, cpu1, thread1) = s.marks
    wall, b, n, cpu, thread_cpu = t1 - t0, s.batches, sum(s.batches), cpu1 - cpu0, thread1 - thread0
    spent = {phase: sum(durations) for phase, durations in s.spent.items()}

    def ms(phase: str) -> str:
        return " / ".join(f"{pct(s.spent.get(phase, []), p) * 1000:.1f}" for p in (50, 95, 99))

    print(f"\nprocessor, mix {args.mix}, codec {args.codec}, {args.shards} shards, max batch {args.max_batch} "
          f"({proc_options_cap(args)} while a commit is in flight), "
          f"{'commits in series' if args.serial else 'pipelined commits'}, Python "
          f"{platform.python_version()}{' (under cProfile)' if args.profile else ''}\n")
    rows = [
        ("commands/s (sustained)", f"{n / wall:,.0f}"),
        ("commands measured / window", f"{n:,} in {wall:.2f} s (startup + restore before it: {startup:.2f} s)"),
        ("transactions", f"{len(s.batches):,} ({len(s.batches) / wall:,.0f}/s)"),
        ("commands per batch p50 / p95 / max", f"{pct(b, 50):.0f} / {pct(b, 95):.0f} / {max(b)}"),
        ("loop step ms p50 / p95 / p99 (decide, land the last batch, produce)", ms(TRANSACTION)),
        ("commit_transaction ms p50 / p95 / p99", ms(COMMIT)),
        ("send_offsets_to_transaction ms p50 / p95 / p99", ms(SEND_OFFSETS)),
        ("records produced per command", f"{s.counts['records'] / n:.2f} ({s.counts['bytes'] / n:,.0f} B)"),
        ("rejections / timers fired", f"{s.counts['rejections']:,} / {s.counts['timers']:,}"),
        ("process CPU (all threads)", f"{cpu:.2f} s = {cpu / wall:.0%} of one core"),
        ("processor thread CPU", f"{thread_cpu:.2f} s = {thread_cpu / wall:.0%} of the window"),
        ("commands per CPU-second of that thread", f"{n / thread_cpu:,.0f}"),
        ("group offsets at end of commands", "yes" if committed else "NO"),
    ]
    print("| figure | value |\n| --- | --- |\n" + "\n".join(f"| {name} | {value} |" for name, value in rows))
    # The processor thread's time. Offsets and commits run in the committer thread (their figures are above);
    # the processor thread waits for them only in "waiting for the commit in flight" (with --serial, all of it).
    phases = {PRODUCE: spent.get(PRODUCE, 0.0), STORE: spent.get(STORE, 0.0)}
    phases["waiting for the commit in flight"] = spent.get(LAND, 0.0) - phases[STORE]
    phases["decide + apply + encode (rest of the step)"] = spent.get(TRANSACTION, 0.0) - spent.get(LAND, 0.0) \
        - phases[PRODUCE]
    phases["fetch + loop (outside steps)"] = wall - spent.get(TRANSACTION, 0.0)
    print("\n| where the processor thread's window went | s | share | µs/command |\n| --- | ---: | ---: | ---: |")
    for name, sec in sorted(phases.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {sec:.2f} | {sec / wall:.0%} | {sec / n * 1e6:.1f} |")
    return n / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", help="bootstrap servers of a running broker (default: start one in a temp dir)")
    parser.add_argument("--commands", type=int, help="commands measured (default 50,000; 2,000 with --quick)")
    parser.add_argument("--mix", choices=("start", "signal", "mixed"), default="mixed")
    parser.add_argument("--workflows", type=int, help="workflows --mix signal signals (default 1,000; 100 quick)")
    for flag, default in (("--shards", 4), ("--max-batch", ProcessorOptions.max_batch), ("--timeout", 600)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--max-batch-in-flight", type=int, default=None, metavar="N", help="commands a batch may "
                        "take while the last one commits (default: the processor's, 4 x max batch)")
    parser.add_argument("--profile", action="store_true", help="cProfile the processor thread")
    parser.add_argument("--profile-out", default="", metavar="FILE", help="with --profile: also write the whole "
                        "profile here (pstats format), e.g. to compare two batch sizes function by function")
    parser.add_argument("--codec", choices=("compiled", "python", "fastavro"), default="compiled",
                        help="Avro through the compiled writers and readers (as shipped: on the C engine where it "
                        "was built), the same as generated Python, or fastavro alone")
    parser.add_argument("--serial", action="store_true", help="commit each batch before deciding the next (before "
                        "pipelining; OSTINATO_PIPELINE=0)")
    parser.add_argument("--quick", action="store_true", help="a small run")
    parser.add_argument("--json", action="store_true", help="end with one JSON line: {\"commands_per_s\": ...}")
    args = parser.parse_args()
    args.commands = args.commands or (2_000 if args.quick else 50_000)
    args.workflows = args.workflows or (100 if args.quick else 1_000)
    codec.settings_from_environment(os.environ)
    codec.registry().fast_paths = args.codec != "fastavro"
    if args.codec == "python":
        codec.registry().use_native(False)
    with tempfile.TemporaryDirectory(prefix="ostinato-bench-") as tmp:
        broker = None if args.kafka else KafkaCluster(Path(tmp) / "kafka", nodes=1, port=None)
        try:
            figure = run(args.kafka or cast(KafkaCluster, broker).start().bootstrap, args, Path(tmp))
        finally:
            if broker is not None:
                broker.stop()
    if args.json:
        print(json.dumps({"commands_per_s": round(figure, 1)}), flush=True)


def proc_options_cap(args: argparse.Namespace) -> int:
    return ProcessorOptions(data_dir=Path(), max_batch=args.max_batch,
                            max_batch_in_flight=args.max_batch_in_flight).in_flight_cap


def run(bootstrap: str, args: argparse.Namespace, tmp: Path) -> float:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    settings = init_cluster(bootstrap, prefix, args.shards).settings
    TaskTopics(bootstrap, prefix, settings.replication_factor).partitions(
        task_topic_name(prefix, QUEUE, TaskKind.WORKFLOW))  # created now, not inside the first measured batch
    commands, warmup = build_commands(args.mix, args.commands, args.workflows, prefix)
    started = time.perf_counter()
    preload(bootstrap, prefix, args.shards, commands)
    print(f"pre-loaded {len(commands):,} commands ({warmup:,} warm-up) into {prefix} in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    proc = TimedProcessor(bootstrap, settings, ProcessorOptions(data_dir=tmp / "processor", max_batch=args.max_batch,
                                                                   pipeline=not args.serial,
                                                                   max_batch_in_flight=args.max_batch_in_flight),
                          CollectorRegistry())
    proc.stats, proc.finished = Stats(total=len(commands), warmup=warmup), threading.Event()
    watcher = threading.Thread(target=monitor, args=(proc, len(commands), args.timeout), daemon=True)
    watcher.start()
    # CPU time of the profiled thread, not wall time: a busy machine (a shared CI box) stretches the wall clock
    # of every function alike, and would smear the profile with waits for the GIL and the cores.
    profile = cProfile.Profile(time.thread_time) if args.profile else None
    began = time.perf_counter()
    if profile is not None:
        profile.runcall(proc.run)  # run() in this thread: the profiler sees the whole processor loop
    else:
        proc.run()
    watcher.join()
    if len(proc.stats.marks) < 2:
        raise SystemExit(f"only {proc.stats.done:,} of {len(commands):,} commands were processed")
    figure = report(proc.stats, args, proc.stats.marks[0][0] - began, all_committed(bootstrap, prefix, args.shards))
    if profile is not None:
        for order, top in (("cumulative", 25), ("tottime", 15)):
            print(f"\nprofile of the processor thread, top {top} by {order} time:")
            pstats.Stats(profile).strip_dirs().sort_stats(order).print_stats(top)
        if args.profile_out:
            profile.dump_stats(args.profile_out)
            print(f"\nwhole profile: {args.profile_out} (python -m pstats {args.profile_out})")
    return figure


if __name__ == "__main__":
    main()
