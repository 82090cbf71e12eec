"""The replayer: run workflow code against recorded histories and report non-determinism (use it in CI before
deploying changed workflow code)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ostinato.sdk import exceptions as exc
from ostinato.sdk._definitions import definition_of
from ostinato.sdk._instance import WorkflowInstance
from ostinato.sdk._workflow_worker import intercepted
from ostinato.sdk.data import DEFAULT, DataConverter
from ostinato.sdk.interceptor import Interceptor, workflow_interceptor_classes

Record = dict[str, Any]


@dataclass
class ReplayResult:
    workflow_id: str
    run_id: str
    failure: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass
class ReplayResults:
    results: list[ReplayResult] = field(default_factory=list)

    @property
    def failed(self) -> list[ReplayResult]:
        return [r for r in self.results if not r.ok]

    def summary(self) -> str:
        return f"{len(self.results)} histories replayed, {len(self.failed)} non-deterministic"


class WorkflowHistory(list[Record]):
    """A run's history (Temporal's `WorkflowHistory`): its events, in order, with the workflow id and run id. It is
    the list of event records itself, so code that treats `handle.fetch_history()` as a list keeps working."""

    def __init__(self, workflow_id: str, events: Iterable[Record], run_id: str = "") -> None:
        super().__init__(events)
        self.workflow_id = workflow_id
        self.run_id = run_id

    @property
    def events(self) -> list[Record]:
        return list(self)

    @classmethod
    def from_json(cls, workflow_id: str, history: str | dict[str, Any] | list[Any]) -> WorkflowHistory:
        """A history saved as JSON: `ostinato workflow show -o json`, `save_history`, `to_json()` (an object with
        `events`), or a bare list of events. Ostinato's event records, not Temporal's protobuf JSON."""
        data = json.loads(history) if isinstance(history, str) else history
        if isinstance(data, list):
            return cls(workflow_id, load_events(data))
        if not isinstance(data, dict) or not isinstance(data.get("events"), list):
            raise ValueError("a JSON history is a list of events or an object with an `events` list")
        return cls(workflow_id, load_events(data["events"]), str(data.get("run_id") or ""))

    def to_json(self) -> str:
        return json.dumps({"workflow_id": self.workflow_id, "run_id": self.run_id, "events": _jsonable(list(self))})


@dataclass(frozen=True)
class WorkflowReplayResult:
    history: WorkflowHistory
    replay_failure: Exception | None  # a NondeterminismError when the code no longer matches the history


@dataclass(frozen=True)
class WorkflowReplayResults:
    replay_failures: dict[str, Exception]  # by run id (the workflow id for a history without one)


class Replayer:
    """Runs workflow code against recorded histories (Temporal's names: `replay_workflow`, `replay_workflows`).

    Args:
        workflows: the `@workflow.defn` classes the histories run.
        data_converter: the namespace's converter.
        interceptors: worker interceptors, which replay sees as a worker would.
    """

    def __init__(self, *, workflows: Sequence[type], data_converter: DataConverter = DEFAULT,
                 interceptors: Sequence[Interceptor] = (), namespace: str = "default") -> None:
        self.definitions = {definition_of(w).name: definition_of(w) for w in workflows}
        self.converter = data_converter
        self.interceptor_classes = workflow_interceptor_classes(interceptors)
        self.namespace = namespace

    async def replay_workflow(self, history: WorkflowHistory, *,
                              raise_on_replay_failure: bool = True) -> WorkflowReplayResult:
        """Replay one run; raises its NondeterminismError unless `raise_on_replay_failure` is False (then the result
        carries it)."""
        outcome = self.replay(list(history), workflow_id=history.workflow_id, run_id=history.run_id or "replay",
                              namespace=self.namespace)
        failure = outcome.failure
        if failure is not None and not isinstance(failure, Exception):
            failure = exc.NondeterminismError(f"replay failed: {failure!r}")
        if failure is not None and raise_on_replay_failure:
            raise failure
        return WorkflowReplayResult(history, failure)

    async def replay_workflows(self, histories: Iterable[WorkflowHistory] | AsyncIterator[WorkflowHistory], *,
                               raise_on_replay_failure: bool = True) -> WorkflowReplayResults:
        """Replay several runs; the first failure raises unless `raise_on_replay_failure` is False, in which case
        every history is replayed and the failures are returned by run id."""
        failures: dict[str, Exception] = {}
        async with self.workflow_replay_iterator(histories) as results:
            async for result in results:
                if result.replay_failure is not None:
                    if raise_on_replay_failure:
                        raise result.replay_failure
                    history = result.history
                    failures[history.run_id or history.workflow_id] = result.replay_failure
        return WorkflowReplayResults(failures)

    @contextlib.asynccontextmanager
    async def workflow_replay_iterator(
            self, histories: Iterable[WorkflowHistory] | AsyncIterator[WorkflowHistory],
    ) -> AsyncIterator[AsyncIterator[WorkflowReplayResult]]:
        """`async with replayer.workflow_replay_iterator(histories) as results: async for result in results:`, each
        history's result as it is replayed (failures in the results, never raised), as Temporal has it."""

        async def each() -> AsyncIterator[WorkflowReplayResult]:
            if isinstance(histories, AsyncIterator):
                async for history in histories:
                    yield await self.replay_workflow(history, raise_on_replay_failure=False)
            else:
                for history in histories:
                    yield await self.replay_workflow(history, raise_on_replay_failure=False)

        yield each()

    def replay(self, events: list[Record], *, workflow_id: str = "replay", run_id: str = "replay",
               namespace: str = "default") -> ReplayResult:
        """Replay one run's history; the result's `failure` is a NondeterminismError when the code diverges."""
        if not events or events[0]["event_type"] != "WORKFLOW_EXECUTION_STARTED":
            return ReplayResult(workflow_id, run_id, ValueError("a history starts with WORKFLOW_EXECUTION_STARTED"))
        workflow_type = events[0]["attributes"][1]["workflow_type"]
        definition = self.definitions.get(workflow_type)
        if definition is None:
            return ReplayResult(workflow_id, run_id, exc.NondeterminismError(
                f"workflow type {workflow_type!r} is not among the replayer's workflows"))
        instance = intercepted(WorkflowInstance(definition, namespace, workflow_id, run_id, self.converter),
                               self.interceptor_classes)
        outcome = instance.process(events, None)
        return ReplayResult(workflow_id, run_id, outcome.failure)

    def replay_all(self, histories: Iterable[tuple[str, str, list[Record]]]) -> ReplayResults:
        results = ReplayResults()
        for workflow_id, run_id, events in histories:
            results.results.append(self.replay(events, workflow_id=workflow_id, run_id=run_id))
        return results

    def replay_archive(self, archive: Path | bytes) -> ReplayResult:
        """A closed run archived to S3 (an Avro object container file, downloaded, or its bytes)."""
        namespace, workflow_id, run_id, events = read_archive(archive)
        return self.replay(events, workflow_id=workflow_id, run_id=run_id, namespace=namespace)

    def replay_file(self, path: Path) -> ReplayResult:
        """A history saved as JSON (`ostinato workflow show -o json` or `save_history`), or an archive (`.avro`)."""
        if path.suffix == ".avro":
            return self.replay_archive(path)
        data = json.loads(path.read_text())
        return self.replay(load_events(data["events"]), workflow_id=data.get("workflow_id", path.stem),
                           run_id=data.get("run_id", ""))


def sample_histories(bootstrap: str, *, prefix: str = "ostinato", sample: int | None = None, per_type: bool = False,
                     since: datetime | timedelta | None = None, workflow_types: Iterable[str] = (),
                     timeout: float = 30.0) -> list[WorkflowHistory]:
    """Recent histories straight from the history topic, for `Replayer.replay_workflows` in a CI test: what
    `ostinato replay --from-kafka --sample N --per-type --since 7d` replays, open runs included.

    Args:
        bootstrap: the Kafka bootstrap servers (settings for SASL/TLS from `OSTINATO_KAFKA_CONFIG`, as for workers).
        prefix: the cluster's topic prefix.
        sample: at most this many runs, the most recent (by their latest event) first; None for every run.
        per_type: `sample` counts per workflow type, so a busy type cannot crowd a rare one out.
        since: only runs with an event since then (a time, or an age); the topic is sought there by timestamp
            rather than read from its start, and a run begun earlier is completed from older records.
        workflow_types: only these types (every type when empty).
        timeout: seconds to wait for the broker, or for a partition held by an open transaction.

    Raises:
        KafkaUnavailable: no broker answers.
        HistoryReadError: the topic is missing, or a partition stays behind an open transaction.
    """
    from ostinato.sdk.history_sample import SamplePlan
    from ostinato.sdk.history_window import sample_runs

    if isinstance(since, timedelta):
        since = datetime.now(UTC) - since
    since_ms = None if since is None else int(since.timestamp() * 1000)
    plan = SamplePlan(sample, per_type, since_ms, frozenset(workflow_types))
    return [WorkflowHistory(summary.run[1], events, summary.run[2])
            for summary, events in sample_runs(bootstrap, prefix, plan, timeout=timeout).runs]


def read_archive(archive: Path | bytes) -> tuple[str, str, str, list[Record]]:
    """(namespace, workflow id, run id, events) of an archive file; any Avro reader could do the same."""
    import io

    import fastavro

    data = archive.read_bytes() if isinstance(archive, Path) else archive
    try:
        reader = fastavro.reader(io.BytesIO(data), return_record_name=True, return_record_name_override=True)
        events: list[Record] = list(reader)  # type: ignore[arg-type]
        meta = reader.metadata
        return meta["ostinato.namespace"], meta["ostinato.workflow_id"], meta["ostinato.run_id"], events
    except (ValueError, KeyError, EOFError) as error:
        raise ValueError(f"not an Ostinato history archive: {error}") from error


def save_history(path: Path, workflow_id: str, run_id: str, events: list[Record]) -> None:
    """Write a history as JSON (bytes as base64, union branches as [name, value]) for `Replayer.replay_file`."""
    path.write_text(json.dumps({"workflow_id": workflow_id, "run_id": run_id, "events": _jsonable(events)},
                               indent=1))


def load_events(raw: list[Any]) -> list[Record]:
    return [_from_json(e) for e in raw]


def _jsonable(value: Any) -> Any:
    import base64

    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, tuple):
        return {"$union": value[0], "value": _jsonable(value[1])}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _from_json(value: Any) -> Any:
    import base64

    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return base64.b64decode(value["$bytes"])
        if set(value) == {"$union", "value"}:
            return (value["$union"], _from_json(value["value"]))
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value
