"""The bare Kafka floor of one processor step on this box, with the engine's own client settings.

One round trip = what a step of a workflow costs with nothing but Kafka in it: a producer with the gateway's
settings produces a record; a read_committed consumer with the processor's settings polls it; a transactional
producer with the processor's settings begins a transaction, produces one record, sends the consumed offset and
commits; a read_committed reader with the replies reader's settings polls the output. Round trips run one at a
time. `bench/hops.py` runs this beside the engine, alone and under the engine's half load, on the same broker.

    .venv/bin/python -m bench.kafka_floor --kafka 127.0.0.1:9092 --reps 200 [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository root must be importable as `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from bench.waterfall import percentile
from ostinato.kafka.clients import admin_client, base_config, idempotent_producer, reader
from ostinato.schemas.topics import MAX_RECORD_BYTES
from ostinato.services.history.processor import TXN_TIMEOUT_MS

ACK = "produce → acknowledged (gateway producer)"
TO_PROCESSOR = "produce → processor's consumer has it (read_committed)"
BEGIN_PRODUCE = "begin + produce (hand to librdkafka)"
SEND_OFFSETS = "send_offsets_to_transaction"
COMMIT = "commit_transaction"
TO_READER = "commit returned → reader has it (read_committed)"
ROUND_TRIP = "round trip: produce → txn consume/produce/commit → read"
STAGES = (ACK, TO_PROCESSOR, BEGIN_PRODUCE, SEND_OFFSETS, COMMIT, TO_READER, ROUND_TRIP)
VALUE = b"x" * 200  # about a command's size
OPERATION_S = 30.0


def processor_consumer(bootstrap: str, group: str) -> Consumer:
    """As services/history/processor.py's consumer (the settings that shape latency)."""
    return Consumer({**base_config(bootstrap, f"{group}-consumer"), "group.id": group,
                     "isolation.level": "read_committed", "enable.auto.commit": False,
                     "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
                     "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10_000,
                     "heartbeat.interval.ms": 2_000, "fetch.wait.max.ms": 20, "fetch.max.bytes": MAX_RECORD_BYTES * 4})


def processor_producer(bootstrap: str, transactional_id: str) -> Producer:
    """As services/history/processor.py's `_new_producer`."""
    producer = Producer({**base_config(bootstrap, f"{transactional_id}-producer"),
                         "transactional.id": transactional_id, "transaction.timeout.ms": TXN_TIMEOUT_MS,
                         "enable.idempotence": True, "acks": "all", "linger.ms": 1, "retry.backoff.ms": 10,
                         "retry.backoff.max.ms": 100, "message.max.bytes": MAX_RECORD_BYTES + 64 * 1024,
                         "queue.buffering.max.messages": 1_000_000})
    producer.init_transactions(OPERATION_S)
    return producer


def _create_topics(bootstrap: str, names: list[str]) -> None:
    admin = admin_client(bootstrap)
    brokers = len(admin.list_topics(timeout=OPERATION_S).brokers)
    futures = admin.create_topics([NewTopic(n, 1, min(3, brokers)) for n in names], operation_timeout=OPERATION_S)
    for future in futures.values():
        try:
            future.result(OPERATION_S)
        except Exception as exc:  # an existing topic is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def _poll_for(consumer: Consumer, key: bytes, deadline: float) -> Message:
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(f"consuming: {err.str()}")
            continue
        if msg.key() == key:
            return msg
    raise TimeoutError(f"record {key!r} not read within the deadline")


def _acked(acked: dict[bytes, float], err: KafkaError | None, msg: Message) -> None:
    if err is None:
        acked[msg.key() or b""] = time.time()


