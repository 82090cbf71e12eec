"""The replay gate's sampling (issue 23), pure: which runs are the most recent per type, how records become runs, and
which runs cannot be replayed (their start was not read, deleted, a gap)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ostinato.connectors.archive import ArchivedRun
from ostinato.schemas import codec, wire
from ostinato.schemas.keys import history_key
from ostinato.sdk.history_sample import (
    RawRun,
    RunId,
    RunSummary,
    SamplePlan,
    add_records,
    decode_history,
    parse_since,
    pick,
    summarize,
)
from tests.unit.test_archive_container import run  # noqa: F401 - the fixture: a real run's history


def _runs(kind: str, count: int, closed_every: int = 2, base_ms: int = 1_000) -> list[RunSummary]:
    return [RunSummary(("default", f"{kind}-{i}", f"r{i}"), kind, base_ms + i, base_ms + 10 * i, i % closed_every == 0)
            for i in range(count)]


def test_per_type_takes_the_most_recent_of_each_type_open_and_closed() -> None:
    runs = _runs("Busy", 10) + _runs("Rare", 2, base_ms=0)
    chosen = pick(runs, SamplePlan(limit=3, per_type=True))
    assert [r.run[1] for r in chosen if r.workflow_type == "Busy"] == ["Busy-9", "Busy-8", "Busy-7"]
    assert {r.run[1] for r in chosen if r.workflow_type == "Rare"} == {"Rare-0", "Rare-1"}  # not crowded out
    assert {r.closed for r in chosen} == {True, False}


def test_a_limit_without_per_type_is_over_all_runs() -> None:
    runs = _runs("Busy", 10) + _runs("Rare", 2, base_ms=0)
    assert [r.run[1] for r in pick(runs, SamplePlan(limit=3))] == ["Busy-9", "Busy-8", "Busy-7"]
    assert len(pick(runs, SamplePlan())) == 12


def test_since_and_workflow_types_filter_before_the_limit() -> None:
    runs = _runs("A", 10) + _runs("B", 10)
    since = pick(runs, SamplePlan(since_ms=1_000 + 10 * 5))  # latest event at or after: runs 5..9
    assert sorted({r.run[1] for r in since}) == [f"{k}-{i}" for k in "AB" for i in range(5, 10)]
    only_b = pick(runs, SamplePlan(limit=2, per_type=True, workflow_types=frozenset({"B"})))
    assert [r.run[1] for r in only_b] == ["B-9", "B-8"]


def test_ties_break_by_run_id_so_the_sample_is_stable() -> None:
    tied = [RunSummary(("default", w, w), "T", 0, 5, True) for w in ("c", "a", "b")]
    assert [r.run[1] for r in pick(tied, SamplePlan(limit=2))] == ["a", "b"]


def _records(run: ArchivedRun) -> list[tuple[str, bytes | None]]:  # noqa: F811
    return [(history_key(run.namespace, run.workflow_id, run.run_id, e["event_id"]),
             codec.encode(wire.HISTORY_EVENT, e)) for e in run.events]


def test_records_become_a_run_summary_and_its_history(run: ArchivedRun) -> None:  # noqa: F811
    runs: dict[RunId, RawRun] = {}
    assert add_records(runs, [*_records(run), ("not/a/history/key", b"")]) == len(run.events)
    key = (run.namespace, run.workflow_id, run.run_id)
    summary = summarize(key, runs[key])
    assert isinstance(summary, RunSummary)
    assert summary.workflow_type == "Mixed" and summary.closed
    assert summary.last_ms == run.events[-1]["event_time_ms"] >= summary.started_ms
    assert decode_history(runs[key]) == run.events


def test_a_run_whose_start_was_not_read_is_filled_from_older_records_only(run: ArchivedRun) -> None:  # noqa: F811
    records = _records(run)
    key = (run.namespace, run.workflow_id, run.run_id)
    runs: dict[RunId, RawRun] = {}
    add_records(runs, records[5:])  # the window began mid-run
    assert summarize(key, runs[key]) == "its first event was not read"
    other = [(history_key("default", "other", "r", 1), records[0][1])]
    add_records(runs, [*other, *records[:6]], only={key: None}, older=True)
    assert ("default", "other", "r") not in runs
    summary = summarize(key, runs[key])
    assert isinstance(summary, RunSummary) and summary.closed
    runs[key][3] = None  # retention's tombstone
    assert summarize(key, runs[key]) == "deleted by retention"
    del runs[key][3]
    assert summarize(key, runs[key]) == f"events missing: {len(run.events) - 1} of {len(run.events)} read"


def test_an_open_run_is_sampled_as_open(run: ArchivedRun) -> None:  # noqa: F811
    runs: dict[RunId, RawRun] = {}
    add_records(runs, _records(run)[:-1])
    key = (run.namespace, run.workflow_id, run.run_id)
    summary = summarize(key, runs[key])
    assert isinstance(summary, RunSummary) and not summary.closed


def test_since_is_an_age_or_an_iso_time() -> None:
    now = 10 * 86_400_000
    assert parse_since("7d", now) == 3 * 86_400_000
    assert parse_since("12h", now) == now - 12 * 3_600_000
    assert parse_since("30m", now) == now - 30 * 60_000
    assert parse_since("2w", 20 * 86_400_000) == 6 * 86_400_000
    assert parse_since("2026-01-02T03:04:05", now) == int(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp() * 1000)
    assert parse_since("2026-01-02T03:04:05+01:00", now) == int(
        datetime(2026, 1, 2, 2, 4, 5, tzinfo=UTC).timestamp() * 1000)
    with pytest.raises(ValueError, match="neither an age"):
        parse_since("a week", now)


def test_the_progress_bars_take_what_the_readers_tell() -> None:
    from ostinato.services.cli.replay import progress_bars

    with progress_bars(True) as tell:
        assert tell is not None
        tell("history", 0, 10)
        tell("history", 10, 10)
        tell("older runs", 3, 4)
    with progress_bars(False) as nothing:
        assert nothing is None


def test_archives_stop_downloading_once_no_older_file_could_enter_the_sample() -> None:
    from collections import Counter

    from ostinato.services.cli.replay_sources import archive_sample_full

    assert not archive_sample_full(SamplePlan(), Counter(), 10**6)
    assert archive_sample_full(SamplePlan(limit=3), Counter(), 3)
    # Per type, every type may still be waiting for its first run, unless the types are named.
    assert not archive_sample_full(SamplePlan(limit=1, per_type=True), Counter({"A": 5}), 5)
    named = SamplePlan(limit=2, per_type=True, workflow_types=frozenset({"A", "B"}))
    assert not archive_sample_full(named, Counter({"A": 2, "B": 1}), 3)
    assert archive_sample_full(named, Counter({"A": 2, "B": 2}), 4)
