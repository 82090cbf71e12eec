"""Recovering from a Kafka error while a batch is in flight (pipelined transactions, issue 15), without a broker:
stand-in producer and consumer around the real processor and a real shard over a MemoryStore.

The next batch is decided while the last one commits. An error while deciding it (a task topic that cannot be
created, a consumer error) must not drop the batch in flight: once its commit returns, it is written to the store
before the open batch's decisions are dropped, and nothing is aborted, since none of their records were produced
(the empty transaction the committer began after the commit is kept for the next batch). A
flight whose commit failed is aborted and nothing of it reaches the store.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from ostinato.services.admin.cluster import ClusterSettings
from ostinato.services.history.processor import Flight, Processor, ProcessorOptions
from ostinato.services.history.shard import Shard
from ostinato.services.history.store import Family, MemoryStore
from ostinato.streams.config import Config
from tests.unit.shard_support import family, start_command, topology, workflow_on

S, HOME = 3, 1
NOW = 1_704_067_200_000


class FakeProducer:
    def __init__(self) -> None:
        self.aborted = 0

    def abort_transaction(self, timeout: float) -> None:
        self.aborted += 1


class FakeConsumer:
    def __init__(self) -> None:
        self.seeks: list[tuple[int, int]] = []

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))


@pytest.fixture
def proc(tmp_path: Path) -> Processor:
    proc = Processor("127.0.0.1:1", ClusterSettings("p", S, 1, 1, 0, "test"),
                     ProcessorOptions(data_dir=tmp_path, owner_id="test"))
    proc.producer = cast(Producer, FakeProducer())
    proc.consumer = cast(Consumer, FakeConsumer())
    proc.shards[HOME] = Shard(HOME, MemoryStore(), topology(S), Config())
    return proc


def in_flight(proc: Processor, outcome: BaseException | None) -> None:
    """A started workflow's batch sealed and its commit returned (`outcome` None) or failed; then another start
    decided into the open batch above it."""
    shard = proc.shards[HOME]
    shard.process(start_command(workflow_on(HOME, S, "flying")), 0, NOW)
    done: Future[tuple[float, float, bool]] = Future()
    if outcome is None:
        done.set_result((0.0, 0.0, True))  # committed, and the committer began the next transaction
    else:
        done.set_exception(outcome)
    proc._txns_begun += 1
    proc._flight = Flight(proc._txns_begun, {HOME: shard.seal()}, 1, 0, 0.0, 0.0, 0.0, 0.0, done)
    proc._in_transaction = True
    shard.process(start_command(workflow_on(HOME, S, "open")), 1, NOW)


def error(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


def test_an_error_while_deciding_lands_the_committed_flight_and_aborts_nothing(proc: Processor) -> None:
    in_flight(proc, None)
    mark = proc.mark()  # a read arriving now waits for the flight: its client may have been told of "flying"
    assert not proc.landed(mark)
    proc._recover(error(KafkaError._TIMED_OUT))
    assert proc.landed(mark)
    store = proc.shards[HOME].store
    assert any(b"flying" in k for k in family(store, Family.STATE))  # the committed batch reached the store
    assert not any(b"open" in k for k in family(store, Family.STATE))  # the open one's decisions are gone
    assert proc.shards[HOME].outputs == [] and proc._flight is None
    producer, consumer = cast(Any, proc.producer), cast(Any, proc.consumer)
    assert producer.aborted == 0 and consumer.seeks == [(HOME, 7)]
    assert proc._begun_ahead and not proc._in_transaction  # the empty transaction begun ahead is kept for the next


def test_a_failed_flight_is_aborted_and_nothing_of_it_is_written(proc: Processor) -> None:
    in_flight(proc, error(KafkaError._TIMED_OUT))
    mark = proc.mark()
    proc._recover(error(KafkaError._TIMED_OUT))
    assert proc.landed(mark)  # aborted: reads no longer wait for it
    assert family(proc.shards[HOME].store, Family.STATE) == {}
    producer, consumer = cast(Any, proc.producer), cast(Any, proc.consumer)
    assert producer.aborted == 1 and consumer.seeks == [(HOME, 7)] and proc._flight is None