def measure(bootstrap: str, *, reps: int | None = None, seconds: float | None = None, warmup: int = 5,
            pause_s: float = 0.01, prefix: str = "") -> dict[str, list[float]]:
    """Round trips one at a time: `reps` of them, or as many as fit in `seconds`; ms per stage."""
    prefix = prefix or f"floor{uuid.uuid4().hex[:6]}"
    topic_in, topic_out = f"{prefix}.floor-in", f"{prefix}.floor-out"
    _create_topics(bootstrap, [topic_in, topic_out])
    inp = idempotent_producer(bootstrap, f"{prefix}-gateway")
    consumer = processor_consumer(bootstrap, f"{prefix}-processor")
    txn = processor_producer(bootstrap, f"{prefix}-processor-txn")
    out = reader(bootstrap, f"{prefix}-reader", overrides={"fetch.wait.max.ms": 10})
    out.assign([TopicPartition(topic_out, 0, out.get_watermark_offsets(TopicPartition(topic_out, 0), 30)[1])])
    consumer.subscribe([topic_in])
    acked: dict[bytes, float] = {}
    stop = threading.Event()

    def deliveries() -> None:
        while not stop.is_set():
            inp.poll(0.05)

    thread = threading.Thread(target=deliveries, name="floor-deliveries", daemon=True)
    thread.start()
    spent: dict[str, list[float]] = {s: [] for s in STAGES}
    try:
        n, ends = 0, time.monotonic() + seconds if seconds is not None else None
        wanted = None if reps is None else reps + warmup
        while (wanted is None or n < wanted) and (ends is None or time.monotonic() < ends or n <= warmup):
            key = f"{n}".encode()
            t0 = time.time()
            inp.produce(topic_in, VALUE, key, partition=0, on_delivery=lambda err, m: _acked(acked, err, m))
            msg = _poll_for(consumer, key, time.monotonic() + 60)
            polled = time.time()
            txn.begin_transaction()
            txn.produce(topic_out, VALUE, key, partition=0)
            produced = time.time()
            txn.send_offsets_to_transaction([TopicPartition(topic_in, 0, int(msg.offset() or 0) + 1)],
                                            consumer.consumer_group_metadata(), OPERATION_S)
            sent = time.time()
            txn.commit_transaction(OPERATION_S)
            committed = time.time()
            _poll_for(out, key, time.monotonic() + 60)
            read = time.time()
            n += 1
            if n > warmup:
                for stage, ms in ((ACK, acked.get(key, t0) - t0), (TO_PROCESSOR, polled - t0),
                                  (BEGIN_PRODUCE, produced - polled), (SEND_OFFSETS, sent - produced),
                                  (COMMIT, committed - sent), (TO_READER, read - committed), (ROUND_TRIP, read - t0)):
                    spent[stage].append(round(ms * 1000, 3))
            acked.pop(key, None)
            if pause_s:
                time.sleep(pause_s)
    finally:
        stop.set()
        thread.join(2)
        for client in (consumer, out):
            client.close()
        txn.flush(5)
        inp.flush(5)
    return spent


def summary(spent: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {stage: {"n": len(v), "p50": percentile(v, 50), "p90": percentile(v, 90), "p99": percentile(v, 99)}
            for stage, v in spent.items()}


def floor_argv(bootstrap: str, *, reps: int | None = None, seconds: float | None = None) -> list[str]:
    """The command line that runs this module in a child process (its own interpreter: no GIL shared with the
    load generator)."""
    argv = [sys.executable, "-m", "bench.kafka_floor", "--kafka", bootstrap, "--json"]
    if reps is not None:
        argv += ["--reps", str(reps)]
    if seconds is not None:
        argv += ["--seconds", str(seconds)]
    return argv


def parse_output(stdout: str) -> dict[str, list[float]]:
    found: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return {str(k): [float(x) for x in v] for k, v in found.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", required=True, help="bootstrap servers")
    parser.add_argument("--reps", type=int, help="round trips (default 100 unless --seconds)")
    parser.add_argument("--seconds", type=float, help="run round trips for this long instead")
    parser.add_argument("--pause-ms", type=float, default=10.0, help="between round trips")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--json", action="store_true", help="print the per-stage values as one JSON object")
    args = parser.parse_args(argv)
    reps = args.reps if args.reps is not None or args.seconds is not None else 100
    spent = measure(args.kafka, reps=reps, seconds=args.seconds, pause_s=args.pause_ms / 1000, prefix=args.prefix)
    if args.json:
        print(json.dumps(spent))
        return 0
    print("| stage | n | p50 ms | p90 ms | p99 ms |\n| --- | ---: | ---: | ---: | ---: |")
    for stage, s in summary(spent).items():
        print(f"| {stage} | {s['n']:.0f} | {s['p50']:.1f} | {s['p90']:.1f} | {s['p99']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
