"""The replayer: run workflow code against recorded histories and report non-determinism (use it in CI before
deploying changed workflow code)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ostinato.sdk import exceptions as exc
from ostinato.sdk._definitions import definition_of
from ostinato.sdk._instance import WorkflowInstance
from ostinato.sdk.data import DEFAULT, DataConverter

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


class Replayer:
    def __init__(self, *, workflows: Sequence[type], data_converter: DataConverter = DEFAULT) -> None:
        self.definitions = {definition_of(w).name: definition_of(w) for w in workflows}
        self.converter = data_converter

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
        instance = WorkflowInstance(definition, namespace, workflow_id, run_id, self.converter)
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
