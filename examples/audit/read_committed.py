"""A faust app whose Kafka consumer reads committed records only.

faust-streaming's aiokafka driver asks for `read_committed` only in its exactly-once mode, which also turns on
one transactional producer per partition. An auditor writes nothing, so it keeps at-least-once processing and
flips just the isolation level: records of aborted transactions (a processor that crashed mid-batch) are then
never seen, and end offsets are last stable offsets, so "caught up" means caught up with committed history.
"""

from __future__ import annotations

from typing import Any

import aiokafka
import faust
from faust.transport.drivers import aiokafka as driver
from faust.types import TransportT


class _ConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        # The driver derives the isolation level from `in_transaction` when it builds the client, and reads it
        # nowhere else in this method; restoring it right away keeps offset commits non-transactional.
        saved = self.consumer.in_transaction
        self.consumer.in_transaction = True
        try:
            return super()._create_worker_consumer(transport)
        finally:
            self.consumer.in_transaction = saved


class _Consumer(driver.Consumer):
    def _new_consumer_thread(self) -> driver.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(driver.Transport):
    Consumer = _Consumer


class ReadCommittedApp(faust.App):
    """`faust.App` reading with `isolation.level=read_committed` (only for `kafka://` brokers)."""

    def _new_transport(self) -> TransportT:
        return _Transport(self.conf.broker_consumer, self)
