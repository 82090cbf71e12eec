"""`ThreadTimes`: the processor threads' CPU time and run-queue wait, read from Linux's schedstat at each scrape."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from ostinato.services.history.metrics import ProcessorMetrics, ThreadTimes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat is Linux's")


def _spin(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_a_threads_cpu_is_counted_while_it_is_registered_and_not_after() -> None:
    times = ThreadTimes()
    assert times.read() is None  # no thread: nothing exported rather than zeros
    tids: list[int] = []
    registered, finish = threading.Event(), threading.Event()

    def work() -> None:
        tids.append(threading.get_native_id())
        times.add(tids[0])
        _spin(0.05)
        registered.set()
        finish.wait(10)

    thread = threading.Thread(target=work)
    thread.start()
    assert registered.wait(10)
    read = times.read()
    assert read is not None
    ran, waited = read
    assert ran >= 0.05 and waited >= 0
    times.discard(tids[0])
    assert times.read() is None
    finish.set()
    thread.join()


def test_an_ended_thread_is_skipped_and_the_others_summed() -> None:
    times = ThreadTimes()
    tids: list[int] = []

    def register() -> None:
        tids.append(threading.get_native_id())
        times.add(tids[0])

    ended = threading.Thread(target=register)
    ended.start()
    ended.join()
    # `join` returns once the thread's Python state says so; the kernel removes its task a moment later (CI read
    # the ended thread's schedstat once, in between).
    task = Path(f"/proc/self/task/{tids[0]}")
    deadline = time.monotonic() + 10
    while task.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not task.exists()
    assert times.read() is None  # its /proc entry is gone
    times.add(threading.get_native_id())
    _spin(0.02)
    read = times.read()
    assert read is not None and read[0] >= 0.02


def test_the_processors_registry_exports_both_counters() -> None:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry)
    assert "ostinato_processor_thread_cpu_seconds_total" not in generate_latest(registry).decode()
    metrics.thread_times.add(threading.get_native_id())
    text = generate_latest(registry).decode()
    assert "ostinato_processor_thread_cpu_seconds_total " in text
    assert "ostinato_processor_thread_cpu_wait_seconds_total " in text
