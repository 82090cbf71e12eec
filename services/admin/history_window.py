"""Reading the history topic from a point in time (the replay gate's `--since`): every shard is sought by timestamp,
then read back only as far as the runs that began before that point need.

A long topic is never read whole when a start time is given: `offsets_for_times` finds, per partition, the first
record at or after it. A run that has events in that window but began earlier (a long-lived open run, the kind new
code must continue) is completed by reading older slices of its own partition only, each slice twice as long as
the one before, until its first event is found.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaException, TopicPartition

from ostinato.kafka.clients import reader
from ostinato.schemas.keys import shard_for
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.checker import CheckerError, high_watermarks, read_history_partitions
from ostinato.services.admin.replay_sample import RawRun, RunId, add_records

Progress = Callable[[str, int, int], None]  # (what is being read, offsets passed, offsets in all)

__all__ = ["Progress", "offsets_at", "read_runs"]

MIN_STEP_MS = 3_600_000  # the first slice before the window: an hour, or the window's own length if longer


def offsets_at(bootstrap: str, prefix: str, ends: dict[int, int], at_ms: int, timeout: float) -> dict[int, int]:
    """Per partition, the offset of the first history record written at or after `at_ms` (its end if none is)."""
    if at_ms <= 0:
        return dict.fromkeys(ends, 0)
    topic = topic_name(prefix, Topic.HISTORY)
    consumer = reader(bootstrap, f"{prefix}-checker")
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, p, at_ms) for p in ends], timeout)
    except KafkaException as exc:
        raise CheckerError(f"cannot look up the offsets of {topic} at {at_ms}: {exc}") from None
    finally:
        consumer.close()
    out: dict[int, int] = {}
    for tp in found:
        if tp.error is not None:
            raise CheckerError(f"cannot look up the offset of {topic} partition {tp.partition}: {tp.error}")
        out[tp.partition] = tp.offset if tp.offset >= 0 else ends[tp.partition]  # -1: nothing that recent
    return out


def read_runs(bootstrap: str, prefix: str, since_ms: int | None, *, timeout: float = 30.0,
              progress: Progress | None = None, now_ms: int | None = None) -> dict[RunId, RawRun]:
    """Every run with an event at or after `since_ms` (every run when None), each with its whole history as raw
    records: the runs that began earlier are filled in from older slices of their partitions.

    Raises:
        KafkaUnavailable: no broker answers.
        CheckerError: the topic is missing, or a partition stays behind an open transaction.
    """
    topic = topic_name(prefix, Topic.HISTORY)
    ends = high_watermarks(bootstrap, topic, timeout)
    starts = dict.fromkeys(ends, 0) if since_ms is None else offsets_at(bootstrap, prefix, ends, since_ms, timeout)
    runs: dict[RunId, RawRun] = {}
    total = sum(ends[p] - starts[p] for p in ends)
    tell = None if progress is None else (lambda done: progress("history", done, total))
    add_records(runs, ((key, value) for _, key, value in read_history_partitions(
        bootstrap, prefix, timeout, starts=starts, progress=tell)))
    if since_ms is not None:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        _reach_back(bootstrap, prefix, runs, ends, starts, since_ms, max(now - since_ms, MIN_STEP_MS), timeout,
                    progress)
    return runs


def _reach_back(bootstrap: str, prefix: str, runs: dict[RunId, RawRun], ends: dict[int, int],
                starts: dict[int, int], since_ms: int, step_ms: int, timeout: float, progress: Progress | None) -> None:
    """Read older slices of the partitions of runs whose first event lies before the window, until each is whole
    or the partition's beginning is reached (a run whose start was deleted stays incomplete and is skipped)."""
    missing = {run for run, raw in runs.items() if 1 not in raw and None not in raw.values()}
    upper = {shard_for(run[0], run[1], len(ends)): 0 for run in missing}
    upper = {p: starts[p] for p in upper if starts[p] > 0}
    at_ms = since_ms
    while missing and upper:
        at_ms, step_ms = at_ms - step_ms, step_ms * 2
        lower = offsets_at(bootstrap, prefix, upper, at_ms, timeout)
        lower = {p: min(lower[p], upper[p]) for p in upper}
        total = sum(upper[p] - lower[p] for p in upper)
        tell = None if progress is None else (lambda done, total=total: progress("older runs", done, total))
        add_records(runs, ((key, value) for _, key, value in read_history_partitions(
            bootstrap, prefix, timeout, starts=lower, stops=upper, progress=tell)), only=dict.fromkeys(missing),
            older=True)
        missing = {run for run in missing if 1 not in runs[run]}
        wanted = {shard_for(run[0], run[1], len(ends)) for run in missing}
        upper = {p: lower[p] for p in upper if p in wanted and lower[p] > 0}
