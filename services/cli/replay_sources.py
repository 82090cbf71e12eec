"""Where `ostinato replay` finds histories: saved files, the history topic (sampled), archived runs in S3 (sampled).

Each source yields `Candidate`s, so the gate (`replay_gate`) replays and reports them the same way whatever their
origin. Sampling itself is pure and lives in `ostinato.sdk.history_sample`; the topic is read by
`ostinato.sdk.history_window`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ostinato.sdk.history_sample import RunSummary, SamplePlan, pick
from ostinato.sdk.replayer import WorkflowHistory, load_events, read_archive
from ostinato.streams import events as ev

__all__ = ["Candidate", "Sampled", "archive_sample_full", "from_archive", "from_files", "from_kafka"]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Candidate:
    """One history to replay.

    `must_replay` is set for open runs and for files named on the command line: if the new code no longer has the
    run's workflow type, such a history fails the gate (an open run of a removed type would be stuck), while a
    closed run of a removed type is only counted as skipped.
    """

    label: str  # what the report calls it: a file, an s3:// URI, or namespace/workflow_id/run_id
    workflow_type: str
    open: bool
    must_replay: bool
    history: WorkflowHistory


@dataclass
class Sampled:
    """A source's candidates, plus the runs it could not use and why (deleted, first event not read...)."""

    candidates: list[Candidate] = field(default_factory=list)
    unreadable: Counter[str] = field(default_factory=Counter)
    considered: int = 0  # runs seen before sampling


def from_files(paths: list[Path]) -> Sampled:
    """Saved JSON histories and downloaded archives; `ValueError` names a file that is neither."""
    out = Sampled()
    for path in _expand(paths):
        if path.suffix == ".avro":
            try:
                _, workflow_id, run_id, events = read_archive(path)
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from None
        else:
            try:
                data = json.loads(path.read_text())
                events = load_events(data["events"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path} is not a saved history: {exc}") from None
            workflow_id, run_id = data.get("workflow_id", path.stem), data.get("run_id", "")
        out.considered += 1
        out.candidates.append(Candidate(str(path), _type_of(events), _is_open(events), True,
                                        WorkflowHistory(workflow_id, events, run_id)))
    return out


def _expand(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted([*path.glob("*.json"), *path.glob("*.avro")])
        elif path.exists():
            yield path
        else:
            raise ValueError(f"no such file or directory: {path}")


def _type_of(events: list[dict[str, object]]) -> str:
    if not events or events[0]["event_type"] != ev.WORKFLOW_EXECUTION_STARTED:
        return "(no start event)"
    return str(ev.attributes(events[0])["workflow_type"])


def _is_open(events: list[dict[str, object]]) -> bool:
    return not events or events[-1]["event_type"] not in ev.CLOSE_STATUS


def from_kafka(bootstrap: str, prefix: str, plan: SamplePlan, *, timeout: float = 30.0,
               progress: Progress | None = None) -> Sampled:
    """The most recent runs in the history topic, as `plan` says; only the chosen runs are decoded whole."""
    from ostinato.sdk.history_window import sample_runs

    sampled = sample_runs(bootstrap, prefix, plan, timeout=timeout, progress=progress)
    out = Sampled(unreadable=sampled.unreadable, considered=sampled.considered)
    for summary, events in sampled.runs:
        _, workflow_id, run_id = summary.run
        history = WorkflowHistory(workflow_id, events, run_id)
        out.candidates.append(Candidate("/".join(summary.run), summary.workflow_type, not summary.closed,
                                        not summary.closed, history))
    return out


def from_archive(uri: str, plan: SamplePlan, *, progress: Progress | None = None) -> Sampled:
    """The most recently closed archived runs below an s3:// prefix, as `plan` says.

    One listing orders the archive files by when they were written (a run is archived after it closes, so
    anything written before `--since` closed before it too and is never downloaded); files are then downloaded
    newest first until the sample is full: every type needs its own quota when `--per-type` is given without
    `--workflow-type`, so then every file in the window is read.

    Raises:
        ArchiveError: S3 cannot be listed or read.
        ValueError: the URI is not s3://bucket[/prefix].
    """
    from ostinato.connectors.archive import ArchiveError, S3Archive, read_container
    from ostinato.sdk.blobstore_s3 import s3_client

    store = S3Archive.from_uri(s3_client(), uri)
    # S3 keeps last-modified times to the second: a second's slack, and the close time decides exactly below.
    listed = [(key, at) for key, at in store.archives() if plan.since_ms is None or at >= plan.since_ms - 1000]
    out = Sampled()
    summaries: list[RunSummary] = []
    histories: dict[tuple[str, str, str], tuple[str, WorkflowHistory]] = {}
    taken: Counter[str] = Counter()
    for done, (key, _) in enumerate(listed):
        if progress is not None:
            progress("archives", done, len(listed))
        if archive_sample_full(plan, taken, len(summaries)):
            break
        try:
            archived = read_container(store.get(key))
        except ArchiveError as exc:
            if "not an Ostinato history archive" not in str(exc):
                raise
            out.unreadable["not an Ostinato history archive"] += 1
            continue
        run = (archived.namespace, archived.workflow_id, archived.run_id)
        summary = RunSummary(run, archived.workflow_type or _type_of(archived.events),
                             archived.events[0]["event_time_ms"] if archived.events else 0, archived.close_time_ms,
                             True)
        out.considered += 1
        if plan.wants(summary):
            taken[summary.workflow_type] += 1
            summaries.append(summary)
            histories[run] = (f"s3://{store.bucket}/{key}",
                              WorkflowHistory(archived.workflow_id, archived.events, archived.run_id))
    for summary in pick(summaries, plan):
        label, history = histories[summary.run]
        out.candidates.append(Candidate(label, summary.workflow_type, False, False, history))
    return out


def archive_sample_full(plan: SamplePlan, taken: Counter[str], total: int) -> bool:
    """Whether no file still to be read could enter the sample (files come newest first)."""
    if plan.limit is None:
        return False
    if not plan.per_type:
        return total >= plan.limit
    return bool(plan.workflow_types) and all(taken[t] >= plan.limit for t in plan.workflow_types)
