"""One look of the processor for due and next deadlines, with N deadlines armed in a shard's overlays.

The processor asks each shard for its due deadlines and its next one several times a transaction, and every 5 ms
while a commit is in flight (`_decide_in_flight`, `_fire_fallen_due`, `_earliest_deadline`). Deadlines a batch
arms or cancels live in its overlay until it lands: half of them here in the sealed batch (its commit in
flight), half in the open one, as when a batch is decided over the last. Each start arms one (its workflow task's
timeout). Figures printed, never asserted. Run: `.venv/bin/python -m bench.timer_looks [--armed 0,100,500,2000]`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.shard import TASK_PARTITIONS, encoded_commands
from bench.timer_index import per_call_us
from ostinato.services.history.shard import Shard, Topology
from ostinato.services.history.store import open_rocks
from ostinato.streams.engine import DEFAULT_CONFIG

LATER_MS = 600_000  # past every task timeout the starts armed (`bench/processor.py`'s starts: two minutes)


def per_look_us(armed: int, looks: int) -> tuple[float, int]:
    """µs per look (`due_timers` and `next_timer_ms`) with `armed` starts decided, half of them sealed; and how
    many deadlines the overlays hold (each start's task timeout, all due within `LATER_MS`)."""
    fed, _ = encoded_commands("start", armed, 1, 1)
    topology = Topology(prefix="bench", shards=1, reply_partitions=4, task_partitions=lambda t: TASK_PARTITIONS)
    with tempfile.TemporaryDirectory(prefix="ostinato-bench-looks-") as tmp:
        store = open_rocks(Path(tmp) / "shard")
        try:
            shard = Shard(0, store, topology, DEFAULT_CONFIG)
            now = int(time.time() * 1000)
            for offset, (_, value) in enumerate(fed):
                if offset == armed // 2:
                    shard.seal()  # its commit in flight: the rest is decided above it
                shard.process(value, offset, now)
            us = per_call_us(lambda: (shard.due_timers(now, 500), shard.next_timer_ms(now)), looks)
            return us, len(shard.due_timers(now + LATER_MS, armed + 1))
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--armed", default="0,100,500,2000", help="comma-separated counts of deadlines armed")
    parser.add_argument("--looks", type=int, default=500, help="looks timed per figure")
    args = parser.parse_args()
    print("| starts decided | deadlines in the overlays | µs a look (due + next) |")
    print("| ---: | ---: | ---: |")
    for armed in (int(n) for n in args.armed.split(",")):
        us, deadlines = per_look_us(armed, args.looks)
        print(f"| {armed:,} | {deadlines:,} | {us:,.1f} |")


if __name__ == "__main__":
    main()
