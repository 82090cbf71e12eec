"""The earliest deadline of a shard after N deadlines were armed and cancelled: a RocksDB scan against the timer index.

Every activity and workflow task arms timeouts that its completion cancels, and RocksDB keeps each cancelled key
as a tombstone until compaction; a scan for the first live key steps over them. The processor asks for the
earliest deadline several times a batch (services/history/timer_index.py). Figures printed, never asserted.
Run: `.venv/bin/python bench/timer_index.py [--cancelled 0,1000,10000,50000]`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ostinato.services.history.changelog import timer_key
from ostinato.services.history.store import Family, open_rocks
from ostinato.services.history.timer_index import TimerIndex
from ostinato.streams.actions import Deadline

NOW_MS = 1_800_000_000_000


def deadline(i: int, fire_at_ms: int) -> Deadline:
    return Deadline(fire_at_ms=fire_at_ms, run_id=f"run-{i}", kind="ACTIVITY_START_TO_CLOSE", timer_id=f"{i}",
                    scheduled_event_id=5, attempt=1)


def per_call_us(lookup: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        lookup()
    return (time.perf_counter() - started) / calls * 1e6


def measure(cancelled: int, calls: int) -> tuple[float, float]:
    """µs per earliest-deadline lookup: by a store scan, and by the index."""
    with tempfile.TemporaryDirectory() as home:
        store = open_rocks(Path(home) / "shard")
        try:
            store.write({Family.TIMERS: {timer_key("default", "sleeper", deadline(-1, NOW_MS + 86_400_000)): b""}})
            index = TimerIndex(lambda start: (k for k, _ in store.scan(Family.TIMERS, start=start)))
            next(index.walk(), None)  # read from the store once, as when the shard is opened
            for first in range(0, cancelled, 100):  # armed in one commit, cancelled in the next, as a step does
                keys = [timer_key("default", f"wf-{i}", deadline(i, NOW_MS + 10_000 + i))
                        for i in range(first, min(first + 100, cancelled))]
                armed: dict[bytes, bytes | None] = dict.fromkeys(keys, b"")
                for writes in (armed, dict.fromkeys(keys)):
                    store.write({Family.TIMERS: writes})
                    index.apply(writes)
            return (per_call_us(lambda: next(iter(store.scan(Family.TIMERS)), None), calls),
                    per_call_us(lambda: next(index.walk(), None), calls))
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cancelled", default="0,1000,10000,50000", help="comma-separated counts")
    parser.add_argument("--calls", type=int, default=300, help="lookups timed per figure")
    args = parser.parse_args()
    print("| deadlines armed and cancelled | store scan µs | timer index µs |")
    print("| ---: | ---: | ---: |")
    for cancelled in (int(n) for n in args.cancelled.split(",")):
        scan_us, index_us = measure(cancelled, args.calls)
        print(f"| {cancelled:,} | {scan_us:,.1f} | {index_us:,.1f} |")


if __name__ == "__main__":
    main()
