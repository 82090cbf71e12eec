"""Reading the history topic from a point in time and sampling its runs (the replay gate's `--since`, and the SDK's
`sample_histories`): every shard is sought by timestamp, then read back only as far as the runs that began before
that point need.

A long topic is never read whole when a start time is given: `offsets_for_times` finds, per partition, the first
record at or after it. A run that has events in that window but began earlier (a long-lived open run, the kind new
code must continue) is completed by reading older slices of its own partition only, each slice twice as long as
the one before, until its first event is found.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ostinato.kafka.history_reader import high_watermarks, offsets_at, read_history_partitions
from ostinato.schemas.keys import shard_for
from ostinato.schemas.topics import Topic, topic_name
from ostinato.sdk.history_sample import (
    RawRun,
    Record,
    RunId,
    RunSummary,
    SamplePlan,
    add_records,
    decode_history,
    pick,
    summarize,
)

Progress = Callable[[str, int, int], None]  # (what is being read, offsets passed, offsets in all)

__all__ = ["HistorySample", "Progress", "read_runs", "sample_runs"]

MIN_STEP_MS = 3_600_000  # the first slice before the window: an hour, or the window's own length if longer


@dataclass
class HistorySample:
    """The runs a plan chose, most recent first, each with its decoded history; and the runs that could not be
    used, by reason (deleted by retention, first event not read...)."""

    runs: list[tuple[RunSummary, list[Record]]] = field(default_factory=list)
    unreadable: Counter[str] = field(default_factory=Counter)
    considered: int = 0  # runs read before sampling


def sample_runs(bootstrap: str, prefix: str, plan: SamplePlan, *, timeout: float = 30.0,
                progress: Progress | None = None) -> HistorySample:
    """The most recent runs in the history topic as `plan` says; only the chosen runs are decoded whole.

    Raises:
        KafkaUnavailable: no broker answers.
        HistoryReadError: the topic is missing, or a partition stays behind an open transaction.
    """
    raw_runs = read_runs(bootstrap, prefix, plan.since_ms, timeout=timeout, progress=progress)
    out = HistorySample(considered=len(raw_runs))
    summaries: list[RunSummary] = []
    for run, raw in raw_runs.items():
        summary = summarize(run, raw)
        if isinstance(summary, str):
            out.unreadable[summary] += 1
        else:
            summaries.append(summary)
    for summary in pick(summaries, plan):
        try:
            out.runs.append((summary, decode_history(raw_runs[summary.run])))
        except ValueError as exc:  # an event between the first and the last that does not decode
            out.unreadable[str(exc)] += 1
    return out


def read_runs(bootstrap: str, prefix: str, since_ms: int | None, *, timeout: float = 30.0,
              progress: Progress | None = None, now_ms: int | None = None) -> dict[RunId, RawRun]:
    """Every run with an event at or after `since_ms` (every run when None), each with its whole history as raw
    records: the runs that began earlier are filled in from older slices of their partitions."""
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
