"""The audit app: replay `<prefix>.history` from offset 0 with faust-streaming and keep a report file current.

Run from the repository root: `python -m examples.audit --output audit.json [--once]`. See README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust
from faust.types import TP

from examples.audit.read_committed import ReadCommittedApp
from examples.audit.report import DEFAULT_COMPENSATION_PREFIXES, DEFAULT_SLA_MS, AuditConfig, Auditor
from ostinato.schemas import codec
from ostinato.schemas.keys import run_key, split_key

HISTORY_EVENT = "ostinato.history.HistoryEvent"
REPORT_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Settings:
    """Where to read and what to write; environment variables first, command-line flags override them."""

    bootstrap: str
    prefix: str
    output: Path | None
    once: bool
    audit: AuditConfig
    loglevel: str = "warning"

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ) if env is None else env
        parser = argparse.ArgumentParser(prog="python -m examples.audit", description=__doc__)
        parser.add_argument("--kafka", default=env.get("OSTINATO_KAFKA", "127.0.0.1:9092"),
                            help="bootstrap servers, comma-separated (env OSTINATO_KAFKA)")
        parser.add_argument("--prefix", default=env.get("OSTINATO_TOPIC_PREFIX", "ostinato"),
                            help="topic prefix (env OSTINATO_TOPIC_PREFIX)")
        parser.add_argument("--output", default=env.get("OSTINATO_AUDIT_OUTPUT") or None,
                            help="report file, rewritten atomically every second (env OSTINATO_AUDIT_OUTPUT)")
        parser.add_argument("--once", action="store_true", default=env.get("OSTINATO_AUDIT_ONCE", "") == "1",
                            help="exit once caught up with the end offsets seen at start (env OSTINATO_AUDIT_ONCE=1)")
        parser.add_argument("--sla-ms", type=int, default=int(env.get("OSTINATO_AUDIT_SLA_MS", DEFAULT_SLA_MS)),
                            help="schedule-to-close threshold of an activity (env OSTINATO_AUDIT_SLA_MS)")
        parser.add_argument("--compensation-prefixes",
                            default=env.get("OSTINATO_AUDIT_COMPENSATION_PREFIXES",
                                            ",".join(DEFAULT_COMPENSATION_PREFIXES)),
                            help="activity type prefixes that mark compensations, comma-separated")
        parser.add_argument("--loglevel", default=env.get("OSTINATO_AUDIT_LOGLEVEL", "warning"))
        args = parser.parse_args(argv)
        prefixes = tuple(p.strip() for p in args.compensation_prefixes.split(",") if p.strip())
        return cls(args.kafka, args.prefix, Path(args.output) if args.output else None, args.once,
                   AuditConfig(args.sla_ms, prefixes), args.loglevel)


class Progress:
    """The auditor plus what the caught-up check needs: the next offset processed per partition."""

    def __init__(self, config: AuditConfig) -> None:
        self.auditor = Auditor(config)
        self.next_offset: dict[TP, int] = {}
        self.skipped = 0  # tombstones of deleted runs, and records that are not history events
        self.end_offsets: dict[TP, int] | None = None
        self.quiet_ticks = 0
        self.last_events = -1
        self.finished = False

    def take(self, tp: TP, offset: int, key: bytes | None, value: bytes | None) -> None:
        self.next_offset[tp] = offset + 1
        if key is None or value is None:
            self.skipped += 1
            return
        try:
            name, event = codec.decode(value)
        except codec.DecodeError:
            self.skipped += 1
            return
        if name != HISTORY_EVENT:
            self.skipped += 1
            return
        self.auditor.observe(run_key(*split_key(key.decode())[:3]), event)

    def report(self) -> dict[str, Any]:
        return {**self.auditor.report(), "skipped_records": self.skipped}


def write_atomically(path: Path, report: dict[str, Any]) -> None:
    """Readers see the previous report or this one, never half a file: write beside it, then rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def build_app(settings: Settings) -> tuple[faust.App, Progress]:
    """The faust app and the state it fills.

    A fresh consumer group per run with `earliest` reset makes every start a replay from offset 0, and nothing
    is ever committed that a later run could resume from. State lives in this process (the `memory://` store,
    and no faust Table: a table's changelog topic would be one more topic per run that nobody reads again).
    """
    app = ReadCommittedApp(
        f"ostinato-audit-{uuid.uuid4().hex[:12]}",
        broker=[f"kafka://{host.strip()}" for host in settings.bootstrap.split(",")],
        store="memory://",
        consumer_auto_offset_reset="earliest",
        topic_disable_leader=True,  # no `<id>-__assignor-__leader` topic per run
        web_enabled=False,
        autodiscover=False,
    )
    topic = app.topic(f"{settings.prefix}.history", key_type=bytes, value_type=bytes,
                      key_serializer="raw", value_serializer="raw")
    progress = Progress(settings.audit)

    @app.agent(topic)
    async def audit(stream: faust.StreamT[bytes]) -> AsyncIterator[None]:
        async for event in stream.events():
            message = event.message
            progress.take(message.tp, message.offset, message.key, message.value)
            yield None

    @app.timer(interval=REPORT_INTERVAL_S)  # type: ignore[untyped-decorator]  # faust's timer is untyped
    async def publish() -> None:
        if settings.output is not None:
            write_atomically(settings.output, progress.report())
        if settings.once and not progress.finished and await caught_up(app, topic.get_topic_name(), progress):
            finish(settings, progress)

    return app, progress


async def caught_up(app: faust.App, topic: str, progress: Progress) -> bool:
    """Whether every committed record below the end offsets seen at start has been counted.

    A partition is done when the agent processed up to its end offset, or when the consumer's position passed
    it: an aborted transaction or a commit marker at the tail is skipped by the consumer and never reaches the
    agent. The position runs ahead of the agent by the records in faust's buffers, so a partition done by
    position alone also needs a tick without new events.
    """
    assigned = [tp for tp in app.consumer.assignment() if tp.topic == topic]
    if not assigned:
        return False
    if progress.end_offsets is None:
        progress.end_offsets = dict(await app.consumer.highwaters(*assigned))
    exact = True
    for tp, end in progress.end_offsets.items():
        if progress.next_offset.get(tp, 0) >= end:
            continue
        position = await app.consumer.position(tp)
        if position is None or position < end:
            return False
        exact = False
    events = progress.auditor.events
    progress.quiet_ticks = progress.quiet_ticks + 1 if events == progress.last_events else 0
    progress.last_events = events
    return exact or progress.quiet_ticks >= 1


def finish(settings: Settings, progress: Progress) -> None:
    """Write the final report, print it, and stop the worker the way an operator would (SIGTERM: clean exit 0)."""
    progress.finished = True  # the timer may tick again while the worker stops
    report = progress.report()
    if settings.output is not None:
        write_atomically(settings.output, report)
    print(json.dumps(report, indent=2, sort_keys=True), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> None:
    settings = Settings.parse(argv)
    app, _ = build_app(settings)
    worker = faust.Worker(app, loglevel=settings.loglevel, quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main(sys.argv[1:])
