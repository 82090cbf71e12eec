"""Prometheus metrics of the history processor (served at /metrics by `ostinato server`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ostinato.services.history.shard import Quarantined

_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class ThreadTimes(Collector):
    """CPU time and run-queue wait of the processor threads, read from Linux's schedstat at each scrape (no cost
    on the processor's path). A deadline fires late either because the processor was busy or because it was
    waiting for a core: on a loaded machine the second is most of S4's tail (docs/benchmarks.md, "Where S4's tail
    comes from"), and only the kernel can tell them apart. Nothing is exported where schedstat is not readable."""

    def __init__(self) -> None:
        self._tids: set[int] = set()
        self._lock = threading.Lock()

    def add(self, tid: int) -> None:
        """A processor thread started (`threading.get_native_id()` on it)."""
        with self._lock:
            self._tids.add(tid)

    def discard(self, tid: int) -> None:
        """It ended: Linux reuses thread ids."""
        with self._lock:
            self._tids.discard(tid)

    def read(self) -> tuple[float, float] | None:
        """Seconds on a CPU and seconds runnable but waiting for one, summed over the threads; None if unreadable."""
        with self._lock:
            tids = sorted(self._tids)
        found, ran, waited = False, 0, 0
        for tid in tids:
            try:
                fields = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
            except OSError:
                continue
            found = True
            ran, waited = ran + int(fields[0]), waited + int(fields[1])
        return (ran / 1e9, waited / 1e9) if found else None

    def collect(self) -> Iterator[Metric]:
        times = self.read()
        if times is None:
            return
        p = "ostinato_processor_thread_"
        yield CounterMetricFamily(p + "cpu_seconds", "CPU time of the processor threads (Linux schedstat).",
                                  value=times[0])
        yield CounterMetricFamily(p + "cpu_wait_seconds", "Time the processor threads were ready to run but waited "
                                  "for a CPU (Linux schedstat run delay): a machine short of cores, not a busy "
                                  "processor.", value=times[1])


class ProcessorMetrics:
    """One set per registry, so tests can run several processors in one interpreter."""

    def __init__(self, registry: CollectorRegistry) -> None:
        p = "ostinato_processor_"
        self.commands = Counter(p + "commands", "Commands read from the commands topic.", registry=registry)
        self.timers = Counter(p + "timers_fired", "Deadlines fired.", registry=registry)
        self.batch_size = Histogram(p + "batch_size", "Commands and timers per transaction.",
                                    buckets=_BATCH_BUCKETS, registry=registry)
        self.commit_seconds = Histogram(p + "commit_seconds", "Time of a whole transaction: deciding the batch, "
                                        "producing its records, sending offsets and committing.",
                                        buckets=LATENCY_BUCKETS, registry=registry)
        self.phase_seconds = Histogram(p + "phase_seconds", "Time of each phase of a transaction: decide (and "
                                       "encode) the batch, taking commands while the previous batch commits; wait "
                                       "for what is left of that commit; produce its records; send the offsets "
                                       "(AddOffsetsToTxn, TxnOffsetCommit); commit (acknowledgements and EndTxn); "
                                       "then write the stores and wake readers (after_commit).", ["phase"],
                                       buckets=LATENCY_BUCKETS, registry=registry)
        self.timer_lateness = Histogram(p + "timer_lateness_seconds", "How late deadlines fire.",
                                        buckets=LATENCY_BUCKETS, registry=registry)
        self.rejections = Counter(p + "rejections", "Commands that changed nothing, by reason.", ["reason"],
                                  registry=registry)
        self.aborts = Counter(p + "aborts", "Transactions aborted, by cause.", ["cause"], registry=registry)
        self.restore_seconds = Histogram(p + "restore_seconds", "Time to restore a shard's store on assignment.",
                                         buckets=(0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120), registry=registry)
        self.restore_records = Counter(p + "restore_records", "Changelog records read while restoring.",
                                       registry=registry)
        self.batches_cut = Counter(p + "batches_cut", "Batches that stopped deciding their fetched commands because "
                                   "a deadline fell due meanwhile: a moment (user timer, retry, backoff) fired at the "
                                   "end of that batch, a timeout in the next; the rest of the commands followed in the "
                                   "next.", registry=registry)
        self.timers_fired_late_pass = Counter(p + "timers_fired_late_pass", "Moments (user timers, retries, "
                                              "backoffs) that fell due while a batch decided and fired at its end, "
                                              "in the same transaction.", registry=registry)
        self.timers_fired_in_flight = Counter(p + "timers_fired_in_flight", "Moments that fell due while the "
                                              "previous batch's commit was in flight and fired into the next batch "
                                              "then, at their own time (pipelined transactions).", registry=registry)
        self.timeouts_held = Counter(p + "timeouts_held", "Due timeouts held back for a batch because the shard's "
                                     "commands were not all readable yet (an open transaction ahead of them).",
                                     registry=registry)
        self.gc_seconds = Histogram(p + "gc_seconds", "Full garbage collections the processor ran itself, when idle "
                                    "with no deadline near, or ten minutes after the last under unbroken load (the "
                                    "interpreter's own are off: services/history/collector.py).",
                                    buckets=LATENCY_BUCKETS, registry=registry)
        self.owned_shards = Gauge(p + "owned_shards", "Shards this process owns.", registry=registry)
        self.thread_times = ThreadTimes()
        registry.register(self.thread_times)
        self.quarantined = Counter("ostinato_commands_quarantined", "Commands whose processing failed (a bug in "
                                   "the core, or an output over the record limit) and that were kept in their "
                                   "run's state: describe shows them, redrive decides them again. By reason and "
                                   "command type.", ["reason", "command"], registry=registry)

    def count_quarantined(self, quarantined: Iterable[Quarantined]) -> None:
        """Count the commands a committed batch quarantined (`Shard.quarantined`)."""
        for q in quarantined:
            self.quarantined.labels(q.code, q.command_type).inc()
