"""Several history processors in one server (`ostinato server --processors N`).

One processor commits one transaction at a time: under load a command waits for the transaction in flight to
commit before it is even decided (the hop waterfall in docs/benchmarks.md: the largest hop at half load). N
processors are N members of the history group, each with its own consumer, transactional producer and shards, so
their commits overlap: Kafka's round trips release the GIL, deciding does not (the waterfall says how far that
goes on a given machine). A shard belongs to one processor at a time, exactly as it belongs to one server:
the group protocol moves it, and a processor that dies takes the server down with it.

Processor 0 keeps the data directory's owner id, so a server started with one processor is the same member as
before; processor i > 0 is `<owner id>-<i>`. Each id is its transactional id, so a restart with the same N fences
its own crashed incarnation at once; a restart with a smaller N leaves the dropped ids' open transactions to the
transaction timeout (2 s).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from prometheus_client import CollectorRegistry

from ostinato.schemas.cluster import ClusterSettings
from ostinato.services.history.faults import FaultPoints
from ostinato.services.history.metrics import ProcessorMetrics
from ostinato.services.history.processor import Processor, ProcessorOptions, owner_id_of
from ostinato.services.history.store import RocksStore


class Processors:
    """The server's processors, seen by its readers as one store source (`frontend/reads.py:StoreSource`)."""

    def __init__(self, bootstrap: str, settings: ClusterSettings, options: ProcessorOptions, count: int = 1,
                 registry: CollectorRegistry | None = None, faults: FaultPoints | None = None) -> None:
        if count < 1:
            raise ValueError(f"a server runs at least one processor, not {count}")
        base = options.owner_id or owner_id_of(options.data_dir / settings.topic_prefix)
        metrics = ProcessorMetrics(registry if registry is not None else CollectorRegistry())
        self.members = [
            Processor(bootstrap, settings, replace(options, owner_id=base if i == 0 else f"{base}-{i}"),
                      faults=faults, metrics=metrics)
            for i in range(count)]
        self.options = options
        self.owner_ids = frozenset(p.owner_id for p in self.members)
        self._threads: list[threading.Thread] = []

    def start(self, on_failure: Callable[[Processor, BaseException], None]) -> None:
        """Each processor in its own thread; `on_failure` runs on the thread of one that stopped with an error."""
        for n, proc in enumerate(self.members):
            def run(proc: Processor = proc) -> None:
                try:
                    proc.run()
                except BaseException as exc:  # noqa: BLE001 (any end of a processor ends the server, reported there)
                    on_failure(proc, exc)

            thread = threading.Thread(target=run, name=f"ostinato-processor-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_s: float) -> None:
        """Stop every processor and wait (up to `timeout_s` each) until it has left the group, so its shards move
        at once rather than after the session timeout."""
        for proc in self.members:
            proc.stop()
        for thread in self._threads:
            thread.join(timeout_s)

    def store_of(self, shard: int) -> RocksStore | None:
        for proc in self.members:
            store = proc.store_of(shard)
            if store is not None:
                return store
        return None

    def mark(self) -> tuple[int, ...]:
        return tuple(n for proc in self.members for n in proc.mark())

    def landed(self, mark: tuple[int, ...]) -> bool:
        return all(proc.landed(mark[i:i + 1]) for i, proc in enumerate(self.members))

    def settled(self) -> bool:
        """A read that found nothing cannot tell which processor should have had it: all must be settled."""
        return all(proc.settled() for proc in self.members)
