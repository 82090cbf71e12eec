"""`ostinato replay`: the pre-deploy replay gate, replaying recorded histories against the new workflow code.

Histories come from JSON files (as `ostinato.sdk.replayer.save_history` writes them), from the history topic
(`--from-kafka`) or from archived runs in S3 (`--archive`), the last two sampled (`--sample N --per-type --since 7d`).
Exit status: 0 everything replayed, 1 non-determinism (so it can gate a CI pipeline), 2 usage or connection errors.
Sources are in `replay_sources`, replay and the per-type report in `replay_gate`.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from ostinato.schemas.topics import DEFAULT_PREFIX
from ostinato.services.cli.kafka_options import KafkaConfigOpt, use_kafka_config

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

if TYPE_CHECKING:  # imported where used: every `ostinato` command imports this module, few replay
    from ostinato.sdk.history_sample import SamplePlan
    from ostinato.sdk.replayer import Replayer
    from ostinato.services.cli.replay_gate import GateReport
    from ostinato.services.cli.replay_sources import Progress


def _replayer(target: str) -> Replayer:
    from ostinato.sdk.replayer import Replayer
    from ostinato.sdk.run import WorkerTargetError, load_target

    try:
        found: Any = load_target(target)
    except WorkerTargetError as exc:
        raise typer.BadParameter(str(exc)) from None
    if isinstance(found, Replayer):
        return found
    if isinstance(found, dict):
        found = found.get("workflows", [])
    if isinstance(found, type):
        found = [found]
    if not isinstance(found, list | tuple) or not found:
        raise typer.BadParameter(f"{target} must name a workflow class, a list of them, Worker options or a Replayer")
    return Replayer(workflows=list(found))


def _plan(sample: int | None, per_type: bool, since: str | None, types: list[str] | None) -> SamplePlan:
    from ostinato.sdk.history_sample import SamplePlan, parse_since

    if sample is not None and sample < 1:
        raise typer.BadParameter("--sample must be at least 1")
    if per_type and sample is None:
        raise typer.BadParameter("--per-type needs --sample N (how many runs of each type)")
    since_ms = None
    if since is not None:
        try:
            since_ms = parse_since(since, int(time.time() * 1000))
        except ValueError as exc:
            raise typer.BadParameter(f"--since: {exc}") from None
    return SamplePlan(sample, per_type, since_ms, frozenset(types or ()))


@contextlib.contextmanager
def progress_bars(show: bool) -> Iterator[Progress | None]:
    """A progress bar per thing being read (on stderr, only on a terminal): a long topic takes a while."""
    if not show:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bars

    with Bars(TextColumn("reading {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
              console=err_console, transient=True) as bars:
        tasks: dict[str, Any] = {}

        def tell(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bars.add_task(what, total=total)
            bars.update(tasks[what], completed=done, total=total)

        yield tell


def replay(
    workflows: Annotated[str, typer.Argument(help="module:attr naming the new workflow code: a workflow class, a list "
                                                  "of them, Worker options (a dict) or a Replayer.")],
    paths: Annotated[list[Path] | None, typer.Argument(help="History JSON files or directories of them.")] = None,
    from_kafka: Annotated[bool, typer.Option("--from-kafka", help="Replay runs from the history topic (every run, "
                                                                  "or the sample the options below choose).")] = False,
    archive: Annotated[list[str] | None, typer.Option(
        "--archive", help="s3://bucket/prefix: replay archived runs (.avro) below it; repeatable. S3 settings "
                          "from OSTINATO_S3_ENDPOINT/_ACCESS_KEY/_SECRET_KEY or boto3's chain.")] = None,
    sample: Annotated[int | None, typer.Option(
        "--sample", help="Replay only the N most recent runs (by their latest event: close time, or last activity if "
                         "open).")] = None,
    per_type: Annotated[bool, typer.Option("--per-type", help="--sample N counts per workflow type.")] = False,
    since: Annotated[str | None, typer.Option("--since", help="Only runs with an event since then: an age (7d, 12h, "
                                                              "30m) or an ISO time. Kafka is sought there by "
                                                              "timestamp, not read from the start.")] = None,
    workflow_type: Annotated[list[str] | None, typer.Option("--workflow-type", help="Only this workflow type; "
                                                                                    "repeatable.")] = None,
    kafka: Annotated[str, typer.Option("--kafka", envvar="OSTINATO_KAFKA")] = "127.0.0.1:9092",
    kafka_config: KafkaConfigOpt = None,
    prefix: Annotated[str, typer.Option("--prefix", envvar="OSTINATO_TOPIC_PREFIX")] = DEFAULT_PREFIX,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the broker, and for a partition "
                                                             "held by an open transaction.")] = 30.0,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json.")] = "table",
    as_json: Annotated[bool, typer.Option("--json", help="The same as -o json: a report for CI systems.")] = False,
) -> None:
    """Replay histories with the new code: the pre-deploy gate. Exit 0 all replayed, 1 non-determinism (or an open run
    of a removed workflow type), 2 usage or connection errors, or nothing to replay."""
    from ostinato.connectors.archive import ArchiveError
    from ostinato.kafka.clients import KafkaConfigError, KafkaUnavailable
    from ostinato.kafka.history_reader import HistoryReadError
    from ostinato.services.cli.replay_gate import replay_candidates
    from ostinato.services.cli.replay_sources import Sampled, from_archive, from_files
    from ostinato.services.cli.replay_sources import from_kafka as kafka_sample

    replayer = _replayer(workflows)
    plan = _plan(sample, per_type, since, workflow_type)
    json_out = as_json or output == "json"
    sources: list[Sampled] = []
    try:
        sources.append(from_files(paths or []))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    with progress_bars(err_console.is_terminal) as tell:
        try:
            for uri in archive or []:
                sources.append(from_archive(uri, plan, progress=tell))
            if from_kafka:
                use_kafka_config(kafka_config)
                sources.append(kafka_sample(kafka, prefix, plan, timeout=timeout, progress=tell))
        except (ValueError, ArchiveError) as exc:
            raise typer.BadParameter(f"--archive: {exc}") from None
        except (HistoryReadError, KafkaUnavailable, KafkaConfigError) as exc:
            err_console.print(f"[red]cannot read the history:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from None
    report = replay_candidates(replayer, [c for s in sources for c in s.candidates])
    for s in sources:
        report.unreadable.update(s.unreadable)
        report.considered += s.considered
    if json_out:
        sampled = {"sample": plan.limit, "per_type": plan.per_type, "since_ms": plan.since_ms,
                   "workflow_types": sorted(plan.workflow_types)}
        print(json.dumps({**report.to_dict(), "plan": sampled}, indent=2))
    else:
        _print_report(report)
    if not report.replayed and not report.failures:
        err_console.print("[yellow]nothing was replayed:[/yellow] give history files, --archive or --from-kafka"
                          + (" (no run matched the sample)" if report.considered else ""))
        raise typer.Exit(2)
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def _print_report(report: GateReport) -> None:
    from rich.table import Table

    for name, error in report.failures:  # one line each, whole: names and messages are what people grep for
        console.print(f"[red]non-deterministic[/red] {name}: {error}", highlight=False)
    if report.types:
        table = Table("workflow type", "replayed", "passed", "failed", "skipped", "open", "first failure")
        for name, t in sorted(report.types.items()):
            table.add_row(name, str(t.replayed), str(t.passed), str(t.failed), str(t.skipped), str(t.open_runs),
                          t.first_failure or "-")
        console.print(table)
    unreadable = sum(report.unreadable.values())
    console.print(f"{report.replayed} histories replayed, {len(report.failures)} non-deterministic"
                  + (f", {report.skipped} of workflow types not given skipped" if report.skipped else "")
                  + (f", {unreadable} runs not replayable ("
                     + ", ".join(f"{why}: {n}" for why, n in sorted(report.unreadable.items())) + ")"
                     if unreadable else ""))
