"""Test support for the core: complete command records, and a harness that checks replay after every step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ostinato.schemas import codec
from ostinato.streams.appliers import replay
from ostinato.streams.config import Config
from ostinato.streams.deciders import decide
from ostinato.streams.model import Workflow, durable_bytes
from ostinato.streams.writer import Step

Record = dict[str, Any]
NS, WF = "default", "order-1"


def command(name: str, body: Record | None = None, *, run_id: str = "", request_id: str = "req",
            reply_partition: int | None = 0, identity: str = "tester", namespace: str = NS,
            workflow_id: str = WF) -> Record:
    """A command as the processor would read it off Kafka: encoded and decoded, so every default is filled."""
    record = {"namespace": namespace, "workflow_id": workflow_id, "run_id": run_id, "request_id": request_id,
              "identity": identity, "time_ms": 0, "reply_partition": reply_partition,
              "body": ("ostinato.command." + name, body or {})}
    return codec.decode(codec.encode("ostinato.command.Command", record))[1]


def wf_command(name: str, body: Record | None = None) -> tuple[str, Record]:
    """A workflow command (inside RespondWorkflowTaskCompleted), with defaults filled the same way."""
    full = "ostinato.command." + name
    return full, codec.decode(codec.encode(full, body or {}))[1]


@dataclass
class Harness:
    """Drives one workflow through `decide`, keeps its history, and checks after every step that replaying the
    (encoded, then decoded) history rebuilds the durable state byte for byte."""

    config: Config = field(default_factory=Config)
    now: int = 1_000_000
    workflow: Workflow = field(default_factory=lambda: Workflow(NS, WF))
    history: list[tuple[str, Record]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    counter: int = 0

    def send(self, name: str, body: Record | None = None, **envelope: Any) -> Step:
        self.counter += 1
        envelope.setdefault("request_id", f"req-{self.counter}")
        step = decide(self.workflow, command(name, body, **envelope), self.now, self.config, offset=self.counter)
        self.history.extend(step.events)
        self.steps.append(step)
        self.check_replay()
        return step

    def check_replay(self) -> None:
        wire = [(run_id, codec.decode(codec.encode("ostinato.history.HistoryEvent", e))[1])
                for run_id, e in self.history]
        rebuilt = replay(Workflow(NS, WF), wire)
        assert set(self.workflow.runs) <= set(rebuilt.runs)  # deleted runs (retention) leave history behind them
        for run_id, run in self.workflow.runs.items():
            assert durable_bytes(rebuilt.runs[run_id]) == durable_bytes(run), f"run {run_id} differs after replay"
        if self.workflow.current is not None:
            assert rebuilt.current == self.workflow.current

    @property
    def run_id(self) -> str:
        assert self.workflow.current is not None
        return self.workflow.current.run_id

    @property
    def run(self) -> Any:
        return self.workflow.runs[self.run_id]

    def events(self, run_id: str | None = None) -> list[str]:
        rid = run_id or self.run_id
        return [e["event_type"] for r, e in self.history if r == rid]

    def start(self, **body: Any) -> Step:
        return self.send("StartWorkflowExecution", {"workflow_type": "Order", "task_queue": "orders", **body})

    def complete_task(self, *commands: tuple[str, Record], **extra: Any) -> Step:
        task = self.run.workflow_task
        assert task is not None, "no workflow task in flight"
        return self.send("RespondWorkflowTaskCompleted", {
            "scheduled_event_id": task.scheduled_event_id, "attempt": task.attempt, "commands": list(commands),
            **extra}, run_id=self.run_id)
