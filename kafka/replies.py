"""The replies reader (DESIGN.md §10, "Synchronous API answers"): whoever sends a command that is answered (the
gateway for API calls, a worker for an activity start or a heartbeat) reads its partitions of `<prefix>.replies`
from their end and completes the futures waiting for each request id.

Several processes may read the same partition: each completes only the requests it waits for and skips the
rest. The end of each partition is resolved before `start` returns, so no answer to a request registered after
that can be missed (OFFSET_END would be resolved at the first fetch, after which a fast reply could already sit
behind it, never seen).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ostinato.kafka.clients import STEADY_FETCH_WAIT_MS, reader

log = logging.getLogger("ostinato.kafka")
POLL_S = 0.05


class ReplyReader:
    """One manually assigned read_committed consumer on a thread of its own; answers are the Reply bytes exactly
    as written, handed to the event loop of whoever `expect`ed them."""

    def __init__(self, bootstrap: str, topic: str, partitions: Iterable[int], client_id: str,
                 security: Mapping[str, str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.security = security  # over the process's own Kafka security settings (kafka/clients.py)
        self.topic = topic
        self.partitions = sorted(set(partitions))
        self.client_id = client_id
        self._waiting: dict[str, list[asyncio.Future[bytes]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None

    def start(self) -> None:
        """Open the consumer at the partitions' current ends and start reading (blocking: call it off the loop)."""
        consumer = reader(self.bootstrap, self.client_id, overrides={"fetch.wait.max.ms": STEADY_FETCH_WAIT_MS},
                          security=self.security)
        positions = []
        for p in self.partitions:
            tp = TopicPartition(self.topic, p)
            high = consumer.get_watermark_offsets(tp, timeout=30.0, cached=False)[1]
            positions.append(TopicPartition(self.topic, p, high))
        consumer.assign(positions)
        self._consumer = consumer
        self._thread = threading.Thread(target=self._run, name=f"{self.client_id}-replies", daemon=True)
        self._thread.start()

    def expect(self, request_id: str) -> asyncio.Future[bytes]:
        """A future for the answer to `request_id`; register it before producing the command, since the answer
        may come back before `produce` returns. Call from the event loop that awaits it."""
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiting.setdefault(request_id, []).append(future)
        return future

    def forget(self, request_id: str, future: asyncio.Future[bytes]) -> None:
        """Stop waiting (the request timed out, failed to produce, or was answered)."""
        with self._lock:
            futures = self._waiting.get(request_id)
            if futures is not None and future in futures:
                futures.remove(future)
                if not futures:
                    del self._waiting[request_id]

    def fail_all(self, exc: BaseException) -> None:
        """Complete every waiting future with `exc` (the process is stopping)."""
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for futures in waiting.values():
            for future in futures:
                settle(future, None, exc)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _run(self) -> None:
        assert self._consumer is not None
        while not self._stop.is_set():
            try:
                msg = self._consumer.poll(POLL_S)
            except KafkaException:  # keep reading: a lost reader would time out every request
                log.exception("reading %s", self.topic)
                time.sleep(POLL_S)
                continue
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("reading %s: %s", self.topic, err.str())
                continue
            key = msg.key()
            if key is None:
                continue
            with self._lock:
                futures = self._waiting.pop(key.decode(errors="replace"), None)
            for future in futures or ():
                settle(future, msg.value() or b"", None)


def settle(future: asyncio.Future[bytes], value: bytes | None, exc: BaseException | None) -> None:
    """Complete `future` from any thread, on its own loop; a future already done (timed out, caller gone) or a
    closed loop is left alone."""

    def complete() -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value or b"")

    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        future.get_loop().call_soon_threadsafe(complete)
