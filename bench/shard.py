"""The processor thread's own work per command, without Kafka: what `bench/processor.py` measures minus the broker.

Each round opens fresh RocksDB shard stores in a temp dir and feeds them `bench/processor.py`'s command mix (the
same bytes the processor fetches), in batches as the processor makes them: decode, load, decide + apply, write the
step's records (Avro), seal, and land the batch in the store. What a batch's transaction costs (produce, offsets,
commit) is left out, so the figure moves only with the code, and the spread between rounds is small enough to
compare two builds; `bench/processor.py` stays the measure of the processor with its broker.

Figures are printed, never asserted. Run: `.venv/bin/python -m bench.shard [--commands N] [--rounds R]
[--mix start|signal|mixed] [--profile]`.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import platform
import pstats
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench.processor import NS, build_commands
from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import workflow_key
from ostinato.services.history import collector
from ostinato.services.history.shard import Shard, Topology
from ostinato.services.history.store import open_rocks
from ostinato.streams.engine import DEFAULT_CONFIG

TASK_PARTITIONS = 8
Fed = list[tuple[int, bytes]]  # (shard, command record bytes) in topic order


def encoded_commands(mix: str, n: int, workflows: int, shards: int) -> tuple[Fed, int]:
    """The commands as the processor fetches them, and how many of the first ones are warm-up."""
    commands, warmup = build_commands(mix, n, workflows, uuid.uuid4().hex[:8])
    now, fed = int(time.time() * 1000), []
    for i, (wf, name, body) in enumerate(commands):
        key = workflow_key(NS, wf)
        fed.append((partition_for(key, shards), codec.encode(wire.COMMAND, {
            "namespace": NS, "workflow_id": wf, "run_id": "", "request_id": f"bench-{i}", "identity": "bench",
            "time_ms": now, "reply_partition": None, "body": (wire.command_type(name), body)})))
    return fed, warmup


def one_round(fed: Fed, warmup: int, shards: int, batch: int, profile: cProfile.Profile | None) -> tuple[float, int]:
    """Thread CPU seconds for the commands after the warm-up, and how many records the batches wrote."""
    topology = Topology(prefix="bench", shards=shards, reply_partitions=4, task_partitions=lambda t: TASK_PARTITIONS)
    with tempfile.TemporaryDirectory(prefix="ostinato-bench-shard-") as tmp:
        stores = [open_rocks(Path(tmp) / f"shard-{i}") for i in range(shards)]
        try:
            owned = [Shard(i, stores[i], topology, DEFAULT_CONFIG) for i in range(shards)]
            offsets = [0] * shards
            records, began = 0, 0.0
            gc.collect()
            for first in range(0, len(fed), batch):
                if first >= warmup and not began:
                    began = time.thread_time()
                    if profile is not None:
                        profile.enable()
                now = int(time.time() * 1000)
                touched: set[int] = set()
                for index, value in fed[first:first + batch]:
                    owned[index].process(value, offsets[index], now)
                    offsets[index] += 1
                    touched.add(index)
                for index in sorted(touched):
                    sealed = owned[index].seal()
                    records += len(sealed.outputs)
                    owned[index].land(sealed, {})
            spent = time.thread_time() - began
            if profile is not None:
                profile.disable()
            return spent, records
        finally:
            for store in stores:
                store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=20_000, help="commands measured a round (default 20,000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each on fresh stores (default 5)")
    parser.add_argument("--mix", choices=("start", "signal", "mixed"), default="mixed")
    parser.add_argument("--workflows", type=int, default=1_000, help="workflows --mix signal signals")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--batch", type=int, default=500, help="commands a batch (the processor's max batch)")
    parser.add_argument("--profile", action="store_true", help="cProfile the measured commands of every round")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    codec.settings_from_environment(os.environ)  # OSTINATO_NATIVE_CODEC=0: the generated Python codec

    collector.take_over()  # as a processor runs: only the youngest generation is collected automatically
    fed, warmup = encoded_commands(args.mix, args.commands, args.workflows, args.shards)
    measured = len(fed) - warmup
    profile = cProfile.Profile() if args.profile else None
    one_round(fed, warmup, args.shards, args.batch, None)  # warm: generated codecs, imports, allocator
    per_command: list[float] = []
    records = 0
    for r in range(args.rounds):
        spent, records = one_round(fed, warmup, args.shards, args.batch, profile)
        per_command.append(spent / measured * 1e6)
        print(f"  round {r + 1}/{args.rounds}: {per_command[-1]:.1f} µs a command", flush=True)
    median = statistics.median(per_command)
    engine = "the C engine" if codec.registry().native else "generated Python"
    print(f"\nshard path without Kafka, mix {args.mix}, {args.shards} shards, batches of {args.batch}, "
          f"{measured:,} commands a round, Avro on {engine}, Python {platform.python_version()}"
          f"{' (under cProfile)' if profile else ''}\n")
    print("| figure | value |\n| --- | --- |")
    print(f"| µs of the thread a command, median of {args.rounds} (min / max) | {median:.1f} "
          f"({min(per_command):.1f} / {max(per_command):.1f}) |")
    print(f"| commands per CPU-second | {1e6 / median:,.0f} |")
    print(f"| records written per command | {records / measured:.2f} |")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    if args.json:
        print(json.dumps({"us_per_command": round(median, 2), "commands_per_cpu_s": round(1e6 / median)}))


if __name__ == "__main__":
    main()
